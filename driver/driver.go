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
	"syscall"
	"time"

	"github.com/sortie-soak/sortie/driver/plan"
	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/runca"
	"github.com/sortie-soak/sortie/record"
)

const usageTop = `Usage: sortie <command> [flags] PLAN

Commands:
  run PLAN       run the plan against its pools of engines
  validate PLAN  check the plan and print what it would run
  compile PLAN   print the engine requests of every backend (JSON)
  cat FILE       print FILE, or with --offset N --length M one chunk of it
                 and its sha256 trailer, on stdout (the saver's reader pod
                 runs this in the driver image, which holds no shell tools)

Run "sortie <command> --help" for the command's flags.

Exit codes: 0 every execution passed; 1 a threshold failed, an execution
errored or was not run, or the run was interrupted (SIGINT, or SIGTERM
without -o); 2 unusable input: the plan, the flags, or a dns pool that
never resolved (always before any load); 143 a run with -o detached on
SIGTERM: its engines run on, and sortie run --resume goes on with it.

Input limits (what is larger or out of range is refused, naming the file
and the limit, before any load): a plan file is at most 8 MiB and at most
100000 values once its YAML aliases are expanded; a signal ends a read
that blocks (a FIFO). Plan numbers are decimal digits (10) or a decimal
with a zero fraction (10.0); octal 010, hex 0x10, 1_000, +10 and 1e3 are
refused with the plain number to write. An execution's duration + timeout
(a staircase's stages + timeout) is at most 876000h.

Plan fields of hostile targets and frozen engines (off unless set):
request_timeout bounds each response from its request's write
(benchmark.request_timeout, the connection closed); max_lateness drops a
request due longer ago than that when its worker gets to it, after a
freeze, instead of sending the backlog (benchmark.late_dropped). Both are
outcome classes of the zero-failure set.
`

