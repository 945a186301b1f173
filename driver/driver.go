// Package driver is sortie's driver: `sortie run | validate | compile`. It
// reads a v1 plan, resolves each pool of engines once, starts every
// execution of a stage on every backend of the pool with one shared start
// time, enforces a deadline per backend, judges thresholds, and writes the
// verdict as a JSON report (atomically) and a results stream (appended and
// synced line by line). The report schema, its reader and the law every
// result keeps are package record's.
//
// A run survives its engines: a backend whose stream breaks is named lost,
// one that stays silent past its deadline is cancelled and then named
// silent, one that refuses a start at its execution cap stops its stage;
// the other backends are reported whole. A driver that was itself stopped
// (SIGSTOP) past a deadline takes the answers waiting for it on resume
// instead of blaming the engines. Every result is checked against planned
// = unsent + the outcome classes; one that breaks it is named in the
// report (a backend error of kind accounting) and fails its execution.
//
// Before any load the driver asks every engine for its Info once and
// records in the report what made the run (made_by: its own build and
// host, the plan as read, each engine's build and host). While the run
// goes it shows a live status per target from the engines' Progress
// events: a block redrawn at the foot of a terminal, or plain status
// lines (status.go); it owns no timer for it, so the deadline loop's
// clock stays the only one.
//
// All of the driver's time goes through Options.Clock, so its tests run
// the deadline phases on a fake clock.
package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/driver/plan"
	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

const usageTop = `Usage: sortie <command> [flags] PLAN

Commands:
  run PLAN       run the plan against its pools of engines
  validate PLAN  check the plan and print what it would run
  compile PLAN   print the engine requests of every backend (JSON)
  cat FILE       print FILE on stdout (the saver's reader pod runs this in
                 the driver image, which holds no shell tools)

Run "sortie <command> --help" for the command's flags.

Exit codes: 0 every execution passed; 1 a threshold failed, an execution
errored or was not run, or the run was interrupted (SIGINT, SIGTERM);
2 unusable input: the plan, the flags, or a dns pool that never resolved
(always before any load).
`

