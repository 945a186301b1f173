package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/sortie-soak/sortie/engine/oneshot"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/runca"
)

// version is set at build time with
// -ldflags "-X github.com/sortie-soak/sortie/engine.version=v1.2.3";
// without it the module version from the build info is used.
var version = ""

// Version reports the engine's version.
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// RunOptions are the flags of sortie-engine.
type RunOptions struct {
	Listen                  string
	MaxConcurrentExecutions int
	BackendName             string
	ShutdownTimeout         time.Duration
	Retention               time.Duration
	RetainBytes             int64
	// GCPercent and MemoryLimitMiB set the garbage collector (SetGC).
	GCPercent      int
	MemoryLimitMiB int
	PrintVersion   bool
	// TLSCert, TLSKey and ClientCA are the control plane's mTLS files
	// (internal/runca writes them per run); InsecurePlaintext serves
	// plaintext instead, for local debugging. One of the two is required.
	TLSCert, TLSKey, ClientCA string
	InsecurePlaintext         bool
	// AllowTargets is --allow-targets as given; Allow is it parsed.
	AllowTargets string
	Allow        *Allowlist
	// HealthListen, when set, serves the health service alone in
	// plaintext there, for probes that speak no TLS.
	HealthListen string
}

// Validate returns every problem of the flags.
func (o RunOptions) Validate() error {
	var errs []error
	if o.Listen == "" {
		errs = append(errs, errors.New("--listen must not be empty"))
	} else if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w", o.Listen, err))
	}
	if o.MaxConcurrentExecutions < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-executions %d must be at least 1", o.MaxConcurrentExecutions))
	}
	if o.Retention <= 0 {
		errs = append(errs, fmt.Errorf("--retention %v must be positive", o.Retention))
	}
	if o.RetainBytes <= 0 {
		errs = append(errs, fmt.Errorf("--retain-bytes %d must be positive", o.RetainBytes))
	}
	if o.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %v must be positive", o.ShutdownTimeout))
	}
	if err := checkGC(o.GCPercent, o.MemoryLimitMiB); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.validateControl()...)
	return errors.Join(errs...)
}

// validateControl checks the flags of the control plane's security: mTLS
// files or an explicit plaintext, an allowlist, a health address.
func (o RunOptions) validateControl() []error {
	var errs []error
	files := 0
	for _, f := range []string{o.TLSCert, o.TLSKey, o.ClientCA} {
		if f != "" {
			files++
		}
	}
	switch {
	case o.InsecurePlaintext && files > 0:
		errs = append(errs, errors.New("--insecure-plaintext with --tls-cert, --tls-key or --client-ca: give one or the other"))
	case !o.InsecurePlaintext && files == 0:
		errs = append(errs, errors.New("no --tls-cert, --tls-key and --client-ca: the control plane needs the run's mTLS files (or --insecure-plaintext, for local debugging only)"))
	case !o.InsecurePlaintext && files < 3:
		errs = append(errs, errors.New("--tls-cert, --tls-key and --client-ca go together: give all three"))
	}
	if _, err := ParseAllowlist(o.AllowTargets); err != nil {
		errs = append(errs, err)
	}
	if o.HealthListen != "" {
		if _, _, err := net.SplitHostPort(o.HealthListen); err != nil {
			errs = append(errs, fmt.Errorf("--health-listen %q: %w", o.HealthListen, err))
		}
	}
	return errs
}

