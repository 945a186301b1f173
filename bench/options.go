package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scenario names.
const (
	scenarioSoak = "soak"
	scenarioHigh = "high"
	scenarioLow  = "low"
	scenarioStep = "step" // rows of the step-up of scenario high
)

// Peer names.
const (
	peerFortio = "fortio"
	peerVegeta = "vegeta"
	peerWrk    = "wrk"
	// peerFloor is the bench's own floor client (see cmdFloor): a
	// reference for what the machine allows, not a load generator.
	peerFloor = "floor"
	// peerFortioUniform is fortio with -uniform: its connections spread
	// over the period instead of sending in step. It runs when fortio is
	// selected.
	peerFortioUniform = "fortio-uniform"
)

var (
	allScenarios = []string{scenarioSoak, scenarioHigh, scenarioLow}
	allPeers     = []string{peerFortio, peerVegeta, peerWrk, peerFloor}
)

// Options are the flags of sortie-bench.
type Options struct {
	// Scenarios to run, in this order: soak, high, low.
	Scenarios []string
	// Quick shortens every duration not set explicitly, for a smoke run.
	Quick bool
	// JSON prints one JSON object instead of the table.
	JSON bool
	// Peers to run beside the engine, when installed.
	Peers []string
	// PeersBin is searched for the peers before $PATH.
	PeersBin string
	// TargetCPU and GeneratorCPU are the cores of the target server and of
	// every load generator; -1 leaves a process unpinned.
	TargetCPU, GeneratorCPU int
	// Nice is the nice value of the target and every generator; below 0
	// (root only) gives them precedence over other work of a shared
	// machine.
	Nice int
	// Durations of the scenarios and of each step of the step-up.
	SoakDuration, HighDuration, StepDuration, LowDuration time.Duration
	// HighRate and LowRate are the rates of scenarios high and low.
	HighRate, LowRate int
	// StepRates are the rates the engine is stepped through, in order,
	// until one is not held; empty skips the step-up.
	StepRates []int
	// EngineWorkers, EngineConnections (per worker) and EngineMaxPending
	// (per worker) shape the engine's executions at high rate.
	// EngineMaxPending -1 sizes the queue as the plan renderer does: 2 s
	// of a worker's rate (its stall budget).
	EngineWorkers, EngineConnections, EngineMaxPending int
	// EngineGOMAXPROCS, when not 0, is the engine child's GOMAXPROCS;
	// otherwise Go's default, the number of cores it may run on (1 when
	// pinned).
	EngineGOMAXPROCS int
	// CPUProfileDir, when set, receives a CPU profile of every engine
	// child, engine-<scenario>-<rate>.pprof.
	CPUProfileDir string
	// EngineProgress, when not 0, is the progress interval of every
	// engine execution; the engine streams its timeline with Progress, so
	// this is how often it does. 0 keeps the defaults: 30 s at the soak
	// shape (the soak plan's), none elsewhere.
	EngineProgress time.Duration
	// BaselineEngine, when set, is a sortie-bench binary of another
	// commit: right after each engine row of soak, high and low, the same
	// executions run on the engine it serves (its __engine subcommand), as
	// tool engine-baseline, so the two engines are compared in one run.
	BaselineEngine string
	// BaselineTogether runs the baseline engine at the soak shape at the
	// same time as the engine instead of after it, so both see the same
	// machine; at the high and low rates they still run one after the
	// other (two engines at those rates would share one core).
	BaselineTogether bool
}

// Quick durations.
const (
	quickSoak = 6 * time.Second
	quickHigh = 3 * time.Second
	quickStep = 3 * time.Second
	quickLow  = 4 * time.Second
)

// DefaultOptions are the flags' defaults: the full bench of every
// scenario with every peer.
func DefaultOptions(peersBin string) Options {
	return Options{
		Scenarios:    slices.Clone(allScenarios),
		Peers:        slices.Clone(allPeers),
		PeersBin:     peersBin,
		TargetCPU:    0,
		GeneratorCPU: 1,
		SoakDuration: 60 * time.Second,
		HighDuration: 15 * time.Second,
		StepDuration: 10 * time.Second,
		LowDuration:  20 * time.Second,
		HighRate:     50000,
		LowRate:      1000,
		StepRates:    []int{20000, 30000, 40000, 50000, 70000, 90000, 110000},
		// One worker: on one core, more workers (pacers) cost more per
		// request and hold less (see README.md); 32 connections and a
		// queue of 2 s, the renderer's stall budget.
		EngineWorkers:     1,
		EngineConnections: 32,
		EngineMaxPending:  -1,
	}
}

