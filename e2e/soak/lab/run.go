package lab

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sortie-soak/sortie/internal/cli"
)

const usage = `Usage: soak lab <command> [flags]

A real Kubernetes cluster on this machine, for the tests of record of the
cluster path: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
one containerd + runc and one kubelet per node (two by default), kube-proxy,
a NetworkPolicy enforcer (kube-router's firewall), CoreDNS and a loopback
OCI registry holding this checkout's images. It needs
root, Debian 12 and Go; nothing it starts is reachable from off the machine,
and nothing in it reaches off the machine.

Commands:
  build    build the cluster binaries into the cache (or find them there)
  up       build what is missing, start the lab, push the images
  down     stop everything the lab started and remove what it made
  status   say what of the lab runs

Run "soak lab <command> --help" for a command's flags and lines.
Exit: 0 done, 1 failed (down: something is left), 2 unusable flags.
`

const buildUsage = `Usage: soak lab build [--cache DIR] [--source DIR]

Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
kube-proxy and kubectl (module ` + BuildDir + `/kube, k8s.io/kubernetes at the
version its go.mod pins) and CoreDNS without forward, pause and the loopback
registry (module ` + BuildDir + `/tools), and the NetworkPolicy enforcer
kube-router-netpol with its probe netpol-probe (module ` + BuildDir + `/netpol,
kube-router's network policy controller at the version its go.mod pins)
into DIR/bin/<module>-<version>-<hash>,
where <hash> covers the module's files, the Go toolchain and the flags. An
entry that is there already is reused. A cold build of the Kubernetes
binaries takes 8 to 30 minutes on two cores; a warm one nothing.

Lines (stdout):
  BUILT <module> <version> <dir> in <duration>
  CACHED <module> <version> <dir>

Flags:
`

const upUsage = `Usage: soak lab up [--nodes 2] [--state DIR] [--cache DIR] [--source DIR]

Starts the lab: installs (or checks) the pinned Debian packages, builds or
reuses the cluster binaries, makes a new PKI and kubeconfig, the lab's
bridge (sortie0: the API server on ` + APIServerIP + `, node i on 10.245.0.i)
and iptables rules, starts the registry, etcd, a containerd per node, the
control plane, a kubelet per node and kube-proxy, waits for every node
Ready and starts the NetworkPolicy enforcer (kube-router's firewall alone,
one for all nodes, serving no port; ready when its FORWARD chain is in
place); then CoreDNS (no forward), the default StorageClass ` + StorageClassName + ` with
report volumes owned by uid 65532, the namespaces ` + RunNamespace + ` and ` + TargetNamespace + `
with two fixture targets, and pushes this checkout's images
(sortie-images build --push). It writes DIR/kubeconfig (context ` + ContextName + `),
DIR/values.yaml (the chart's images from the registry), DIR/targets.txt
and DIR/lab.json, and prints the soak run command that uses them.

Network rules: servers bind 127.0.0.1 or the lab's bridge; pods have no
default route and are never masqueraded; FORWARD drops pod traffic to or
from any other interface; CoreDNS forwards nothing; every registry name
resolves to the loopback registry, and containerd's proxy is a closed
loopback port.

Lines (stdout): PACKAGES, BUILT|CACHED, NETWORK, STARTED <name> pid=...,
PUSHED, READY node|deployment ..., then
  LAB UP nodes=<n> kubeconfig=<file> context=<name> registry=<addr> in <duration>
  USE soak run e2e --kubeconfig ... --context ... --namespace ... --targets ... --values ...
A failed up says where it stopped; soak lab down removes what it started.

Flags:
`

const downUsage = `Usage: soak lab down [--state DIR]

Stops the lab: deletes every workload and pod through the API (so each
pod's network goes the normal way), stops every process of the lab's pid
files by its pid (SIGTERM, SIGKILL after --grace), kills the containers and
shims left, removes the cluster's iptables chains (kube-router's among
them) and the lab's rules, the NetworkPolicy enforcer's ipsets, the
bridges and veths, the pods' network namespaces, the mounts under DIR and
the lab's cgroups, restores the kernel settings up saved, and removes the
cluster's data. Then it checks that nothing is left.

Lines (stdout): STOPPED, KILLED, REMOVED, UNMOUNTED, WARNING, then
  LEFTOVER <kind> <what>   (process, link, mount, netns, iptables, ipset, cgroup, sysctl, file)
  LAB DOWN clean in <duration> | LAB DOWN leftovers=<n> in <duration>
Exit: 0 clean, 1 something is left.

Flags:
`

const statusUsage = `Usage: soak lab status [--state DIR]

Says what of the lab runs: each recorded process, its pid and log; the
kubeconfig; each node's readiness and the number of pods when the API
server answers.

Lines (stdout):
  PROCESS <name> pid=<pid> running|NOT RUNNING log=<file>
  KUBECONFIG <file> context=<name> registry=<addr> up since <time>
  NODE <name> Ready | NODE <name> NOT READY: <why>
  LAB UP processes=<n> | LAB DOWN state=<dir>: no process recorded
Exit: 0 up or down, 1 a recorded process is not running.

Flags:
`

// Run is `soak lab`.
func Run(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.Usage(errors.New("lab: no command"))
	}
	cmd, rest := args[0], args[1:]
	doc := map[string]string{"build": buildUsage, "up": upUsage, "down": downUsage, "status": statusUsage}
	if cmd == "-h" || cmd == "--help" || cmd == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	d, ok := doc[cmd]
	if !ok {
		fmt.Fprint(stderr, usage)
		return cli.Usage(fmt.Errorf("lab: unknown command %q", cmd))
	}
	o, help, err := ParseFlags(env, cmd, d, rest, stderr)
	if help || err != nil {
		return err
	}
	switch cmd {
	case "build":
		_, err = Build(ctx, env, o, stdout)
	case "up":
		err = Up(ctx, env, o, stdout)
	case "down":
		err = Down(ctx, env, o, stdout)
	case "status":
		err = Status(ctx, env, o, stdout)
	}
	var ee *cli.ExitError
	if err != nil && !errors.As(err, &ee) {
		err = cli.Fail(err)
	}
	return err
}

// ParseFlags parses a lab command's flags into validated options.
func ParseFlags(env Env, cmd, doc string, args []string, stderr io.Writer) (o Options, help bool, err error) {
	o = DefaultOptions(env.Getenv)
	fs := flag.NewFlagSet("soak lab "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doc); fs.PrintDefaults() }
	o.Flags(fs, cmd)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, true, nil
		}
		return o, false, cli.Usage(err)
	}
	if fs.NArg() > 0 {
		return o, false, cli.Usage(fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if err := o.Validate(); err != nil {
		return o, false, cli.Usage(err)
	}
	return o, false, nil
}
