package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
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
	PrintVersion            bool
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
	if o.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %v must be positive", o.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

const usageText = `Usage: sortie-engine [flags]

Runs sortie's load engine: a gRPC service (sortie.engine.v1.Engine plus the
standard grpc.health.v1.Health) that runs open-loop HTTP/1.1 load executions
for a driver and counts the outcome of every request.

Output: once listening, one line on stdout:
  LISTEN <address>
where <address> is the host:port actually bound (useful with port 0).
Logs go to stderr.

On SIGTERM or SIGINT the engine refuses new executions, cancels the running
ones (their in-flight requests get their drain, their Results are still
delivered), and exits 0. Past --shutdown-timeout, in-flight requests are cut
short (counted as local resets) and the Results sent as they are.

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
	fs.BoolVar(&o.PrintVersion, "version", false, "print the version and exit")
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
	return o, nil
}

// Run is sortie-engine's main: it serves until ctx is cancelled (SIGTERM),
// then stops the engine gracefully and returns nil.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.PrintVersion {
		_, err := fmt.Fprintln(stdout, Version())
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	e, err := New(Options{
		BackendName:             o.BackendName,
		MaxConcurrentExecutions: o.MaxConcurrentExecutions,
		Version:                 Version(),
		Logger:                  log,
	})
	if err != nil {
		return cli.Usage(err)
	}
	lis, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return cli.Fail(fmt.Errorf("listen on %s: %w", o.Listen, err))
	}
	if _, err := fmt.Fprintf(stdout, "LISTEN %s\n", lis.Addr()); err != nil {
		_ = lis.Close()
		return cli.Fail(fmt.Errorf("write stdout: %w", err))
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(lis) }()
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
