// Package bench is sortie-bench: it measures the engine side by side with
// peer load generators (fortio, vegeta, wrk) in one run, against one
// loopback Go net/http target, and prints one row per tool per scenario.
//
// Every measured program is a process of its own, so its CPU (user+sys)
// and peak RSS are its own: the target and each engine are child processes
// of the bench's binary (hidden subcommands __target and __engine), the
// peers are their own binaries. The target is pinned to one core and every
// generator to another, so a generator's cost is not hidden in the
// target's, and the engine is driven over its gRPC API as the driver does.
//
// Timings and rates are reported, never asserted: the machines are shared
// and noisy. What the bench asserts is counts (every planned request of
// the engine sent and answered 2xx, at every scenario); whether a rate was
// held is a goal, measured.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
)

// Run is sortie-bench's main.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case cmdTarget:
			return runTarget(ctx, args[1:], stdout, stderr)
		case cmdEngine:
			return runEngineChild(ctx, args[1:], stdout, stderr)
		case cmdFloor:
			return runFloor(ctx, args[1:], stdout, stderr)
		}
	}
	peersBin := os.Getenv("SORTIE_PEERS_BIN")
	if peersBin == "" {
		peersBin = "/tmp/peers/bin"
	}
	o, err := parseFlags(args, stderr, peersBin)
	if errors.Is(err, errHelp) {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	self, err := os.Executable()
	if err != nil {
		return cli.Fail(fmt.Errorf("find own executable: %w", err))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "bench")
	b := &bench{opts: o, self: []string{self}, log: log, stderr: stderr}
	out, err := b.run(ctx, args)
	if out != nil {
		if werr := writeOutput(stdout, out, o.JSON); werr != nil {
			return cli.Fail(fmt.Errorf("write output: %w", werr))
		}
	}
	if err != nil {
		return cli.Fail(err)
	}
	for _, c := range out.Checks {
		if c.Kind == checkAssert && !c.Pass {
			return cli.Fail(fmt.Errorf("%d assertion(s) failed; see the ASSERT lines", out.failedAsserts()))
		}
	}
	return nil
}

// bench is one run of sortie-bench.
type bench struct {
	opts   Options
	self   []string // the command that starts this binary
	log    *slog.Logger
	stderr io.Writer

	tmp    string
	target *server
	url    string
	// targetCPU and genCPU are the cores in use, -1 where the machine
	// cannot pin.
	targetCPU, genCPU int
}