const usageRun = `Usage: sortie run PLAN [-o report.json] [--json] [--results-stream FILE] [--progress DUR]
                  [--live-record FILE|-|off] [--status auto|tty|lines|off] [--status-interval DUR]
                  [--resume]
       sortie run --cancel RUNDIR

Runs the plan's scenarios in file order, never overlapping; a scenario's
stages in order; every execution of a stage on every backend of its pool
together, with one start time. A dns pool is resolved once, at the start
(A and AAAA, sorted, de-duplicated), retried every second for up to 30s
while its answer is empty.

Each backend has a deadline of duration + timeout + drain (5s) + the
deadline grace after the stage's start time. An answer that arrives within
the answer window after it is taken; then the execution is cancelled on
that backend and given the cancel wait to answer, after which the backend
is named silent. A backend whose stream breaks is named lost, unless its
engine had started under a node name (--backend-name) and an engine of
that node comes back before the execution's last request is due: every
second the driver looks again (a dns pool looked up again, a services
address dialled again), and an engine there of the same name that does
not hold the execution (a restarted one) is given the rest of the schedule
(start_offset) on the stage's start time. The node's result then names the
requests due in between, never sent, in gap_unsent ({from, to, count, why
"engine restarted", backend}): planned = unsent + the outcome classes +
the gaps' counts, and the execution fails. stderr says "lost <label> on
<backend> (<node>) at +<s>s: ...; waiting for an engine of <node> to come
back" and "rejoined <label> on <backend> (<node>): the engine at <addr>
takes up the schedule at +<s>s". An engine that came back may be lost
again and be waited for again, each time one more gap, up to 16 engines
that came back in one execution on one node; at the next loss the node is
lost ("its engine came back 16 times already"). A start
refused at an engine's execution cap cancels the whole stage and the
scenario's later stages are not run; a stage that starts more executions
than an engine's cap (as its Info says at the start of the run) is refused
whole before any of it starts. SIGINT cancels every running
execution, keeps what comes back, writes the report, and exits 1; so does
SIGTERM for a run without a report (-o). A cancelled engine waits at most
2s for the requests it has in flight (they are then http_inflight_lost),
however its target stalls, so the cancel wait (and the wait after SIGINT)
is 5s by default: that drain and 3s for the answer to come back.

Engines accept only the run's driver: every call goes over mutual TLS
with the run's client certificate (--client-cert, --client-key) and the
run's CA (--engine-ca), which soak local and soak run make per run. A run
without them is refused (exit 2) unless --insecure-plaintext is given, for
engines started with --insecure-plaintext (local debugging only); a plan
that carries a target's TLS key (tls.key_file) is refused in plaintext. A
target outside an engine's --allow-targets is refused by that engine
(backend error kind rejected).

A run survives its driver. With -o, before its first dispatch the driver
writes the run manifest next to the report (run.manifest.json: run id,
plan sha256, the backends as resolved, and per stage the shared start time
and every execution id), and again before each later stage. The engines
run an execution to its end whatever became of the driver, and keep its
result and timeline for their --retention (1h). On SIGTERM (what
Kubernetes sends on eviction or a drain) such a driver detaches: it stops
following the run, the engines run on, it writes no report, prints
"DETACHED run <id>: ..." and exits 143. Started again with the same -o
(--resume, or by itself when the manifest says the run is unfinished, not
cancelled, and of the same plan), a driver resumes instead of starting a
second run: it checks the plan is the one the run began with, uses the backends as they
were resolved, follows each dispatched execution again on its engine by
its id (Attach) from where the live record ends, so no bucket is written
twice (an execution whose node's engine came back: on the engine that came
back last, by its own id; the manifest names each rejoin before the rest of
the schedule is sent, with what the engine before counted and the gap), keeps the executions the results stream already holds as they
are, dispatches the stages not yet dispatched, and writes one report. The
deadlines of a followed stage move by the time no driver followed it (not
the engines' fault), so answers the engines kept past their deadline are
taken, not blamed. That time is named in the report's driver_gaps
({from, to, why}: "detached (SIGTERM)", or "the driver stopped without
detaching (killed)", from the last write to the run's files). An
execution the engine no longer holds is lost. sortie run --cancel RUNDIR
cancels every execution of the detached run whose manifest is in RUNDIR
(one line per execution on stdout: CANCELLED or NOT-RUNNING, backend, id),
and marks it cancelled so that no driver resumes it by itself.

Every result is checked against planned = unsent + the outcome classes; a
backend whose result breaks it ("accounting: 1349 outcomes for 1350 planned
on node-b") fails the execution.

-o and --results-stream must name two files (not one file by two names):
the report is renamed into place and would replace the stream. The report,
the results stream and the live record must each be a regular file or not
exist yet, in a directory where a file can be created. All are checked
before the plan is read, so a path that cannot be written is refused
before any pool is resolved or engine dialled.

A plan without thresholds is warned of on stderr: an execution that no
threshold judges passes unless an engine fails it, and fails when none of
its requests got a 2xx. A failed write to the results stream (a full disk)
is undone: the stream keeps ending in a whole line.

The live record (--live-record FILE; by default, with --results-stream S,
S with its extension replaced by .live.jsonl; - or off for none) is on
disk within seconds of what it says: the engines report every second
while it is written, and what they sent is appended with one write and
one sync at most four times a second. Its first line of a run is {"type":"head",
"made_by":{...},"run_id":...,"form":2}; then, in the compact form, a
{"type":"series",...} line the first time an execution on a backend
appears (its id, label, backend, backend_name, start to the ns,
width_ns), a {"type":"names",...} line the first time a counter name
appears (ids from "first"), one ["b",series,index,[name,count,...],
[p50,p99,max](,unsent,samples_dropped,latency count)] line per final
timeline bucket, and one ["s",series,due_ns,outcome_ns,class,reason,
phase,status,remote,conn_age_ms,conn_requests(,bucket,latency_ns)] line
per failure sample, in the order they come: some 50 bytes a clean
bucket. go doc ./record describes both forms; every reader of this
project reads both (records of the first form, one whole JSON object per
bucket, some 300 bytes each, still read as before). It is append-only
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
      pool_failure_timeout pool_overflow inflight_lost request_timeout
      late_dropped)
  status <label> sent=N answered=N 2xx=N failures=<class>=N,...|none backends=R/B elapsed=<d>/<planned>
      the live status of a running target, summed over its backends:
      sent counts the requests with an outcome (a request in flight is
      counted when it ends), answered those with an HTTP response (1xx to
      5xx; for gRPC every call answered, also one answered 200 with a
      failed grpc-status, which is in no HTTP class), failures the non-zero
      failure classes (4xx 5xx stream_resets pool_connection_failure
      pool_failure_timeout pool_overflow inflight_lost request_timeout
      late_dropped, the tcp and udp ones, grpc_status.<code> but 0 and
      grpc_status.missing), backends those of B that reported,
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
                     failures and timeouts, overflow, in-flight losses,
                     request timeouts, requests dropped late, connection
                     protocol errors, and their detail counters), holding those counters: the
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
directory, a plan other than the resumed run's), or a dns pool never
resolved (before any load); 143 the driver detached on SIGTERM (the run
goes on; resume it).
`