// Validate returns every problem of the options.
func (o Options) Validate() error {
	var errs []error
	if len(o.Scenarios) == 0 {
		errs = append(errs, errors.New("--scenarios: none given"))
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(allScenarios, s) {
			errs = append(errs, fmt.Errorf("--scenarios: unknown scenario %q (want %s)", s, strings.Join(allScenarios, ", ")))
		}
	}
	for _, p := range o.Peers {
		if !slices.Contains(allPeers, p) {
			errs = append(errs, fmt.Errorf("--peers: unknown peer %q (want %s, or none)", p, strings.Join(allPeers, ", ")))
		}
	}
	if o.TargetCPU < -1 || o.GeneratorCPU < -1 || o.TargetCPU > 1023 || o.GeneratorCPU > 1023 {
		errs = append(errs, fmt.Errorf("--target-cpu %d and --generator-cpu %d must be cores from 0 to 1023, or -1", o.TargetCPU, o.GeneratorCPU))
	} else if o.TargetCPU >= 0 && o.TargetCPU == o.GeneratorCPU {
		errs = append(errs, fmt.Errorf("--target-cpu and --generator-cpu are both %d; they must differ", o.TargetCPU))
	}
	if o.EngineProgress < 0 || (o.EngineProgress > 0 && o.EngineProgress < 10*time.Millisecond) {
		errs = append(errs, fmt.Errorf("--engine-progress %v must be 0 or at least 10ms", o.EngineProgress))
	}
	if o.BaselineTogether && o.BaselineEngine == "" {
		errs = append(errs, errors.New("--baseline-together needs --baseline-engine"))
	}
	if o.EngineGOMAXPROCS < 0 || o.EngineGOMAXPROCS > 1024 {
		errs = append(errs, fmt.Errorf("--engine-gomaxprocs %d must be from 0 to 1024", o.EngineGOMAXPROCS))
	}
	if o.Nice < -20 || o.Nice > 19 {
		errs = append(errs, fmt.Errorf("--nice %d must be from -20 to 19", o.Nice))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--soak-duration", o.SoakDuration}, {"--high-duration", o.HighDuration}, {"--step-duration", o.StepDuration}, {"--low-duration", o.LowDuration}} {
		switch {
		case d.v <= 0:
			errs = append(errs, fmt.Errorf("%s %v must be positive", d.name, d.v))
		case d.v%time.Second != 0:
			// Whole seconds keep every planned count whole: 9 rps x
			// 1.5 s is no request count.
			errs = append(errs, fmt.Errorf("%s %v must be whole seconds", d.name, d.v))
		case d.v > 24*time.Hour:
			errs = append(errs, fmt.Errorf("%s %v must be at most 24h", d.name, d.v))
		}
	}
	if o.EngineWorkers < 1 || o.EngineWorkers > 1024 {
		errs = append(errs, fmt.Errorf("--engine-workers %d must be from 1 to 1024", o.EngineWorkers))
	}
	if o.EngineConnections < 1 || o.EngineConnections > 100000 {
		errs = append(errs, fmt.Errorf("--engine-connections %d must be from 1 to 100000", o.EngineConnections))
	}
	if o.EngineMaxPending < -1 || o.EngineMaxPending > 1<<22 {
		errs = append(errs, fmt.Errorf("--engine-max-pending %d must be from -1 to %d", o.EngineMaxPending, 1<<22))
	}
	checkRate := func(name string, r int, split bool) {
		switch {
		case r < 1 || r > 10_000_000:
			errs = append(errs, fmt.Errorf("%s %d must be from 1 to 10000000", name, r))
		case split && o.EngineWorkers >= 1 && r%o.EngineWorkers != 0:
			// The engine takes a rate per worker: a split that is not
			// whole is refused, not rounded.
			errs = append(errs, fmt.Errorf("%s %d is not a multiple of --engine-workers %d", name, r, o.EngineWorkers))
		}
	}
	checkRate("--high-rate", o.HighRate, true)
	checkRate("--low-rate", o.LowRate, false)
	for _, r := range o.StepRates {
		checkRate("--step-rates", r, true)
	}
	if !slices.IsSorted(o.StepRates) {
		errs = append(errs, fmt.Errorf("--step-rates %v must ascend", o.StepRates))
	}
	return errors.Join(errs...)
}

