// Package render turns a soak's targets file into its v1 plan and its share
// table: the sortie-plan binary, also used as a library by the harness.
//
// A targets file lists one `name url weight` line per target. Each target
// becomes its own execution on every engine, at rate × weight / Σweight
// requests per second per node. That share must be whole and a multiple of
// the concurrency, or the renderer refuses and names the nearest rates that
// split exactly: nothing is rounded (principle 3 of the architecture).
//
// The rendered plan has one pool of the engines (`nodes`), one scenario
// (`mesh`) running every target at once with a constant, open-loop rate per
// backend, the zero-failure thresholds and a 2xx rate floor: by default one
// on the scenario, from the smallest share, as the bash renderer writes it;
// with PerTargetFloors (--per-target-floors) one on every target, from its
// own share, which is what the harness renders.
package render

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

const usage = `Usage:
  sortie-plan shares --targets FILE [--rate 60] [--concurrency 1]
  sortie-plan render --profile e2e|soak|local --targets FILE
                     (--dns HOST:PORT --backends N | --services A,B,...)
                     [--duration D] [--rate 60] [--concurrency 1]
                     [--statsd IP:PORT] [--max-pending N] [--stall-budget 2]
                     [--floor-pct 99] [--per-target-floors] [--scenario mesh]
                     [--user-agent aether-soak-sortie] [-o FILE]

sortie-plan splits a per-node rate over the targets of a targets file and
renders the soak's v1 plan. Run "sortie-plan shares --help" or
"sortie-plan render --help" for the flags.

Targets file: one "name url weight" line per target, separated by spaces or
tabs; blank lines and "#" comments are ignored. Names are [a-z0-9-] (starting
and ending with a letter or digit) and unique; at most 16 targets (the
engine's cap of concurrent executions); urls are http:// or https://; weights
are positive integers.

Exit codes: 0 written, 2 unusable input or a rate that does not split.
`

// Run is the sortie-plan command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.Usage(errors.New("a command is required: shares or render"))
	}
	switch args[0] {
	case "shares":
		return runShares(args[1:], stdout, stderr)
	case "render":
		return runRender(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return cli.Usage(fmt.Errorf("unknown command %q: want shares or render", args[0]))
	}
}

const sharesHelp = `Usage: sortie-plan shares --targets FILE [--rate 60] [--concurrency 1]

Prints the share table: one line per target, in file order,

  name<TAB>rps<TAB>url

where rps is the target's requests per second on every node
(rate x weight / sum of weights). A rate the weights do not split into whole
shares, each a multiple of the concurrency, is refused with the nearest rates
that do (exit 2).

Flags:
`

func runShares(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sortie-plan shares", flag.ContinueOnError)
	fs.SetOutput(stderr)
	targets := fs.String("targets", "", "the targets `FILE` (required)")
	rate := fs.Int("rate", 60, "requests per second per node, over all targets")
	conc := fs.Int("concurrency", 1, "workers per target per engine; every share must be a multiple of it")
	fs.Usage = func() { fmt.Fprint(fs.Output(), sharesHelp); fs.PrintDefaults() }
	if done, err := parseFlags(fs, args); done {
		return err
	}
	if *targets == "" {
		return cli.Usage(errors.New("--targets is required"))
	}
	ts, err := ReadTargets(*targets)
	if err != nil {
		return cli.Usage(err)
	}
	shares, err := ComputeShares(ts, *rate, *conc)
	if err != nil {
		return cli.Usage(fmt.Errorf("%s: %w", *targets, err))
	}
	return WriteShares(stdout, shares)
}

const renderHelp = `Usage: sortie-plan render --profile e2e|soak|local --targets FILE
         (--dns HOST:PORT --backends N | --services A,B,...) [flags]

Prints the soak's v1 plan (YAML) on stdout, or writes it to -o FILE
atomically. The plan: one pool "nodes" of the engines, one scenario "mesh"
that runs every target at once on every engine (constant-rate, per_backend,
open_loop, rate per node, concurrency "1"), each target's weight being its
rps per node; "User-Agent: aether-soak-sortie" (--user-agent; the soak's
access-log queries select on it); with --statsd a top-level stats block
flushed every 5s; thresholds
"counter:benchmark.<class> == 0" for http_4xx, http_5xx, stream_resets,
pool_connection_failure, pool_failure_timeout, pool_overflow,
http_inflight_lost and request_timeout, and "rate:benchmark.http_2xx >= F" where F is
floor-pct % of the smallest share times the backends, printed with two
decimals (39.60) or more when that is what it takes to be exact: one floor
for every target, as the bash renderer writes it. With --per-target-floors each target
carries its own floor instead, floor-pct % of its own share times the
backends, as a threshold of the target ({name, url, weight, thresholds}), so
a heavier target that loses requests fails its own floor rather than passing
the smallest target's.

request_timeout: 10s (--request-timeout; 0 leaves it out): a response not
ended 10 s after its request was written is counted in
benchmark.request_timeout and its connection closed, so a hung response
shows within seconds instead of as http_inflight_lost at the end of the run.

max_pending_requests = ceil(largest share / concurrency x stall budget);
--max-pending N writes N instead, and 0 leaves the field out (the engine's
default queue). Durations given as a bare integer are seconds
(--stall-budget 3 is 3s, --duration 900 is 900s); Go durations (1500ms,
15m, 8h30m) work too.

Profiles: e2e 900s, soak 30600s (8h30m), local 60s.

Flags:
`