const usagePlanOnly = `Usage: sortie %s PLAN

%s

A dns pool is not resolved: its host:port stands in as the only backend.
What run would refuse after its load started is refused here too: a
target URL with user information, an execution whose duration + timeout
is over 876000h. A plan file is at most 8 MiB. A plan without thresholds
is warned of on stderr.

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
		return planCommand(ctx, "validate", args[1:], stdout, stderr, func(c *plan.Compiled) error {
			c.Describe(stdout)
			return nil
		})
	case "compile":
		return planCommand(ctx, "compile", args[1:], stdout, stderr, func(c *plan.Compiled) error {
			return c.WriteRequests(stdout)
		})
	case "cat":
		return catCommand(args[1:], stdout, stderr)
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
	resume         bool
	cancel         string
	// The engines' mTLS files, or plaintext.
	clientCert, clientKey, engineCA string
	insecurePlaintext               bool
}

func newRunFlagSet(o *Options, f *runFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sortie run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.output, "o", "", "write the JSON report to `FILE`, atomically (never the results stream)")
	fs.StringVar(&f.output, "output", "", "same as -o `FILE`")
	fs.BoolVar(&f.json, "json", false, "print the JSON report on stdout instead of the text summary")
	fs.StringVar(&f.stream, "results-stream", "", "append each finished execution to `FILE` as one JSON line, synced")
	fs.StringVar(&f.live, "live-record", "", "append every timeline bucket and failure sample the engines send to `FILE` as lines of the live record's compact form, synced as they come (default: the results stream's name with its extension replaced by .live.jsonl; - or off: none)")
	fs.DurationVar(&f.progress, "progress", 30*time.Second, "print a progress line per execution and backend every `DUR` (0: never)")
	fs.StringVar(&f.status, "status", "auto", "show a live status per target as `MODE`: tty (a block redrawn at the foot of the terminal), lines (status lines), off, or auto (tty when stderr is a terminal, else lines)")
	fs.DurationVar(&f.statusInterval, "status-interval", 10*time.Second, "with --status lines, print each running target's status line every `DUR`")
	fs.BoolVar(&f.resume, "resume", false, "go on with the run whose manifest is next to the report (-o): follow its dispatched executions again on their engines, then run the rest (automatic when that run is unfinished)")
	fs.StringVar(&f.cancel, "cancel", "", "cancel the executions of the detached run whose manifest is in `RUNDIR` (the report's directory), and exit; no PLAN")
	fs.DurationVar(&o.Grace, "deadline-grace", o.Grace, "slack on top of duration + timeout + drain before a backend's deadline")
	fs.DurationVar(&o.AnswerWindow, "answer-window", o.AnswerWindow, "how long after its deadline a backend's answer is still awaited before the execution is cancelled on it")
	fs.DurationVar(&o.CancelWait, "cancel-wait", o.CancelWait, "how long a cancelled execution may take to answer before its backend is named silent")
	fs.StringVar(&f.clientCert, "client-cert", "", "the driver's client certificate `FILE` (PEM) for the engines' mTLS (the run's driver.crt)")
	fs.StringVar(&f.clientKey, "client-key", "", "the driver's private key `FILE` (PEM) (the run's driver.key)")
	fs.StringVar(&f.engineCA, "engine-ca", "", "the run's CA `FILE` (PEM) that signed the engines' certificates (the run's ca.crt)")
	fs.BoolVar(&f.insecurePlaintext, "insecure-plaintext", false, "speak plaintext to engines started with --insecure-plaintext (local debugging only)")
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
	if err := f.engineTLS(&o); err != nil {
		return cli.Usage(err)
	}
	if f.cancel != "" {
		if len(pos) > 0 || f.resume {
			return cli.Usage(errors.New("--cancel RUNDIR takes no PLAN and no --resume"))
		}
		return cancelRun(ctx, o, f.cancel, stdout)
	}
	terminal, width := terminalOf(stderr)
	mode, err := f.check(o, pos, terminal)
	if err != nil {
		return cli.Usage(err)
	}
	// f.check found out a report, stream or live record that cannot be
	// written (checkOutputs), before a pool is resolved or an engine
	// dialled, not after hours of load.
	prior, note, err := f.priorRun()
	if err != nil {
		return cli.Usage(err)
	}
	var backends map[string][]string
	if prior != nil {
		backends = prior.Backends
	}
	planData, compiled, backends, err := loadPlan(ctx, o, f.plan, backends)
	if err != nil {
		return err
	}
	warnUnjudged(stderr, compiled)
	var stream *record.StreamWriter
	if f.stream != "" {
		if stream, err = record.OpenStream(f.stream); err != nil {
			return cli.Usage(err)
		}
		defer stream.Close()
	}

	lines := &lineWriter{w: stderr}
	r := &runner{opts: o, log: o.logger(lines), lines: lines, runID: newRunID()}
	if note != "" {
		r.log.Warn(note)
	}
	livePath := liveRecordPath(f.live, f.stream)
	if err := r.takeManifest(&f, prior, planData, backends, livePath); err != nil {
		return cli.Usage(err)
	}
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
		head := &record.HeadLine{MadeBy: madeBy, RunID: r.runID}
		if r.resume != nil && r.resume.sawHead {
			head = nil // the run goes on under its own head line
		}
		if r.live, err = openLive(livePath, head, r.log); err != nil {
			return cli.Usage(err)
		}
	}
	rep, runErr := r.run(ctx, scenarios, stream)
	// Every line the engines sent is on disk before the report names
	// the file.
	if err := r.live.close(); err != nil {
		r.log.Error("live record", "err", err)
	}
	if r.detached {
		return r.detach()
	}
	return r.report(&f, rep, runErr, madeBy, livePath, stdout)
}

// report writes the report and the summary of a run that ended, marks
// its manifest finished, and returns the run's exit.
func (r *runner) report(f *runFlags, rep *record.Report, runErr error, madeBy *record.MadeBy, livePath string, stdout io.Writer) error {
	rep.MadeBy = madeBy
	if livePath != "" {
		rep.LiveRecord = livePath
	}
	if r.manifest != nil {
		rep.DriverGaps = r.manifest.m.DriverGaps
	}
	errs := []error{runErr}
	if f.output != "" {
		err := record.WriteReport(f.output, rep)
		errs = append(errs, err)
		if err == nil && r.manifest != nil {
			r.manifest.m.Finished = true
			errs = append(errs, r.manifest.write())
		}
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

// detach ends a driver that left its run to the engines on SIGTERM: the
// manifest says when, and no report is written; the next driver resumes.
func (r *runner) detach() error {
	r.manifest.m.DetachedAt = r.opts.now().UTC().Format(record.TimeFormat)
	if err := r.manifest.write(); err != nil {
		return cli.Fail(fmt.Errorf("detach: %w", err))
	}
	r.lines.printf("DETACHED run %s: the engines run on; go on with sortie run --resume (or cancel with sortie run --cancel %s)",
		r.runID, filepath.Dir(r.manifest.path))
	// 143, the shell's code for SIGTERM: a Job's pod failure policy tells
	// a detach (start the driver again: it resumes) from a run's end.
	return &cli.ExitError{Code: cli.ExitTerminated, Err: errors.New("detached on SIGTERM: the run goes on in its engines until a driver resumes it")}
}

// priorRun reads the manifest next to the report, if there is one, and
// says whether this driver resumes its run: with --resume, or when the
// run is unfinished, not cancelled, and of this very plan (a report
// directory kept from an abandoned run of another plan starts a new run,
// said in note). nil means a new run.
func (f *runFlags) priorRun() (m *record.Manifest, note string, err error) {
	if f.output == "" {
		if f.resume {
			return nil, "", errors.New("--resume needs the report (-o) the run was started with: its manifest is next to it")
		}
		return nil, "", nil
	}
	path := record.ManifestPath(f.output)
	m, err = record.ReadManifestFile(path)
	switch {
	case errors.Is(err, record.ErrNoManifest):
		if f.resume {
			return nil, "", fmt.Errorf("--resume: %w", err)
		}
		return nil, "", nil
	case err != nil:
		return nil, "", err
	case f.resume:
		return m, "", nil
	case m.Finished || m.Cancelled:
		return nil, "", nil
	}
	// The plan is read again by loadPlan; here only its digest counts.
	if data, err := os.ReadFile(f.plan); err == nil && record.PlanOf(f.plan, data).SHA256 != m.PlanSHA256 {
		return nil, fmt.Sprintf("the unfinished run %s in %s is of another plan; a new run starts (sortie run --resume would refuse)", m.RunID, path), nil
	}
	return m, "", nil
}

// takeManifest starts the run's manifest, or takes over the prior run's:
// its id, its driver gap closed now, and what its files hold.
func (r *runner) takeManifest(f *runFlags, prior *record.Manifest, planData []byte, backends map[string][]string, livePath string) error {
	if f.output == "" {
		return nil
	}
	path := record.ManifestPath(f.output)
	digest := record.PlanOf(f.plan, planData).SHA256
	if prior == nil {
		r.manifest = &manifestState{path: path, m: &record.Manifest{RunID: r.runID, Plan: f.plan, PlanSHA256: digest,
			Report: f.output, ResultsStream: f.stream, LiveRecord: livePath, Backends: backends, Stages: []record.ManifestStage{}}}
		return r.manifest.write()
	}
	if prior.PlanSHA256 != digest {
		return fmt.Errorf("resume run %s: plan %s is not the plan the run began with (sha256 %s, now %s)", prior.RunID, f.plan, prior.PlanSHA256, digest)
	}
	rs, err := loadResumed(prior, f.stream, livePath)
	if err != nil {
		return fmt.Errorf("resume run %s: %w", prior.RunID, err)
	}
	now := r.opts.now()
	gap := gapOf(prior, path, []string{livePath, f.stream}, now)
	if from, err := record.ParseTime(gap.From); err == nil && now.After(from) {
		r.absent = now.Sub(from)
	}
	prior.DriverGaps = append(prior.DriverGaps, gap)
	prior.DetachedAt, prior.Finished = "", false
	r.runID, r.resume = prior.RunID, rs
	r.manifest = &manifestState{path: path, m: prior}
	r.log.Warn("resuming the run", "run_id", prior.RunID, "stages_dispatched", len(prior.Stages),
		"executions_done", len(rs.done), "gap_from", gap.From, "gap_to", gap.To, "why", gap.Why)
	return r.manifest.write()
}

// engineTLS fills o's engine credentials from the flags: the run's mTLS
// files, or --insecure-plaintext; a run without either is refused before
// anything is dialled (an engine serves mTLS unless told otherwise).
func (f *runFlags) engineTLS(o *Options) error {
	files := 0
	for _, p := range []string{f.clientCert, f.clientKey, f.engineCA} {
		if p != "" {
			files++
		}
	}
	switch {
	case f.insecurePlaintext && files > 0:
		return errors.New("--insecure-plaintext with --client-cert, --client-key or --engine-ca: give one or the other")
	case f.insecurePlaintext:
		o.InsecurePlaintext, o.EngineTLS = true, nil
		return nil
	case files > 0 && files < 3:
		return errors.New("--client-cert, --client-key and --engine-ca go together: give all three")
	case files == 3:
		c, err := runca.ClientConfig(f.clientCert, f.clientKey, f.engineCA)
		if err != nil {
			return fmt.Errorf("engine mTLS: %w", err)
		}
		o.EngineTLS = c
		return nil
	case o.EngineTLS == nil && !o.InsecurePlaintext:
		return errors.New("no --client-cert, --client-key and --engine-ca: engines accept only the run's client certificate (the files the kickoff writes per run); give them, or --insecure-plaintext for engines started with --insecure-plaintext")
	}
	return nil
}

// keysInPlaintext refuses, before any dial, a run in plaintext whose plan
// carries a target's TLS private key: that key travels to the engines
// only inside the run's mTLS.
func keysInPlaintext(o Options, c *plan.Compiled) error {
	if o.EngineTLS != nil {
		return nil
	}
	var errs []error
	for _, sc := range c.Scenarios {
		if sc.Spec != nil && sc.Spec.TLS != nil && len(sc.Spec.TLS.KeyPEM) > 0 {
			errs = append(errs, fmt.Errorf("scenario %q carries a TLS client key (tls.key_file): a target's key travels to the engines only over their mTLS, never with --insecure-plaintext", sc.Name))
		}
	}
	return errors.Join(errs...)
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
	if err := checkOutputs(f.output, f.stream, liveRecordPath(f.live, f.stream)); err != nil {
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
//
// backends, when not nil, are the pools as a resumed run resolved them:
// a run resolves its pools once.
func loadPlan(ctx context.Context, o Options, path string, backends map[string][]string) ([]byte, *plan.Compiled, map[string][]string, error) {
	data, err := plan.Read(ctx, path)
	if err != nil {
		return nil, nil, nil, readError(ctx, err)
	}
	p, err := plan.Parse(path, data)
	if err != nil {
		return nil, nil, nil, cli.Usage(err)
	}
	// A grpc bidi-stream block or protocol http3 is valid plan (validate
	// and compile take it) but not load this engine can send: refused before any dispatch
	// rather than run as plain HTTP, which would grade something else.
	if err := p.Undriven(); err != nil {
		return nil, nil, nil, cli.Usage(fmt.Errorf("refusing to run: %w", err))
	}
	// Every rule that does not need the pools' addresses is checked
	// before a dns pool is waited for.
	placeholder, err := p.Compile(p.Placeholders())
	if err == nil {
		err = keysInPlaintext(o, placeholder)
	}
	if err != nil {
		return nil, nil, nil, cli.Usage(err)
	}
	if backends == nil {
		backends, err = resolvePools(ctx, o, p)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, nil, cli.Fail(fmt.Errorf("interrupted before any load: %w", err))
		}
		return nil, nil, nil, cli.Usage(err)
	}
	compiled, err := p.Compile(backends)
	if err != nil {
		return nil, nil, nil, cli.Usage(err)
	}
	return data, compiled, backends, nil
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
			if ctx.Err() != nil && r.manifest != nil && cli.Signal(ctx) == syscall.SIGTERM {
				r.detached = true
			}
			if r.detached {
				return rep, streamErr
			}
			if r.resume.finished(st) {
				// The driver before this one finished it: as it wrote it.
				for _, ex := range st.execs {
					e := r.resume.done[ex.label]
					rep.Executions = append(rep.Executions, e)
					r.lines.finished(e)
				}
				continue
			}
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
			if rf := r.capRefusal(sc, st); rf != nil {
				for _, ex := range st.execs {
					finish(refusedEarly(sc, ex, rf))
				}
				skip = rf.notRunAfter(stageName(sc, st))
				continue
			}
			out := r.runStage(ctx, sc, st)
			if out.detached {
				return rep, streamErr
			}
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
				if e, ok := r.resume.doneExecution(ex.label); ok {
					// In the stream already: not twice.
					rep.Executions = append(rep.Executions, e)
					continue
				}
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

// newRunID makes the prefix of this run's execution ids, unique enough
// that two drivers sharing an engine never collide.
func newRunID() string {
	var b [6]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// warnUnjudged says on stderr which executions no threshold judges, if
// any: they pass unless an engine fails them or none of their requests
// gets a 2xx, which is easy to miss in a plan without thresholds.
func warnUnjudged(stderr io.Writer, c *plan.Compiled) {
	if u := c.Unjudged(); len(u) > 0 {
		fmt.Fprintf(stderr, "sortie: warning: no threshold judges %d execution(s) (%s): each passes unless an engine fails it or none of its requests gets a 2xx; add thresholds such as \"counter:benchmark.http_5xx == 0\"\n", len(u), record.ListSome(u))
	}
}

// readError maps an error reading the plan to its exit code: a read the
// context ended is a cancelled run (exit 1), anything else unusable input.
func readError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return cli.Fail(err)
	}
	return cli.Usage(err)
}

// planCommand loads and compiles a plan with placeholder backends and
// hands it to print.
func planCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer, print func(*plan.Compiled) error) error {
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
	p, err := plan.LoadContext(ctx, pos[0])
	if err != nil {
		return readError(ctx, err)
	}
	c, err := p.Compile(p.Placeholders())
	if err != nil {
		return cli.Usage(err)
	}
	warnUnjudged(stderr, c)
	if err := print(c); err != nil {
		return cli.Fail(err)
	}
	return nil
}