const usageRun = `Usage: sortie run PLAN [-o report.json] [--json] [--results-stream FILE] [--progress DUR]
                  [--live-record FILE|-|off] [--status auto|tty|lines|off] [--status-interval DUR]

Runs the plan's scenarios in file order, never overlapping; a scenario's
stages in order; every execution of a stage on every backend of its pool
together, with one start time. A dns pool is resolved once, at the start
(A and AAAA, sorted, de-duplicated), retried every second for up to 30s
while its answer is empty.

Each backend has a deadline of duration + timeout + drain (5s) + the
deadline grace after the stage's start time. An answer that arrives within
the answer window after it is taken; then the execution is cancelled on
that backend and given the cancel wait to answer, after which the backend
is named silent. A backend whose stream breaks is named lost. A start
refused at an engine's execution cap cancels the whole stage and the
scenario's later stages are not run. SIGINT or SIGTERM cancels every
running execution, keeps what comes back, writes the report, and exits 1.

Every result is checked against planned = unsent + the outcome classes; a
backend whose result breaks it ("accounting: 1349 outcomes for 1350 planned
on node-b") fails the execution.

-o and --results-stream must name two files (not one file by two names):
the report is renamed into place and would replace the stream. Both are
checked before the plan is read.

The live record (--live-record FILE; by default, with --results-stream S,
S with its extension replaced by .live.jsonl; - or off for none) is on
disk within seconds of what it says: the engines report every second
while it is written, and what they sent is appended with one write and
one sync at most four times a second. Its first line of a run is {"type":"head",
"made_by":{...},"run_id":...}; then one {"type":"bucket",...} line per
final timeline bucket of each execution on each backend (label, backend,
backend_name, index, start, offset_ms, width_ms, counters, unsent,
latency {count,p50,p99,max} in ns, samples_dropped) and one
{"type":"sample",...} line per failure sample (label, backend, bucket,
due, outcome, latency_ns, class, reason, phase, status, remote,
conn_age_ms, conn_requests), in the order they come. It is append-only
and torn-line safe like the results stream; the report names it
(live_record). A backend lost or silent keeps what its buckets had
counted: a result with "partial": true and "counted_until" (the end of
its contiguous buckets from 0), its counters their sums and its planned
the requests due before counted_until, next to its backend_errors entry.

Flags:
%s
stderr lines (stdout carries only the summary or the JSON report):
  running <label> (<rate> rps per backend for <dur>[, ramp <dur>]) on <b1>, <b2>
      an execution was dispatched ("over the pool" when the rate is the pool's)
  progress <label> <backend> <elapsed> 2xx=N [<class>=N ...] [mean=<d> max=<d>]
      every --progress, per execution and backend; non-zero outcome classes
      (1xx 3xx 4xx 5xx stream_resets pool_connection_failure
      pool_failure_timeout pool_overflow inflight_lost)
  status <label> sent=N answered=N 2xx=N failures=<class>=N,...|none backends=R/B elapsed=<d>/<planned>
      the live status of a running target, summed over its backends:
      sent counts the requests with an outcome (a request in flight is
      counted when it ends), answered those with an HTTP response (1xx to
      5xx), failures the non-zero classes of the zero-failure set (4xx 5xx
      stream_resets pool_connection_failure pool_failure_timeout
      pool_overflow inflight_lost), backends those of B that reported,
      elapsed the furthest backend's time since the start (whole seconds)
      against the planned duration. The engines report every second while
      a status is shown (--progress lines still come every --progress).
      --status lines (auto when stderr is not a terminal): a line per
      target once all its backends first reported, then every
      --status-interval. --status tty (auto on a terminal): one line per
      running target in a block kept at the foot of the terminal, redrawn
      in place (ANSI cursor movement) at most four times a second, every
      other line printed above it; a finished target leaves the block.
  PASS <label> (scenario <s>, <elapsed>)
  FAIL <label> (scenario <s>, <elapsed>): <reason>[; <reason> ...]
  SKIP <label> (scenario <s>): not run: <why>
      one line per finished execution, in the order they finish
  PASS|FAIL  N/M executions passed[, K not run][ (run interrupted)]
      last, on stderr and at the end of the stdout summary: M counts the
      executions started, K those never started

The report (-o) and each results-stream line follow the schema documented
in package github.com/sortie-soak/sortie/record. The report's made_by says
what made the run: the driver's version, vcs revision, Go version, host,
kernel and CPUs; the plan's path, sha256 and text as read; and per engine
(backend address) its node, version, build, kernel and CPUs from its Info
call, asked once before any load ("unknown": true, with why, for an engine
that does not answer; the run goes on). Per execution:
  failures[]         one {"backend", "counters"} object per backend with a
                     non-zero failure class (4xx, 5xx, resets, connection
                     failures and timeouts, overflow, in-flight losses, and
                     their detail counters), holding those counters: the
                     shape the sortie + Nighthawk stack writes
  failure_reasons[]  every reason it failed, in words: what the FAIL line
                     prints, including backends that sent no result
  backend_errors[]   {"backend", "kind", "error"}: kind is lost, silent,
                     rejected, refused, late, stalled, cancelled or
                     accounting; the words begin as they always have

Exit codes: 0 every execution passed; 1 a threshold failed, a backend
failed (lost, silent, stalled, refused, a result that breaks the
accounting), an execution was not run, or the run was interrupted; 2 the
plan or the flags are unusable (-o and --results-stream one file, -o a
directory), or a dns pool never resolved (before any load).
`

const usagePlanOnly = `Usage: sortie %s PLAN

%s

A dns pool is not resolved: its host:port stands in as the only backend.

Exit codes: 0 the plan is valid; 2 it is not (every problem is printed with
its file:line:col).
`

// Run is the sortie command: run, validate or compile a plan.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return RunOptions(ctx, DefaultOptions(), args, stdout, stderr)
}

