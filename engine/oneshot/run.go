package oneshot

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
)

const usageText = `Usage: sortie-engine oneshot --target NAME=URL [--target ...] [flags]

Sends a bounded burst of HTTP GET requests to each target and prints one
tally line on stdout, then waits for SIGTERM (so a pod that runs it is not
restarted into a second burst; --exit ends at once instead).

Each target gets --requests requests at --rate a second, request i due
i/rate after the start whether or not the earlier ones are back, each
bounded by --timeout; the burst ends by (requests-1)/rate + timeout. No
request is retried, redirects are not followed, proxies from the
environment are not used, and every request has a connection of its own.

Output (stdout), once:
  SORTIE_NEWSA_FINAL step=<step> node=<node> <dst>:ok=N,non2xx=N,connerr=N,codes=C ...
    ok       2xx answers
    non2xx   answers of any other status
    connerr  requests that got no status: their codes are err_dns (the name
             did not resolve), err_connect (refused, unreachable),
             err_timeout (no answer within --timeout), err_reset (the
             connection closed under the request), err_other
    codes    "<code>x<count>" joined by "+" in byte order
             (503x12+err_connectx3), "-" when every request was a 2xx

Exit: 0 the tally was printed (whatever it says); 2 unusable flags; 130/143
a signal came before the tally.

Durations take seconds as a bare integer (--timeout 5) or a duration (5s).

Flags:
`

// targetList is the repeatable --target flag.
type targetList []Target

func (l *targetList) String() string { return "" }

func (l *targetList) Set(s string) error {
	name, u, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: want name=url", s)
	}
	*l = append(*l, Target{Name: name, URL: u})
	return nil
}

// parseFlags fills Options; exit reports --exit, help --help.
func parseFlags(args []string, stderr io.Writer) (o Options, exit, help bool, err error) {
	o = DefaultOptions()
	fs := flag.NewFlagSet("sortie-engine oneshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usageText); fs.PrintDefaults() }
	fs.Var((*targetList)(&o.Targets), "target", "`name=url` of a target (repeat for each; url http:// or https://)")
	fs.IntVar(&o.Requests, "requests", o.Requests, "requests to each target")
	fs.IntVar(&o.Rate, "rate", o.Rate, "requests a second to each target")
	cli.DurationVar(fs, &o.Timeout, "timeout", o.Timeout, "bound of one request, its connection included (`seconds` or a duration)")
	fs.StringVar(&o.Step, "step", "", "`name` of the step, in the tally and the default User-Agent (required)")
	fs.StringVar(&o.Node, "node", o.Node, "`name` of the node, in the tally")
	fs.StringVar(&o.UserAgent, "user-agent", "", "User-Agent of every request (default "+UserAgentPrefix+"<step>)")
	fs.BoolVar(&exit, "exit", false, "exit after the tally instead of waiting for SIGTERM")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, false, true, nil
		}
		return o, false, false, err
	}
	if fs.NArg() > 0 {
		return o, false, false, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.UserAgent == "" {
		o.UserAgent = UserAgentPrefix + o.Step
	}
	return o, exit, false, o.Validate()
}

// Run is `sortie-engine oneshot` (args after the word oneshot).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return RunClock(ctx, clock.Real{}, args, stdout, stderr)
}

// RunClock is Run on the clock clk.
func RunClock(ctx context.Context, clk clock.Clock, args []string, stdout, stderr io.Writer) error {
	o, exit, help, err := parseFlags(args, stderr)
	if help {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	tr := NewTransport(o.Timeout)
	defer tr.CloseIdleConnections()
	f, err := Burst(ctx, clk, tr, o)
	if err != nil {
		return stopped(ctx, err)
	}
	if _, err := fmt.Fprintln(stdout, f.String()); err != nil {
		return cli.Fail(fmt.Errorf("write stdout: %w", err))
	}
	if !exit {
		<-ctx.Done()
	}
	return nil
}

// stopped is the error of a burst a signal (or the caller) cut short.
func stopped(ctx context.Context, err error) error {
	if sig := cli.Signal(ctx); sig != nil {
		return cli.Silent(cli.SignalCode(sig))
	}
	return cli.Fail(fmt.Errorf("burst stopped before its tally: %w", err))
}