const usageText = `Usage: sortie-engine [flags]
       sortie-engine oneshot --target NAME=URL ... [flags]   (see oneshot --help)

Runs sortie's load engine: a gRPC service (sortie.engine.v1.Engine plus the
standard grpc.health.v1.Health) that runs open-loop HTTP/1.1 or HTTP/2 (h2
by ALPN over TLS, h2c with prior knowledge) load executions for a driver and
counts the outcome of every request.

Output: once listening, one line on stdout:
  LISTEN <address>
where <address> is the host:port actually bound (useful with port 0),
and with --health-listen a second one:
  HEALTH <address>
Logs go to stderr.

An execution does not stop when the driver's stream breaks (the driver
died, was evicted, or detached on SIGTERM): it runs to its planned end.
The engine then keeps its Result and its timeline (buckets and failure
samples) for --retention after the end, within --retain-bytes in all (the
oldest let go first), so that a driver started again with --resume
follows it with the Attach RPC and loses nothing.

On SIGTERM or SIGINT the engine refuses new executions, cancels the running
ones (their in-flight requests get their drain, their Results are still
delivered), and exits 0. Past --shutdown-timeout, in-flight requests are cut
short (counted as local resets) and the Results sent as they are.

Control plane: every call must come over mutual TLS with a client
certificate of the run's CA (--tls-cert, --tls-key, --client-ca; the
kickoff and soak local make a CA per run). A peer without one is refused
at the handshake and logged once (one line per peer address, however many
times it tries). --insecure-plaintext serves plaintext instead, for local
debugging only: anyone who reaches the port may then command the engine.
--health-listen serves the gRPC health service alone, in plaintext, for
probes that speak no TLS.

Targets: --allow-targets lists where executions may send load and statsd
datagrams, as comma-separated host names (matched whole, as the URL
names them), *.domain wildcards, IP addresses and CIDR prefixes (for IP
literals and the statsd address), or * for any. An execution aimed
elsewhere is refused with PERMISSION_DENIED (a TARGET_NOT_ALLOWED detail
naming the field and host) before anything of it is sent.

Memory: the garbage collector runs when the heap has grown --gc-percent
over what was live (Go's GOGC, which the flag overrides; 25 keeps the
soak shape's few kilobytes a second of garbage from piling up for
minutes), and works harder as the Go runtime's memory nears
--memory-limit-mib (Go's soft limit, GOMEMLIMIT; keep it below the
container's memory limit). Neither changes what is measured or counted.

Flags:
`