const usageText = `Usage: sortie-bench [flags]

Measures the sortie engine side by side with peer load generators (fortio,
vegeta, wrk) in one run, against one loopback Go net/http target server.
The target runs in a child process pinned to --target-cpu; every generator
(each engine, as a child process of this binary, and each peer process) is
pinned to --generator-cpu. CPU is each process's own user+sys time, peak RSS
its VmHWM (or ru_maxrss for the peers); the bench drives each engine over
gRPC on loopback.

Scenarios:
  soak  the soak shape: one engine, 8 executions (6 x 9 rps + 2 x 3 rps);
        beside it 8 fortio and 8 vegeta processes at 7.5 rps each
  high  --high-rate (50,000 rps) for --high-duration: engine, fortio (as is,
        and with -uniform) and vegeta open loop, wrk closed loop (50
        connections), floor; then the engine is stepped through --step-rates
        until a rate is not held
  low   --low-rate (1,000 rps) for --low-duration: engine, fortio (as is, and
        with -uniform), vegeta, floor

With --baseline-engine BIN (a sortie-bench built from another commit, for
instance the main branch's), each engine row of soak, high and low is
followed by the same executions on BIN's engine (tool engine-baseline).
With --baseline-together as well, the two engines of the soak shape run at
the same time instead, each with its own 8 executions against the one
target, so that the machine's other work during the run falls on both
alike and their CPU ratio is not the drift of a shared machine between two
rows; at the high and low rates they still run one after the other.
Each engine's streamed timeline is checked against its Result: the buckets
must sum to the counters exactly, or the row fails.

The floor is this binary's own minimal client, run like a peer: raw system
calls on one thread, waking at most every 200 us (the engine's batch
window), reading answers at its next wake and writing what fell due. It
parses no HTTP beyond the status line and records no latency, so its cost
per request is what the machine allows, a bound for any client; it is no
peer, and its row shows no percentiles.

Peers are looked up in --peers-bin, then $PATH; one that is missing is
reported "not installed". Install them outside the repository:
  GOBIN=/tmp/peers/bin go install github.com/tsenart/vegeta/v12@v12.13.0
  GOBIN=/tmp/peers/bin go install fortio.org/fortio@v1.68.2
  apt-get install -y wrk

Output (stdout; --json prints one object with the same content instead):
  # sortie-bench <time> <go> <os/arch> cpus=<n> model=<cpu> target_cpu=<n> generator_cpu=<n> nice=<n> loadavg=<1m>,<5m>,<15m>
  a table, one row per tool per scenario:
    SCENARIO TOOL RATE DURATION SENT OK ERRORS CPU_CORES US_PER_REQ PEAK_RSS_MIB P50 P99 NOTES
    RATE is the requested total (closed for wrk); CPU_CORES is CPU seconds
    over wall seconds of the tool's window; US_PER_REQ is CPU microseconds
    per request sent; PEAK_RSS_MIB and CPU of several processes are summed;
    P50/P99 are the engine's latency from the intended send time and each
    peer's own from the actual send (the worst of several processes)
  ASSERT <scenario> <tool> <what> ok|FAILED     counts that must hold
  GOAL <scenario> <tool> <what> met|missed      the engine's targets and held rates;
    with --baseline-engine also cpu_ratio (soak, <= 1.1) and us_per_req_ratio
    (high, <= 1.05) of the engine over the baseline
  CEILING engine held=<rps> not_held=<rps> engine_cores=<x> target_cores=<x> bottleneck=target|engine|both|neither
  # loadavg_after=<1m>,<5m>,<15m>
Logs go to stderr.

Exit status: 0 when every ASSERT held, 1 when one failed or a run broke,
2 for bad flags. A missed GOAL does not change it: timings and rates of a
shared machine are reported, never asserted.

Flags:
`

