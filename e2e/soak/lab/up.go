package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/internal/kube"
	"github.com/sortie-soak/sortie/record"
)

// Env is what the lab takes from outside the process.
type Env struct {
	// Getenv reads the lab's environment (XDG_CACHE_HOME).
	Getenv func(string) string
	// Environ is the environment of the processes the lab starts.
	Environ []string
	// Euid is the effective user id (the lab needs root).
	Euid  int
	Clock clock.Clock
}

// RealEnv is the environment of the soak binary.
func RealEnv() Env {
	return Env{Getenv: os.Getenv, Environ: os.Environ(), Euid: os.Geteuid(), Clock: clock.Real{}}
}

// lab is one run of a lab command.
type lab struct {
	o   Options
	env Env
	l   Layout
	x   Exec // host commands
	gox Exec // go commands: static builds
	out io.Writer
	clk clock.Clock
	t0  time.Time
}

func newLab(env Env, o Options, out io.Writer) *lab {
	return &lab{
		o: o, env: env, l: o.Layout(), out: out, clk: env.Clock, t0: env.Clock.Now(),
		x:   HostExec{Env: env.Environ},
		gox: HostExec{Env: append(append([]string(nil), env.Environ...), "CGO_ENABLED=0")},
	}
}

func (b *lab) line(format string, args ...any) { fmt.Fprintf(b.out, format+"\n", args...) }

func (b *lab) since(t time.Time) string {
	return b.clk.Now().Sub(t).Round(100 * time.Millisecond).String()
}

// Build builds or finds the cluster binaries (soak lab build).
func Build(ctx context.Context, env Env, o Options, out io.Writer) (Binaries, error) {
	if err := o.ValidateSource(); err != nil {
		return nil, err
	}
	b := newLab(env, o, out)
	bins, _, err := BuildAll(ctx, o, b.gox, b.clk.Now, out)
	return bins, err
}

// Up builds what is missing and starts the lab (soak lab up). On an error
// it stops where it is and says so; `down` removes what was started.
func Up(ctx context.Context, env Env, o Options, out io.Writer) error {
	if env.Euid != 0 {
		return errors.New("soak lab up needs root (it starts containerd and kubelets and changes the network)")
	}
	if err := o.ValidateSource(); err != nil {
		return err
	}
	b := newLab(env, o, out)
	if err := b.refuseRunning(); err != nil {
		return err
	}
	if err := EnsurePackages(ctx, b.x, o.Packages == "install", out); err != nil {
		return err
	}
	bins, _, err := BuildAll(ctx, o, b.gox, b.clk.Now, out)
	if err != nil {
		return err
	}
	b.t0 = b.clk.Now() // the start-up's own time, after the build
	if err := b.up(ctx, bins); err != nil {
		b.line("HINT soak lab down --state %s stops what was started", o.State)
		return err
	}
	return nil
}

func (b *lab) up(ctx context.Context, bins Binaries) error {
	if err := b.prepare(); err != nil {
		return err
	}
	if err := b.network(ctx); err != nil {
		return err
	}
	ds := Daemons(b.l, bins, b.o.Registry)
	imgs, err := b.registry(ctx, ds, bins)
	if err != nil {
		return err
	}
	cs, err := b.cluster(ctx, ds, imgs)
	if err != nil {
		return err
	}
	return b.finish(ctx, cs, imgs)
}

// refuseRunning fails when a process of the lab still runs.
func (b *lab) refuseRunning() error {
	procs, err := Procs(b.l)
	if err != nil {
		return err
	}
	var alive []string
	for _, p := range procs {
		if p.Alive {
			alive = append(alive, fmt.Sprintf("%s (pid %d)", p.Name, p.PidFile.PID))
		}
	}
	if len(alive) > 0 {
		return fmt.Errorf("the lab in %s is up: %s; run soak lab down first", b.o.State, strings.Join(alive, ", "))
	}
	return nil
}