// run runs the scenarios and returns what to print; out is non-nil
// whenever something was measured, even when err is not nil.
func (b *bench) run(ctx context.Context, args []string) (*Output, error) {
	o := b.opts
	out := &Output{
		StartedAt:     time.Now().UTC(),
		Command:       strings.TrimSpace("sortie-bench " + strings.Join(args, " ")),
		Go:            runtime.Version(),
		Platform:      runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:          runtime.NumCPU(),
		Model:         cpuModel(),
		LoadavgBefore: readLoadavg(),
	}
	b.targetCPU, b.genCPU = o.TargetCPU, o.GeneratorCPU
	for _, c := range []*int{&b.targetCPU, &b.genCPU} {
		if *c >= 0 && !cpuAllowed(*c) {
			b.log.Warn("core not available; running unpinned", "cpu", *c)
			*c = -1
		}
	}
	out.TargetCPU, out.GeneratorCPU, out.Nice = b.targetCPU, b.genCPU, o.Nice

	tmp, err := os.MkdirTemp("", "sortie-bench-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	b.tmp = tmp
	defer func() { _ = os.RemoveAll(tmp) }()
	if o.CPUProfileDir != "" {
		if err := os.MkdirAll(o.CPUProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("cpu profile directory: %w", err)
		}
	}

	b.target, err = startServer(ctx, "target", b.self, []string{cmdTarget, "--listen", "127.0.0.1:0"}, b.targetCPU, o.Nice, nil, b.stderr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.target.stop(10 * time.Second) }()
	b.url = "http://" + b.target.addr + "/"
	b.log.Info("target listening", "url", b.url, "pid", b.target.pid(), "cpu", b.targetCPU)

	var runErr error
	for _, s := range o.Scenarios {
		var rows []Row
		var err error
		switch s {
		case scenarioSoak:
			rows, err = b.soak(ctx)
		case scenarioHigh:
			rows, out.Ceiling, err = b.high(ctx)
		case scenarioLow:
			rows, err = b.low(ctx)
		}
		out.Rows = append(out.Rows, rows...)
		if err != nil {
			runErr = fmt.Errorf("scenario %s: %w", s, err)
			break
		}
	}
	out.Checks = checks(o, out.Rows)
	out.LoadavgAfter = readLoadavg()
	return out, runErr
}

// pause lets the target settle (closed connections, TIME_WAIT) between
// rows.
func pause(ctx context.Context) error {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// soak runs the soak shape: one engine with 8 executions, 8 fortio and 8
// vegeta processes.
func (b *bench) soak(ctx context.Context) ([]Row, error) {
	d := b.opts.SoakDuration
	var execs []engineExec
	for i := range 8 {
		rate := uint32(9)
		if i >= 6 {
			rate = 3
		}
		// The soak plan's shape: one worker, max_pending_requests 18,
		// default connections, a progress snapshot every 30 s.
		progress := 30 * time.Second
		if p := b.opts.EngineProgress; p > 0 {
			progress = p
		}
		execs = append(execs, engineExec{ID: fmt.Sprintf("soak-%d", i), Rate: rate, Workers: 1, Duration: d, MaxPending: 18, Progress: progress})
	}
	rows, err := b.engineRows(ctx, scenarioSoak, 60, d, execs)
	if err != nil {
		return rows, err
	}
	for _, p := range []string{peerFortio, peerVegeta} {
		if err := pause(ctx); err != nil {
			return rows, err
		}
		row, err := b.peerRow(ctx, scenarioSoak, p, 8, 7.5, d)
		rows = append(rows, row)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// highExec is the engine's execution at rate rps: split among the
// workers.
func (b *bench) highExec(id string, rate int, d time.Duration) []engineExec {
	o := b.opts
	perWorker := rate / o.EngineWorkers
	pending := o.EngineMaxPending
	if pending < 0 {
		pending = 2 * perWorker
	}
	return []engineExec{{
		ID: id, Rate: uint32(perWorker), Workers: uint32(o.EngineWorkers), Duration: d,
		Connections: uint32(o.EngineConnections), MaxPending: uint32(pending), Progress: o.EngineProgress,
	}}
}

// high runs scenario high: every tool at HighRate, wrk closed loop, then
// the engine's step-up.
func (b *bench) high(ctx context.Context) ([]Row, *Ceiling, error) {
	o := b.opts
	d := o.HighDuration
	rows, err := b.engineRows(ctx, scenarioHigh, o.HighRate, d, b.highExec("high", o.HighRate, d))
	if err != nil {
		return rows, nil, err
	}
	for _, p := range []string{peerFortio, peerFortioUniform, peerVegeta, peerWrk, peerFloor} {
		if err := pause(ctx); err != nil {
			return rows, nil, err
		}
		rate := float64(o.HighRate)
		if p == peerWrk {
			rate = 0 // closed loop
		}
		row, err := b.peerRow(ctx, scenarioHigh, p, 1, rate, d)
		rows = append(rows, row)
		if err != nil {
			return rows, nil, err
		}
	}
	if len(o.StepRates) == 0 {
		return rows, nil, nil
	}
	c := &Ceiling{}
	var last Row
	for _, rate := range o.StepRates {
		if err := pause(ctx); err != nil {
			return rows, c, err
		}
		row, err := b.engineRow(ctx, scenarioStep, toolEngine, b.self, rate, o.StepDuration, b.highExec(fmt.Sprintf("step-%d", rate), rate, o.StepDuration))
		rows = append(rows, row)
		if err != nil {
			return rows, c, err
		}
		last = row
		if !row.Held {
			c.NotHeld = rate
			break
		}
		c.Held = rate
	}
	c.EngineCores, c.TargetCores = last.CPUCores, last.TargetCores
	c.Bottleneck = bottleneck(last.CPUCores, last.TargetCores)
	return rows, c, nil
}

// bottleneck names which side saturated its core at the last step.
func bottleneck(engineCores, targetCores float64) string {
	const busy = 0.9
	switch e, t := engineCores >= busy, targetCores >= busy; {
	case e && t:
		return "both"
	case t:
		return "target"
	case e:
		return "engine"
	default:
		return "neither"
	}
}

// low runs scenario low: every open-loop tool at LowRate.
func (b *bench) low(ctx context.Context) ([]Row, error) {
	o := b.opts
	d := o.LowDuration
	execs := []engineExec{{ID: "low", Rate: uint32(o.LowRate), Workers: 1, Duration: d, MaxPending: 100, Progress: o.EngineProgress}}
	rows, err := b.engineRows(ctx, scenarioLow, o.LowRate, d, execs)
	if err != nil {
		return rows, err
	}
	for _, p := range []string{peerFortio, peerFortioUniform, peerVegeta, peerFloor} {
		if err := pause(ctx); err != nil {
			return rows, err
		}
		row, err := b.peerRow(ctx, scenarioLow, p, 1, float64(o.LowRate), d)
		rows = append(rows, row)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// Tools of the engine rows.
const (
	toolEngine   = "engine"
	toolBaseline = "engine-baseline" // --baseline-engine's
)

// engineRows is the engine's row of a scenario, and the baseline
// engine's when there is one: right after it, or at the same time at the
// soak shape with --baseline-together.
func (b *bench) engineRows(ctx context.Context, scenario string, rate int, d time.Duration, execs []engineExec) ([]Row, error) {
	if b.opts.BaselineEngine != "" && b.opts.BaselineTogether && scenario == scenarioSoak {
		return b.engineRowsTogether(ctx, scenario, rate, d, execs)
	}
	row, err := b.engineRow(ctx, scenario, toolEngine, b.self, rate, d, execs)
	rows := []Row{row}
	if err != nil || b.opts.BaselineEngine == "" {
		return rows, err
	}
	if err := pause(ctx); err != nil {
		return rows, err
	}
	row, err = b.engineRow(ctx, scenario, toolBaseline, []string{b.opts.BaselineEngine}, rate, d, execs)
	row.note("baseline %s", b.opts.BaselineEngine)
	return append(rows, row), err
}

// engineRowsTogether runs the engine and the baseline engine at the same
// time, each its own child with its own copy of execs against the one
// target, both pinned to the generator core: whatever else the machine
// does during the run falls on both alike, so their CPU ratio is not the
// drift of a shared machine from one row to the next. Only for the soak
// shape, where each engine needs well under 1 % of the core.
func (b *bench) engineRowsTogether(ctx context.Context, scenario string, rate int, d time.Duration, execs []engineExec) ([]Row, error) {
	tools := []string{toolEngine, toolBaseline}
	bins := [][]string{b.self, {b.opts.BaselineEngine}}
	runs := make([]*engineRun, len(tools))
	defer func() {
		for _, r := range runs {
			if r != nil {
				r.stop()
			}
		}
	}()
	for i, tool := range tools {
		r, err := b.startEngine(ctx, scenario, tool, bins[i], rate, d)
		if err != nil {
			return nil, err
		}
		runs[i] = r
	}
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.drive(ctx, b.url, execs)
		}()
	}
	wg.Wait()
	rows := make([]Row, len(runs))
	for i, r := range runs {
		rows[i] = r.row
		if errs[i] == nil {
			rows[i] = fillEngineRow(r.row, r.res, r.m, scenario, rate, execs)
		}
		rows[i].note("run at the same time as the other engine")
	}
	rows[1].note("baseline %s", b.opts.BaselineEngine)
	return rows, errors.Join(errs...)
}

// engineRun is one engine child while a row is measured.
type engineRun struct {
	b       *bench
	row     Row
	eng     *server
	stopped bool
	res     engineOutcome
	m       measure
}

// startEngine starts an engine child (bin's __engine subcommand) for a row
// of tool at scenario.
func (b *bench) startEngine(ctx context.Context, scenario, tool string, bin []string, rate int, d time.Duration) (*engineRun, error) {
	r := &engineRun{b: b, row: Row{Scenario: scenario, Tool: tool, Processes: 1, Rate: float64(rate), Duration: d.String(), Installed: true, LatencyFrom: "intended"}}
	args := []string{cmdEngine, "--listen", "127.0.0.1:0"}
	if dir := b.opts.CPUProfileDir; dir != "" {
		p := filepath.Join(dir, fmt.Sprintf("%s-%s-%d.pprof", tool, scenario, rate))
		args = append(args, "--cpuprofile", p)
		r.row.Profile = p
	}
	var env []string
	if n := b.opts.EngineGOMAXPROCS; n > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", n))
		r.row.note("GOMAXPROCS=%d", n)
	}
	eng, err := startServer(ctx, tool, bin, args, b.genCPU, b.opts.Nice, env, b.stderr)
	if err != nil {
		return nil, err
	}
	r.eng = eng
	b.log.Info("run", "scenario", scenario, "tool", tool, "rate", rate, "duration", d, "pid", eng.pid())
	return r, nil
}

// stop stops the child, if drive did not.
func (r *engineRun) stop() {
	if !r.stopped {
		r.stopped = true
		_ = r.eng.stop(15 * time.Second)
	}
}

// drive runs execs on the child and measures its CPU over the window
// from just before the first Execute to the last Result, and its peak
// RSS; then it stops the child.
func (r *engineRun) drive(ctx context.Context, url string, execs []engineExec) error {
	w, err := r.b.startWindow(r.eng.pid())
	if err != nil {
		return err
	}
	res, runErr := driveEngine(ctx, r.eng.addr, url, execs)
	m, err := w.end(r.eng.pid())
	if err != nil {
		return err
	}
	r.stopped = true
	if err := r.eng.stop(15 * time.Second); err != nil {
		return fmt.Errorf("engine child: %w", err)
	}
	r.res, r.m = res, m
	return runErr
}

// engineRow runs execs on an engine child (bin's __engine subcommand) and
// returns its row.
func (b *bench) engineRow(ctx context.Context, scenario, tool string, bin []string, rate int, d time.Duration, execs []engineExec) (Row, error) {
	r, err := b.startEngine(ctx, scenario, tool, bin, rate, d)
	if err != nil {
		return Row{Scenario: scenario, Tool: tool, Processes: 1, Rate: float64(rate), Duration: d.String(), Installed: true, LatencyFrom: "intended"}, err
	}
	defer r.stop()
	if err := r.drive(ctx, b.url, execs); err != nil {
		return r.row, err
	}
	return fillEngineRow(r.row, r.res, r.m, scenario, rate, execs), nil
}

// fillEngineRow fills row with what an engine's run measured.
func fillEngineRow(row Row, res engineOutcome, m measure, scenario string, rate int, execs []engineExec) Row {
	row.setMeasure(m)
	row.Planned, row.Sent, row.OK, row.Errors = res.Planned, res.Sent, res.OK, res.Errors
	row.P50NS, row.P99NS, row.P99SentNS = int64(res.P50), int64(res.P99), int64(res.P99R)
	if res.Elapsed > 0 {
		row.AchievedRate = float64(res.Sent) / res.Elapsed.Seconds()
	}
	row.setPerRequest()
	// Held: at least 99 % of the plan sent, nothing refused by the queue,
	// no error, and (but at the soak shape, whose count is asserted) the
	// achieved rate, sent over the time to the last answer, at least 99 %
	// of the rate: a queue deep enough to take a stall would otherwise
	// hide a rate the target or engine cannot keep.
	row.Held = res.Errors == 0 && res.Overflow == 0 && float64(res.Sent) >= 0.99*float64(res.Planned) &&
		(scenario == scenarioSoak || row.AchievedRate >= 0.99*float64(rate))
	if len(execs) > 1 {
		row.note("p50/p99 worst of %d executions", len(execs))
	}
	row.note("%d worker(s), %d connections and a queue of %d each", execs[0].Workers, execs[0].Connections, execs[0].MaxPending)
	row.note("request_to_response p50/p99 %s/%s", fmtDur(res.P50R), fmtDur(res.P99R))
	row.note("send_lateness p99 %s, late_sends %d", fmtDur(res.LateP99), res.LateSends)
	if res.Overflow > 0 {
		row.note("pool_overflow %d", res.Overflow)
	}
	if res.Errors > res.Overflow {
		row.note("errors: %s", errorCounters(res.Counters))
	}
	if res.Unsent > 0 {
		row.note("unsent %d", res.Unsent)
	}
	if res.Buckets > 0 {
		row.note("timeline %d buckets summed to the counters, %d progress events", res.Buckets, res.ProgressEvents)
	}
	return row
}