// parseFlags fills Options from args.
func parseFlags(args []string, stderr io.Writer, peersBin string) (Options, error) {
	o := DefaultOptions(peersBin)
	fs := flag.NewFlagSet("sortie-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	fs.Func("scenarios", "comma-separated `list` of scenarios: soak, high, low (default all)", func(s string) error {
		o.Scenarios = splitList(s)
		return nil
	})
	fs.BoolVar(&o.Quick, "quick", false, "short durations (soak 6s, high 3s, steps 3s, low 4s) for a smoke run; explicit duration flags win")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object instead of the table")
	fs.Func("peers", "comma-separated `list` of peers to run when installed: fortio, vegeta, wrk, or none (default all)", func(s string) error {
		o.Peers = splitList(s)
		if len(o.Peers) == 1 && o.Peers[0] == "none" {
			o.Peers = nil
		}
		return nil
	})
	fs.StringVar(&o.PeersBin, "peers-bin", o.PeersBin, "`directory` searched for the peers before $PATH (default $SORTIE_PEERS_BIN, else /tmp/peers/bin)")
	fs.IntVar(&o.TargetCPU, "target-cpu", o.TargetCPU, "`core` the target server is pinned to (-1: not pinned)")
	fs.IntVar(&o.GeneratorCPU, "generator-cpu", o.GeneratorCPU, "`core` every engine and peer is pinned to (-1: not pinned)")
	fs.IntVar(&o.Nice, "nice", 0, "nice `value` of the target and every generator; -10 (root only) lets them run ahead of other work on a shared machine")
	fs.DurationVar(&o.SoakDuration, "soak-duration", o.SoakDuration, "`duration` of the soak shape (whole seconds)")
	fs.DurationVar(&o.HighDuration, "high-duration", o.HighDuration, "`duration` of each tool's run at --high-rate")
	fs.DurationVar(&o.StepDuration, "step-duration", o.StepDuration, "`duration` of each step of the engine's step-up")
	fs.DurationVar(&o.LowDuration, "low-duration", o.LowDuration, "`duration` of each tool's run at --low-rate")
	fs.IntVar(&o.HighRate, "high-rate", o.HighRate, "`rps` of scenario high")
	fs.IntVar(&o.LowRate, "low-rate", o.LowRate, "`rps` of scenario low")
	fs.Func("step-rates", "ascending comma-separated `rps` list the engine steps through until one is not held, or none (default 20000,30000,40000,50000,70000,90000,110000)", func(s string) error {
		o.StepRates = nil
		for _, f := range splitList(s) {
			if f == "none" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("rate %q: %w", f, err)
			}
			o.StepRates = append(o.StepRates, n)
		}
		return nil
	})
	fs.IntVar(&o.EngineWorkers, "engine-workers", o.EngineWorkers, "engine `workers` at high rate; the rate is split evenly among them")
	fs.IntVar(&o.EngineConnections, "engine-connections", o.EngineConnections, "engine connection cap per worker at high rate")
	fs.IntVar(&o.EngineMaxPending, "engine-max-pending", o.EngineMaxPending, "engine queue per worker (max_pending_requests) at high rate; -1: 2 s of a worker's rate, the plan renderer's stall budget")
	fs.IntVar(&o.EngineGOMAXPROCS, "engine-gomaxprocs", 0, "GOMAXPROCS of the engine children (0: Go's default, 1 when pinned to one core)")
	fs.StringVar(&o.CPUProfileDir, "cpuprofile-dir", "", "`directory` for a CPU profile of every engine child (engine-<scenario>-<rate>.pprof)")
	fs.DurationVar(&o.EngineProgress, "engine-progress", 0, "progress `interval` of every engine execution, which streams the timeline (0: 30s at the soak shape, none elsewhere)")
	fs.BoolVar(&o.BaselineTogether, "baseline-together", false, "with --baseline-engine: at the soak shape run both engines at the same time, each with its 8 executions, so that the machine's other work falls on both alike (high and low still run one after the other)")
	fs.StringVar(&o.BaselineEngine, "baseline-engine", "", "sortie-bench `binary` of another commit: each engine row of soak, high and low runs again right after on its engine, as tool engine-baseline")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, errHelp
		}
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, d := range []struct {
			name string
			p    *time.Duration
			v    time.Duration
		}{{"soak-duration", &o.SoakDuration, quickSoak}, {"high-duration", &o.HighDuration, quickHigh},
			{"step-duration", &o.StepDuration, quickStep}, {"low-duration", &o.LowDuration, quickLow}} {
			if !set[d.name] {
				*d.p = d.v
			}
		}
	}
	return o, o.Validate()
}

// errHelp says --help was asked for and printed.
var errHelp = errors.New("help requested")

// splitList splits a comma-separated list, dropping empty elements.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