// RunOptions is Run with options other than the defaults; the flags of the
// run command override the fields they name.
func RunOptions(ctx context.Context, o Options, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		io.WriteString(stderr, usageTop)
		return cli.Usage(errors.New("no command"))
	}
	switch args[0] {
	case "run":
		return runCommand(ctx, o, args[1:], stdout, stderr)
	case "validate":
		return planCommand("validate", args[1:], stdout, stderr, func(c *plan.Compiled) error {
			c.Describe(stdout)
			return nil
		})
	case "compile":
		return planCommand("compile", args[1:], stdout, stderr, func(c *plan.Compiled) error {
			return c.WriteRequests(stdout)
		})
	case "cat":
		return catCommand(args[1:], stdout)
	case "-h", "-help", "--help", "help":
		io.WriteString(stderr, usageTop)
		return nil
	}
	io.WriteString(stderr, usageTop)
	return cli.Usage(fmt.Errorf("unknown command %q", args[0]))
}

// runFlags are the run command's flags.
type runFlags struct {
	output         string
	json           bool
	stream         string
	live           string
	progress       time.Duration
	status         string
	statusInterval time.Duration
	plan           string
}

func newRunFlagSet(o *Options, f *runFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sortie run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.output, "o", "", "write the JSON report to `FILE`, atomically (never the results stream)")
	fs.StringVar(&f.output, "output", "", "same as -o `FILE`")
	fs.BoolVar(&f.json, "json", false, "print the JSON report on stdout instead of the text summary")
	fs.StringVar(&f.stream, "results-stream", "", "append each finished execution to `FILE` as one JSON line, synced")
	fs.StringVar(&f.live, "live-record", "", "append every timeline bucket and failure sample the engines send to `FILE` as JSON lines, synced as they come (default: the results stream's name with its extension replaced by .live.jsonl; - or off: none)")
	fs.DurationVar(&f.progress, "progress", 30*time.Second, "print a progress line per execution and backend every `DUR` (0: never)")
	fs.StringVar(&f.status, "status", "auto", "show a live status per target as `MODE`: tty (a block redrawn at the foot of the terminal), lines (status lines), off, or auto (tty when stderr is a terminal, else lines)")
	fs.DurationVar(&f.statusInterval, "status-interval", 10*time.Second, "with --status lines, print each running target's status line every `DUR`")
	fs.DurationVar(&o.Grace, "deadline-grace", o.Grace, "slack on top of duration + timeout + drain before a backend's deadline")
	fs.DurationVar(&o.AnswerWindow, "answer-window", o.AnswerWindow, "how long after its deadline a backend's answer is still awaited before the execution is cancelled on it")
	fs.DurationVar(&o.CancelWait, "cancel-wait", o.CancelWait, "how long a cancelled execution may take to answer before its backend is named silent")
	fs.Usage = func() {
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, usageRun, b.String())
	}
	return fs
}