// prepare empties the cluster's data of an earlier lab and writes the PKI.
// It refuses while anything is mounted under the state directory: removing
// the data then would reach into the mounts.
func (b *lab) prepare() error {
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	if m := mountsUnder(mounts, b.o.State); len(m) > 0 {
		return fmt.Errorf("still mounted under %s: %s; run soak lab down first", b.o.State, strings.Join(m, ", "))
	}
	for _, d := range []string{b.l.Var(), b.l.Run(), b.l.Pids()} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	_ = os.Remove(b.l.Manifest())
	for _, d := range []string{b.l.Var(), b.l.Run(), b.l.Pids(), b.l.Logs(), b.l.Etc()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, n := range b.l.NodeList() {
		if err := os.MkdirAll(n.PodLogs, 0o755); err != nil {
			return err
		}
	}
	if err := b.truncateLogs(); err != nil {
		return err
	}
	return WritePKI(b.l, b.clk.Now())
}

func (b *lab) truncateLogs() error {
	logs, _ := filepath.Glob(filepath.Join(b.l.Logs(), "*.log"))
	for _, f := range logs {
		if err := os.Truncate(f, 0); err != nil {
			return err
		}
	}
	return nil
}

// network saves the kernel settings, makes the lab's bridge, adds the
// rules and turns on forwarding.
func (b *lab) network(ctx context.Context) error {
	if err := SaveBaseline(b.l); err != nil {
		return err
	}
	if _, err := b.x.Run(ctx, "ip", "link", "show", LabBridge); err == nil {
		// An earlier lab's bridge: make it anew, with this lab's addresses.
		if err := runAll(ctx, b.x, [][]string{{"ip", "link", "del", LabBridge}}); err != nil {
			return err
		}
	}
	if err := runAll(ctx, b.x, BridgeCommands(b.l)); err != nil {
		return fmt.Errorf("lab bridge: %w", err)
	}
	for _, r := range Rules() {
		if err := ensureRule(ctx, b.x, r); err != nil {
			return err
		}
	}
	for _, k := range Sysctls {
		if v, ok := LabSysctls[k]; ok {
			if err := writeSysctl(k, v); err != nil {
				return fmt.Errorf("sysctl %s=%s: %w", k, v, err)
			}
		}
	}
	b.line("NETWORK bridge=%s addresses=%s pod-bridges=%s* rules=%d (no NAT)", LabBridge, strings.Join(append([]string{APIServerIP}, nodeIPs(b.l)[1:]...), ","), PodBridgePrefix, len(Rules()))
	return nil
}

// registry starts the loopback registry and pushes the images the cluster
// itself runs: pause, CoreDNS and the fixture target.
func (b *lab) registry(ctx context.Context, ds []Daemon, bins Binaries) (map[string]string, error) {
	if err := b.start(ctx, daemonByName(ds, "registry"), HTTPOK("http://"+b.o.Registry+"/v2/")); err != nil {
		return nil, err
	}
	t := b.clk.Now()
	target, err := BuildTarget(ctx, b.o, b.l.Path("var", "bin"))
	if err != nil {
		return nil, err
	}
	imgs := map[string]string{}
	for name, bin := range map[string]string{"pause": bins["pause"], "coredns": bins["coredns"], TargetBinary.Name: target, ProbeImage: bins["netpol-probe"]} {
		ref, err := PushBinary(ctx, b.o.Registry, name, bin)
		if err != nil {
			return nil, err
		}
		imgs[name] = ref
	}
	b.line("PUSHED pause, coredns, %s, %s to %s in %s", TargetBinary.Name, ProbeImage, b.o.Registry, b.since(t))
	return imgs, nil
}

// start starts d and waits until ready is met (or d dies); with no ready,
// what d serves is waited for later (the kubelets by their nodes).
func (b *lab) start(ctx context.Context, d Daemon, ready Cond) error {
	t := b.clk.Now()
	p, err := StartDaemon(b.l, b.env.Environ, d)
	if err != nil {
		return err
	}
	if ready == nil {
		b.line("STARTED %s pid=%d log=%s", d.Name, p.PID, LogPath(b.l, d.Name))
		return nil
	}
	if _, err := WaitFor(ctx, b.clk, d.Name, b.o.Timeout, Alive(b.l, d.Name, ready)); err != nil {
		return err
	}
	b.line("STARTED %s pid=%d log=%s ready in %s", d.Name, p.PID, LogPath(b.l, d.Name), b.since(t))
	return nil
}

// cluster writes the configuration and starts etcd, the runtimes, the
// control plane, the kubelets and kube-proxy, and waits for every node.
func (b *lab) cluster(ctx context.Context, ds []Daemon, imgs map[string]string) (kubernetes.Interface, error) {
	cfg := Config{Layout: b.l, Registry: b.o.Registry, PauseImage: imgs["pause"]}
	files, err := Files(cfg)
	if err != nil {
		return nil, err
	}
	if err := WriteFiles(files); err != nil {
		return nil, err
	}
	if err := MakeCgroupRoots(b.l); err != nil {
		return nil, err
	}
	cs, err := kube.NewClient(b.l.Kubeconfig(), ContextName, "sortie-lab")
	if err != nil {
		return nil, err
	}
	steps := []readyStep{{"etcd", HTTPOK("http://127.0.0.1:2379/health")}}
	for _, n := range b.l.NodeList() {
		steps = append(steps, readyStep{containerdName(n), SocketAccepts(n.Socket)})
	}
	steps = append(steps, readyStep{"kube-apiserver", APIReady(cs)},
		readyStep{"kube-controller-manager", nil}, readyStep{"kube-scheduler", nil})
	for _, s := range steps {
		if err := b.start(ctx, daemonByName(ds, s.name), s.ready); err != nil {
			return nil, err
		}
	}
	return cs, b.nodes(ctx, ds, cs)
}

// readyStep is a daemon to start and what it is ready by (nil: started).
type readyStep struct {
	name  string
	ready Cond
}

// nodes starts every kubelet and kube-proxy, waits for every node Ready,
// and starts the NetworkPolicy enforcer.
func (b *lab) nodes(ctx context.Context, ds []Daemon, cs kubernetes.Interface) error {
	for _, n := range b.l.NodeList() {
		if err := b.start(ctx, daemonByName(ds, kubeletName(n)), nil); err != nil {
			return err
		}
	}
	if err := b.start(ctx, daemonByName(ds, "kube-proxy"), nil); err != nil {
		return err
	}
	for _, n := range b.l.NodeList() {
		d, err := WaitFor(ctx, b.clk, "node "+n.Name, b.o.Timeout, Alive(b.l, kubeletName(n), NodeReady(cs, n.Name)))
		if err != nil {
			return err
		}
		b.line("READY node %s ip=%s pods=%s after %s", n.Name, n.IP, n.PodCIDR, d.Round(100*time.Millisecond))
	}
	// The enforcer reads its node, so it starts once the nodes are there;
	// it is ready when its chains are in the filter table.
	return b.start(ctx, daemonByName(ds, NetpolName), ChainJumped(b.x, "FORWARD", NetpolChain))
}

// finish applies the addons, pushes the sortie images and writes the
// manifest, the chart values and the targets file.
func (b *lab) finish(ctx context.Context, cs kubernetes.Interface, imgs map[string]string) error {
	corefile, err := Render("Corefile.tmpl", Config{Layout: b.l})
	if err != nil {
		return err
	}
	for i := 1; i <= ReportVolumes; i++ {
		if err := reportVolume(b.l.ReportVolume(i)); err != nil {
			return err
		}
	}
	if err := Apply(ctx, cs, Addons(b.l, AddonImages{CoreDNS: imgs["coredns"], Target: imgs[TargetBinary.Name]}, string(corefile))); err != nil {
		return err
	}
	waits := []struct{ what, ns, name string }{{"coredns", "kube-system", "coredns"}}
	for _, t := range Targets {
		waits = append(waits, struct{ what, ns, name string }{"target " + t.Name, TargetNamespace, t.Name})
	}
	for _, w := range waits {
		d, err := WaitFor(ctx, b.clk, w.what, b.o.Timeout, DeploymentAvailable(cs, w.ns, w.name))
		if err != nil {
			return err
		}
		b.line("READY deployment %s/%s after %s", w.ns, w.name, d.Round(100*time.Millisecond))
	}
	if _, err := WaitFor(ctx, b.clk, "serviceaccount "+RunNamespace+"/default", b.o.Timeout, ServiceAccountExists(cs, RunNamespace, "default")); err != nil {
		return err
	}
	if err := b.checkListeners(); err != nil {
		return err
	}
	return b.writeManifest(ctx, imgs)
}

// checkListeners holds the running lab to its first network rule: every
// socket its processes listen on is on a loopback address or the lab's
// bridge.
func (b *lab) checkListeners() error {
	procs, err := Procs(b.l)
	if err != nil {
		return err
	}
	ls, err := Listeners(procs)
	if err != nil {
		return err
	}
	if off := OffLab(ls); len(off) > 0 {
		var s []string
		for _, l := range off {
			s = append(s, l.String())
		}
		return fmt.Errorf("network rule broken: listening off loopback and the lab's bridge: %s", strings.Join(s, ", "))
	}
	b.line("LISTEN ok sockets=%d all on 127.0.0.0/8 or %s", len(ls), LabNet)
	return nil
}

// reportVolume makes a report volume's directory, owned by the images'
// user (hostPath volumes ignore fsGroup).
func reportVolume(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Chown(dir, 65532, 65532)
}

func (b *lab) writeManifest(ctx context.Context, imgs map[string]string) error {
	m := Manifest{
		Kubeconfig: b.l.Kubeconfig(), Context: ContextName, Registry: b.o.Registry,
		Images: imgs, Targets: b.l.Path("targets.txt"), Namespace: RunNamespace,
	}
	for _, n := range b.l.NodeList() {
		m.Nodes = append(m.Nodes, n.Name)
	}
	if err := record.WriteFile(m.Targets, []byte(TargetsFile()), 0o644); err != nil {
		return err
	}
	if b.o.Images {
		t := b.clk.Now()
		refs, err := PushSortieImages(ctx, b.o, b.gox)
		if err != nil {
			return err
		}
		for k, v := range refs {
			m.Images[k] = v
		}
		values, err := ChartValues(refs)
		if err != nil {
			return err
		}
		m.Values = b.l.Path("values.yaml")
		if err := record.WriteFile(m.Values, values, 0o644); err != nil {
			return err
		}
		b.line("PUSHED %d sortie images (sortie-images build --push %s) in %s", len(refs), b.o.Registry, b.since(t))
	}
	m.Up = b.clk.Now().UTC()
	if err := WriteManifest(b.l, m); err != nil {
		return err
	}
	b.line("LAB UP nodes=%d kubeconfig=%s context=%s registry=%s in %s", len(m.Nodes), m.Kubeconfig, m.Context, m.Registry, b.since(b.t0))
	use := fmt.Sprintf("soak run e2e --kubeconfig %s --context %s --namespace %s --targets %s", m.Kubeconfig, m.Context, m.Namespace, m.Targets)
	if m.Values != "" {
		use += " --values " + m.Values
	}
	b.line("USE %s", use)
	return nil
}
