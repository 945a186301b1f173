package lab

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Options configure every lab command; each command uses the ones it needs.
type Options struct {
	// State is the lab's state directory: PKI, configuration, data, pid
	// files, logs, the kubeconfig.
	State string
	// Cache keeps the built cluster binaries between runs, by version.
	Cache string
	// Source is the sortie checkout: its build modules give the cluster
	// binaries, its images are pushed, its fixture target is deployed.
	Source string
	// Nodes is how many nodes (containerd + kubelet) run.
	Nodes int
	// Registry is the loopback registry's address.
	Registry string
	// Go is the go command.
	Go string
	// Packages is "install" (install missing pinned Debian packages) or
	// "check" (fail if one is missing).
	Packages string
	// Images pushes this checkout's sortie images (sortie-images build
	// --push) and writes the chart values that pull them.
	Images bool
	// Timeout bounds each readiness wait.
	Timeout time.Duration
	// Grace is how long a stopped process has between SIGTERM and SIGKILL.
	Grace time.Duration
}

// DefaultState is the state directory unless --state says otherwise.
const DefaultState = "/var/lib/sortie-lab"

// DefaultOptions returns the defaults; the cache is $XDG_CACHE_HOME/sortie-lab
// when getenv has XDG_CACHE_HOME, else /var/cache/sortie-lab.
func DefaultOptions(getenv func(string) string) Options {
	cache := "/var/cache/sortie-lab"
	if x := getenv("XDG_CACHE_HOME"); x != "" && filepath.IsAbs(x) {
		cache = filepath.Join(x, "sortie-lab")
	}
	return Options{
		State:    DefaultState,
		Cache:    cache,
		Source:   ".",
		Nodes:    2,
		Registry: DefaultRegistry,
		Go:       "go",
		Packages: "install",
		Images:   true,
		Timeout:  3 * time.Minute,
		Grace:    15 * time.Second,
	}
}

// Flags registers the flags of a command: every command takes --state;
// build and up take the build flags; up the cluster flags.
func (o *Options) Flags(fs *flag.FlagSet, cmd string) {
	fs.StringVar(&o.State, "state", o.State, "state `DIR` of the lab: PKI, configuration, cluster data, pid files, logs, kubeconfig")
	if cmd == "build" || cmd == "up" {
		fs.StringVar(&o.Cache, "cache", o.Cache, "`DIR` that keeps the built cluster binaries between runs, by version and inputs")
		fs.StringVar(&o.Source, "source", o.Source, "the sortie checkout (`DIR` holding go.mod and "+BuildDir+")")
		fs.StringVar(&o.Go, "go", o.Go, "the go `command`")
	}
	if cmd == "up" {
		fs.IntVar(&o.Nodes, "nodes", o.Nodes, fmt.Sprintf("nodes, each its own containerd and kubelet (1..%d)", MaxNodes))
		fs.StringVar(&o.Registry, "registry", o.Registry, "loopback `host:port` of the lab's OCI registry")
		fs.StringVar(&o.Packages, "packages", o.Packages, "Debian packages: install (the missing pinned ones) or check (fail if one is missing)")
		fs.BoolVar(&o.Images, "images", o.Images, "push this checkout's sortie images and write chart values that pull them")
		fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound of each readiness wait (a server answering, nodes Ready, a Deployment available)")
	}
	if cmd == "up" || cmd == "down" {
		fs.DurationVar(&o.Grace, "grace", o.Grace, "how long a process has to exit after SIGTERM before SIGKILL")
	}
}

// Validate returns every problem at once.
func (o Options) Validate() error {
	var errs []error
	for _, d := range []struct{ flag, v string }{{"--state", o.State}, {"--cache", o.Cache}} {
		if !filepath.IsAbs(d.v) || filepath.Clean(d.v) == "/" {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute directory other than /", d.flag, d.v))
		}
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		errs = append(errs, fmt.Errorf("--nodes %d: want 1..%d", o.Nodes, MaxNodes))
	}
	if err := validLoopback(o.Registry); err != nil {
		errs = append(errs, fmt.Errorf("--registry: %w", err))
	}
	if o.Packages != "install" && o.Packages != "check" {
		errs = append(errs, fmt.Errorf("--packages %q: want install or check", o.Packages))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: want more than 0", o.Timeout))
	}
	if o.Grace <= 0 {
		errs = append(errs, fmt.Errorf("--grace %s: want more than 0", o.Grace))
	}
	if o.Go == "" {
		errs = append(errs, errors.New("--go: empty"))
	}
	return errors.Join(errs...)
}

// ValidateSource checks that Source is a sortie checkout with the lab's
// build modules.
func (o Options) ValidateSource() error {
	var errs []error
	for _, f := range []string{"go.mod", filepath.Join(BuildDir, "kube", "go.mod"), filepath.Join(BuildDir, "tools", "go.mod")} {
		if _, err := os.Stat(filepath.Join(o.Source, f)); err != nil {
			errs = append(errs, fmt.Errorf("--source %s: no %s (not a sortie checkout?)", o.Source, f))
		}
	}
	return errors.Join(errs...)
}

func validLoopback(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%q: want host:port", hostport)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q: want a loopback IP address", hostport)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: want a fixed port (1..65535)", hostport)
	}
	return nil
}

// Layout returns the lab's file layout for these options.
func (o Options) Layout() Layout { return Layout{State: o.State, Nodes: o.Nodes} }