// parseInterspersed parses flags that may come before or after the one
// positional argument.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func runCommand(ctx context.Context, o Options, args []string, stdout, stderr io.Writer) error {
	var f runFlags
	fs := newRunFlagSet(&o, &f, stderr)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	terminal, width := terminalOf(stderr)
	mode, err := f.check(o, pos, terminal)
	if err != nil {
		return cli.Usage(err)
	}
	planData, compiled, err := loadPlan(ctx, o, f.plan)
	if err != nil {
		return err
	}

	// A report that cannot be written is found out now, not after hours
	// of load.
	if f.output != "" {
		if err := checkWritable(f.output); err != nil {
			return cli.Usage(err)
		}
	}
	var stream *record.StreamWriter
	if f.stream != "" {
		if stream, err = record.OpenStream(f.stream); err != nil {
			return cli.Usage(err)
		}
		defer stream.Close()
	}

	lines := &lineWriter{w: stderr}
	r := &runner{opts: o, log: o.logger(lines), lines: lines, runID: newRunID()}
	livePath := liveRecordPath(f.live, f.stream)
	// The live record needs the engines' buckets within seconds: they
	// come with Progress events, so the engines report every status tick
	// as they do for a live status.
	r.progressInterval, r.progressEvery = progressCadence(f.progress, o.StatusTick, mode != statusOff || livePath != "")
	if mode != statusOff {
		r.status = &statusBoard{mode: mode, now: o.now, interval: f.statusInterval, redraw: o.StatusRedraw, lines: lines}
	}
	if mode == statusTTY {
		lines.block = &liveBlock{width: width}
	}
	defer r.close()
	scenarios := fromCompiled(compiled)
	madeBy := r.madeBy(ctx, f.plan, planData, scenarios)
	if livePath != "" {
		if r.live, err = openLive(livePath, record.HeadLine{MadeBy: madeBy, RunID: r.runID}, r.log); err != nil {
			return cli.Usage(err)
		}
	}
	rep, runErr := r.run(ctx, scenarios, stream)
	// Every line the engines sent is on disk before the report names
	// the file.
	if err := r.live.close(); err != nil {
		r.log.Error("live record", "err", err)
	}
	rep.MadeBy = madeBy
	if livePath != "" {
		rep.LiveRecord = livePath
	}

	errs := []error{runErr}
	if f.output != "" {
		errs = append(errs, record.WriteReport(f.output, rep))
	}
	if f.json {
		b, err := record.Marshal(rep)
		errs = append(errs, err)
		if err == nil {
			stdout.Write(b)
		}
	} else {
		writeSummary(stdout, rep)
	}
	r.lines.printf("%s", finalLine(rep))
	switch {
	case errors.Join(errs...) != nil:
		return cli.Fail(errors.Join(errs...))
	case rep.Cancelled:
		return cli.Fail(errors.New("the run was interrupted; what came back is in the report"))
	case !rep.Pass:
		return cli.Silent(cli.ExitFail)
	}
	return nil
}

// check takes the positional arguments and returns every problem of the
// flags at once, and the status mode (terminal says stderr is one).
func (f *runFlags) check(o Options, pos []string, terminal bool) (statusMode, error) {
	var problems []error
	switch len(pos) {
	case 0:
		problems = append(problems, errors.New("run needs a PLAN"))
	case 1:
		f.plan = pos[0]
	default:
		problems = append(problems, fmt.Errorf("run takes one PLAN, not %d arguments (%s)", len(pos), strings.Join(pos, " ")))
	}
	if f.progress < 0 {
		problems = append(problems, fmt.Errorf("--progress must not be negative, not %v", f.progress))
	}
	mode, err := parseStatusMode(f.status, terminal)
	if err != nil {
		problems = append(problems, err)
	}
	if f.statusInterval <= 0 {
		problems = append(problems, fmt.Errorf("--status-interval must be positive, not %v", f.statusInterval))
	}
	if err := o.Validate(); err != nil {
		problems = append(problems, err)
	}
	if err := checkOutputs(f.output, f.stream); err != nil {
		problems = append(problems, err)
	}
	if live := liveRecordPath(f.live, f.stream); live != "" {
		for _, other := range []struct{ flag, path string }{{"the results stream", f.stream}, {"the report", f.output}} {
			if other.path != "" && sameFile(live, other.path) {
				problems = append(problems, fmt.Errorf("live record %s is %s %s: give them two files", live, other.flag, other.path))
			}
		}
	}
	return mode, errors.Join(problems...)
}

// loadPlan reads, validates and compiles the plan, resolving its pools;
// its error carries the exit code. The plan's bytes as read are kept for
// the record (made_by), so the file is read once, here.
func loadPlan(ctx context.Context, o Options, path string) ([]byte, *plan.Compiled, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, cli.Usage(fmt.Errorf("read plan %s: %w", path, err))
	}
	p, err := plan.Parse(path, data)
	if err != nil {
		return nil, nil, cli.Usage(err)
	}
	// Every rule that does not need the pools' addresses is checked
	// before a dns pool is waited for.
	if _, err := p.Compile(p.Placeholders()); err != nil {
		return nil, nil, cli.Usage(err)
	}
	backends, err := resolvePools(ctx, o, p)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, cli.Fail(fmt.Errorf("interrupted before any load: %w", err))
		}
		return nil, nil, cli.Usage(err)
	}
	compiled, err := p.Compile(backends)
	if err != nil {
		return nil, nil, cli.Usage(err)
	}
	return data, compiled, nil
}