// parseFlags fills RunOptions from args.
func parseFlags(args []string, stderr io.Writer) (RunOptions, error) {
	var o RunOptions
	fs := flag.NewFlagSet("sortie-engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:8443", "`address` to serve gRPC on, host:port (port 0 picks a free one)")
	fs.IntVar(&o.MaxConcurrentExecutions, "max-concurrent-executions", DefaultMaxConcurrentExecutions, "cap of executions running at once; a start over it is refused with RESOURCE_EXHAUSTED")
	fs.StringVar(&o.BackendName, "backend-name", "", "`name` of this engine (a node name) in results and statsd metric names")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", 25*time.Second, "on SIGTERM, how long running executions may drain before in-flight requests are cut short")
	fs.DurationVar(&o.Retention, "retention", DefaultRetention, "how long an ended execution's result and timeline are kept for a driver to attach again")
	fs.Int64Var(&o.RetainBytes, "retain-bytes", DefaultRetainBytes, "bound of the memory the kept executions hold, in bytes; past it the oldest are let go first")
	fs.IntVar(&o.GCPercent, "gc-percent", DefaultGCPercent, "collect garbage when the heap has grown this `percent` over what was live (GOGC)")
	fs.IntVar(&o.MemoryLimitMiB, "memory-limit-mib", DefaultMemoryLimitMiB, "soft limit of the Go runtime's memory in `MiB`, where the collector works harder (GOMEMLIMIT); 0: none")
	fs.BoolVar(&o.PrintVersion, "version", false, "print the version and exit")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "the engine's certificate `FILE` (PEM) for the control plane's mTLS")
	fs.StringVar(&o.TLSKey, "tls-key", "", "the engine's private key `FILE` (PEM)")
	fs.StringVar(&o.ClientCA, "client-ca", "", "the run's CA `FILE` (PEM): a caller must present a client certificate it signed")
	fs.BoolVar(&o.InsecurePlaintext, "insecure-plaintext", false, "serve the control plane in plaintext, without authentication (local debugging only)")
	fs.StringVar(&o.AllowTargets, "allow-targets", "", "where executions may send load and statsd datagrams: comma-separated `LIST` of host names, *.domain, IPs and CIDRs, or * for any (required)")
	fs.StringVar(&o.HealthListen, "health-listen", "", "also serve the gRPC health service alone, in plaintext, on `address` host:port (for probes without TLS)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, cli.Silent(cli.ExitOK)
		}
		return o, cli.Usage(err)
	}
	if fs.NArg() > 0 {
		return o, cli.Usage(fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if err := o.Validate(); err != nil {
		return o, cli.Usage(err)
	}
	o.Allow, _ = ParseAllowlist(o.AllowTargets) // valid: Validate parsed it
	return o, nil
}

// Run is sortie-engine's main: it serves until ctx is cancelled (SIGTERM),
// then stops the engine gracefully and returns nil.
//
// With the first argument "oneshot" it is the client mode instead (package
// oneshot): the same image then serves the churn driver's
// new-serviceaccount step, so that step needs no image of its own.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "oneshot" {
		return oneshot.Run(ctx, args[1:], stdout, stderr)
	}
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.PrintVersion {
		_, err := fmt.Fprintln(stdout, Version())
		return err
	}
	restoreGC, err := SetGC(o.GCPercent, o.MemoryLimitMiB)
	if err != nil {
		return cli.Usage(err)
	}
	defer restoreGC()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var tlsConf *tls.Config
	if !o.InsecurePlaintext {
		if tlsConf, err = runca.ServerConfig(o.TLSCert, o.TLSKey, o.ClientCA); err != nil {
			return cli.Usage(fmt.Errorf("control plane TLS: %w", err))
		}
	} else {
		log.Warn("control plane in plaintext (--insecure-plaintext): anyone who reaches the port may command this engine", "component", "engine")
	}
	e, err := New(Options{
		TLS:                     tlsConf,
		AllowTargets:            o.Allow,
		BackendName:             o.BackendName,
		MaxConcurrentExecutions: o.MaxConcurrentExecutions,
		Version:                 Version(),
		Logger:                  log,
		Retention:               o.Retention,
		RetainBytes:             o.RetainBytes,
	})
	if err != nil {
		return cli.Usage(err)
	}
	lis, healthLis, err := listen(o, stdout)
	if err != nil {
		return err
	}
	served := make(chan error, 2)
	go func() { served <- e.Serve(lis) }()
	if healthLis != nil {
		go func() { served <- e.ServeHealth(healthLis) }()
	}
	select {
	case err := <-served:
		// Serve ended on its own: the listener failed.
		_ = e.Stop(context.Background())
		return cli.Fail(fmt.Errorf("serve: %w", err))
	case <-ctx.Done():
	}
	log.Info("signal received; stopping", "component", "engine", "shutdown_timeout", o.ShutdownTimeout)
	stopCtx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	if err := e.Stop(stopCtx); err != nil {
		log.Warn("stopped past the shutdown timeout", "component", "engine", "error", err)
	}
	if err := <-served; err != nil {
		return cli.Fail(fmt.Errorf("serve: %w", err))
	}
	return nil
}

// listen opens the control plane's listener and the health one, if asked,
// and says where on stdout: LISTEN <address>, then HEALTH <address>.
func listen(o RunOptions, stdout io.Writer) (lis, healthLis net.Listener, err error) {
	if lis, err = net.Listen("tcp", o.Listen); err != nil {
		return nil, nil, cli.Fail(fmt.Errorf("listen on %s: %w", o.Listen, err))
	}
	if o.HealthListen != "" {
		if healthLis, err = net.Listen("tcp", o.HealthListen); err != nil {
			_ = lis.Close()
			return nil, nil, cli.Fail(fmt.Errorf("listen on %s (--health-listen): %w", o.HealthListen, err))
		}
	}
	out := fmt.Sprintf("LISTEN %s\n", lis.Addr())
	if healthLis != nil {
		out += fmt.Sprintf("HEALTH %s\n", healthLis.Addr())
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		_ = lis.Close()
		if healthLis != nil {
			_ = healthLis.Close()
		}
		return nil, nil, cli.Fail(fmt.Errorf("write stdout: %w", err))
	}
	return lis, healthLis, nil
}