func runRender(args []string, stdout, stderr io.Writer) error {
	o := DefaultOptions()
	fs := flag.NewFlagSet("sortie-plan render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Profile, "profile", "", "e2e (900s), soak (30600s) or local (60s) (required)")
	fs.StringVar(&o.TargetsFile, "targets", "", "the targets `FILE` (required)")
	fs.IntVar(&o.Backends, "backends", 0, "engines in the pool; the 2xx floor is written for exactly `N` (required with --dns; defaults to the number of --services)")
	fs.StringVar(&o.DNS, "dns", "", "the engines' `HOST:PORT`, resolved once by the driver (a headless Service)")
	services := fs.String("services", "", "the engines' addresses, `HOST:PORT,...` (instead of --dns)")
	duration := fs.String("duration", "", "run length in whole seconds, such as 900, 900s or 15m (default: the profile's)")
	fs.IntVar(&o.Rate, "rate", o.Rate, "requests per second per node, over all targets")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "workers per target per engine; every share must be a multiple of it")
	fs.StringVar(&o.Statsd, "statsd", "", "statsd `IP:PORT` for live metrics (an IP literal); adds a stats block")
	maxPending := optionalInt{}
	fs.Var(&maxPending, "max-pending", "max_pending_requests `N`; 0 leaves it out (default: computed from --stall-budget)")
	cli.DurationVar(fs, &o.StallBudget, "stall-budget", o.StallBudget, "how long a stalled connection's requests may queue (`seconds`, or a duration such as 1500ms)")
	fs.Float64Var(&o.FloorPct, "floor-pct", o.FloorPct, "2xx rate floor in percent of the smallest share (of each target's own with --per-target-floors)")
	fs.BoolVar(&o.PerTargetFloors, "per-target-floors", o.PerTargetFloors, "write each target its own 2xx rate floor (floor-pct % of its share x the backends) instead of one scenario floor from the smallest share")
	fs.StringVar(&o.Scenario, "scenario", o.Scenario, "scenario `name`, [a-z0-9_]: the report's label prefix and the statsd level")
	cli.DurationVar(fs, &o.RequestTimeout, "request-timeout", o.RequestTimeout, "request_timeout of the plan: a response not ended this long after its request was written is benchmark.request_timeout (`seconds` or a duration; 0 leaves it out)")
	fs.StringVar(&o.UserAgent, "user-agent", o.UserAgent, "User-Agent header of every request (the soak's access-log queries select on it)")
	out := fs.String("o", "", "write the plan to `FILE` instead of stdout")
	fs.Usage = func() { fmt.Fprint(fs.Output(), renderHelp); fs.PrintDefaults() }
	if done, err := parseFlags(fs, args); done {
		return err
	}
	if maxPending.set {
		o.MaxPending = maxPending.n
	}
	if *services != "" {
		o.Services = strings.Split(*services, ",")
	}
	var errs []error
	if *duration != "" {
		d, err := cli.ParseDuration(*duration)
		if err != nil || d <= 0 || d%time.Second != 0 {
			errs = append(errs, fmt.Errorf("--duration must be a positive whole number of seconds such as 900, 900s or 8h30m, got %q", *duration))
		} else {
			o.Duration = d
		}
	}
	if o.TargetsFile == "" {
		errs = append(errs, errors.New("--targets is required"))
	} else if ts, err := ReadTargets(o.TargetsFile); err != nil {
		errs = append(errs, err)
	} else {
		o.Targets = ts
	}
	if len(errs) > 0 {
		// Report every problem at once: the flags' own with these.
		return cli.Usage(errors.Join(append(errs, o.validateFlags())...))
	}
	r, err := Render(o)
	if err != nil {
		var se *ShareError
		if errors.As(err, &se) {
			err = fmt.Errorf("%s: %w", o.TargetsFile, err)
		}
		return cli.Usage(err)
	}
	if *out == "" {
		_, err := stdout.Write(r.YAML)
		return err
	}
	// The plan is a file the user keeps: written atomically and durably.
	if err := record.WriteFile(*out, r.YAML, 0o644); err != nil {
		return cli.Fail(fmt.Errorf("write plan: %w", err))
	}
	return nil
}

// parseFlags parses args. done is true when the command must stop here:
// after --help (err nil) or on a usage error. No positional arguments are
// taken.
func parseFlags(fs *flag.FlagSet, args []string) (done bool, err error) {
	// The flag package prints its error and the whole usage on a bad flag;
	// silence it so the error is printed once, by the caller, and print the
	// usage only when it was asked for.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err = fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return true, nil
		}
		return true, cli.Usage(fmt.Errorf("%w (see --help)", err))
	}
	if fs.NArg() > 0 {
		return true, cli.Usage(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return false, nil
}

// optionalInt is an int flag that knows whether it was given.
type optionalInt struct {
	n   int
	set bool
}

func (o *optionalInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.n)
}

func (o *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a non-negative integer, got %q", s)
	}
	o.n, o.set = n, true
	return nil
}