// run runs every scenario and returns the report. Its error is only for a
// results stream that could not be written; the run goes on regardless.
func (r *runner) run(ctx context.Context, scenarios []*scenarioRun, stream *record.StreamWriter) (*record.Report, error) {
	rep := &record.Report{Executions: []record.Execution{}}
	var streamErr error
	finish := func(e record.Execution) {
		rep.Executions = append(rep.Executions, e)
		// On disk first: a PASS/FAIL line someone saw is in the stream.
		if stream != nil {
			if err := stream.Append(e); err != nil && streamErr == nil {
				streamErr = err
				r.log.Error("results stream", "err", err)
			}
		}
		r.status.done(e.Label)
		r.lines.finished(e)
	}
	for _, sc := range scenarios {
		skip := ""
		for _, st := range sc.stages {
			if ctx.Err() != nil || r.interrupted {
				r.interrupted = true
				skip = "the run was interrupted (SIGINT or SIGTERM) before this execution started"
			}
			if skip != "" {
				for _, ex := range st.execs {
					finish(notRun(sc, ex, skip))
				}
				continue
			}
			out := r.runStage(ctx, sc, st)
			var rf *refusal
			if len(out.refusedBy) > 0 {
				c := out.refusedBy[0]
				// The refusal carries the engine's cap in its detail: no
				// second call to ask for it.
				limit, _ := enginev1.RefusedAtCap(c.err)
				rf = &refusal{backend: c.backend, cap: limit, need: len(st.execs), err: c.err}
				skip = rf.notRunAfter(stageName(sc, st))
			}
			for _, ex := range st.execs {
				finish(r.verdict(sc, ex, out, rf))
			}
		}
	}
	rep.Cancelled = r.interrupted
	rep.Pass = !rep.Cancelled
	for _, e := range rep.Executions {
		if !e.Pass {
			rep.Pass = false
		}
	}
	return rep, streamErr
}

// stageName is "<scenario>/<stage>", or the scenario's name for a scenario
// of one stage.
func stageName(sc *scenarioRun, st *stageRun) string {
	if st.name == "" {
		return sc.name
	}
	return sc.name + "/" + st.name
}

// checkWritable checks that a report can be created next to path: the
// report is written there through a temporary file and a rename.
func checkWritable(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".check-*")
	if err != nil {
		return fmt.Errorf("report %s cannot be written: %w", path, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// newRunID makes the prefix of this run's execution ids, unique enough
// that two drivers sharing an engine never collide.
func newRunID() string {
	var b [6]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// planCommand loads and compiles a plan with placeholder backends and
// hands it to print.
func planCommand(name string, args []string, stdout, stderr io.Writer, print func(*plan.Compiled) error) error {
	fs := flag.NewFlagSet("sortie "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	what := "Checks the plan and prints, per scenario and stage, the executions it\nwould run: rates, durations, targets, thresholds and backends."
	if name == "compile" {
		what = "Prints the engine requests the plan compiles to, per execution and\nbackend, as JSON (execution_id and start_time are set by the run)."
	}
	fs.Usage = func() { fmt.Fprintf(stderr, usagePlanOnly, name, what) }
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	if len(pos) != 1 {
		fs.Usage()
		return cli.Usage(fmt.Errorf("%s takes one PLAN, not %d arguments", name, len(pos)))
	}
	p, err := plan.Load(pos[0])
	if err != nil {
		return cli.Usage(err)
	}
	c, err := p.Compile(p.Placeholders())
	if err != nil {
		return cli.Usage(err)
	}
	if err := print(c); err != nil {
		return cli.Fail(err)
	}
	return nil
}
