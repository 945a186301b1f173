// Package record is the record contract of a sortie run, in one place: the
// JSON report and the results stream (schema, writer, reader), the counter
// names, the conservation law every result of this project's engine keeps
// (planned = unsent + the sum of the outcome classes), the typed kinds of
// backend errors, the run directory's run.env, the share arithmetic that
// splits a rate over weighted targets, and the one atomic file writer every
// component uses for a file a user keeps; the live record, the lines the
// driver appends while a run goes (a head line, then the engines'
// timeline buckets and failure samples, in a compact form that declares
// each series and counter name once: live.go, timeline.go,
// livecompact.go); the chunk trailer with which `sortie cat` prints a
// file in checked pieces for the saver (chunk.go); and the run manifest by
// which a driver started again resumes a run (manifest.go). The driver
// writes the record with it; the gate, the saver and the kickoff read it
// with it.
//
// It imports no network code (the gate, which must run anywhere on a copied
// report, builds on it; a test of the gate holds that).
//
// The schema is a compatibility contract: reports written by the sortie +
// Nighthawk stack and by this driver share it, so dashboards, the gate and
// grep recipes read either. Fields are only ever added, never renamed.
//
// # Report
//
// A report is one JSON object, indented by two spaces:
//
//	{"pass": bool, "executions": [Execution, ...], "made_by": MadeBy, "live_record": path, "driver_gaps": [DriverGap, ...]}
//
// live_record names the live record the run appended its timeline to (see
// live.go), as the driver was given it; absent when none. driver_gaps
// name the times no driver followed a resumed run (manifest.go); absent
// for a run one driver saw whole. pass is true when every execution passed. executions lists every
// execution of the plan in plan order (scenarios in file order, then stages,
// then targets), including those that were never run. made_by says what
// made the run (absent in earlier reports, which readers accept; readers
// that do not know it ignore it). A report is written
// atomically (temporary file, sync, rename): a reader never sees half of one.
// An interrupted run (SIGINT, SIGTERM) still writes its report, with
// "cancelled": true and pass false.
//
// # Execution
//
// One target of one scenario (or of one staircase stage), run on every
// backend (engine) of a pool:
//
//	label         "<scenario>/<target>", plus "/stage-N" for a staircase stage
//	scenario      the plan's scenario name
//	pool          the plan's pool name
//	rate          planned requests per second: per backend when per_backend,
//	              else for the whole pool; after the ramp for ramping-rate
//	per_backend   rate is what each backend sends
//	duration_ms   planned duration
//	ramp_ms       planned ramp from 0 to rate (ramping-rate only)
//	elapsed_ms    from started_at to the last backend's answer
//	started_at    when the driver dispatched it, RFC 3339 UTC with ms
//	ended_at      when the last backend answered or was given up on
//	pass          every threshold held and no backend failed
//	not_run       never started (a stage after a refused one, or a run
//	              cancelled before it); carries no counters
//	refused       "execution_cap": an engine refused the start at its cap of
//	              concurrent executions, so the whole stage was stopped
//	error         why it failed or was not run, in words
//	dns           the dns name the pool was resolved from (dns pools only)
//	backends      the engine addresses it was dispatched to
//	thresholds[]  {expr, scope, pass, actual}: scope is "pool" for counter:
//	              and rate: thresholds judged on totals, or a backend
//	              address for statistic thresholds judged per backend;
//	              actual is the value judged, or why none could be
//	failures[]    one {backend, counters} object per backend with a
//	              non-zero counter of the zero-failure set, holding those
//	              counters (the compatibility shape); earlier reports of
//	              this project held sentences here, which readers accept
//	failure_reasons[]  every reason the execution failed, in words
//	totals        counters summed over the backends that answered
//	results[]     one BackendResult per backend that answered
//	backend_errors[]  {backend, kind, error, refused}: every backend that
//	              failed the execution; a backend may have both a result
//	              and an error. kind is one of lost, silent, rejected,
//	              refused, late, stalled, cancelled, accounting (absent in
//	              earlier reports; KindOf reads their words). The error
//	              begins with what happened, for older readers:
//	              "lost: " its stream broke (engine killed, unreachable);
//	              "silent: " no answer in the window after its deadline nor
//	              after the cancel that followed (frozen or partitioned);
//	              "rejected: " the engine refused the request as invalid;
//	              "refused the start" at its execution cap (with refused
//	              "execution_cap"); or, for a result that was kept, "it
//	              missed its deadline", "it stalled" (its own elapsed time
//	              past duration + timeout + drain) or "the engine cancelled"
//
// A backend error always fails its execution. Empty values are omitted,
// except pass, elapsed_ms, backends and each result's counters.
//
// # BackendResult
//
//	backend       engine address (ip:port)
//	backend_name  the engine's --backend-name (a node name), if it has one
//	elapsed_ms    from started_at to the engine's last outcome
//	started_at    when the engine's first request was due
//	planned       requests the plan asked of this backend
//	unsent        planned requests a cancel left unsent (they have no
//	              outcome: planned = unsent + the outcome counters)
//	cancelled     the execution was cancelled before its planned end
//	counters      benchmark.* counters; an absent counter was zero
//	statistics    histogram summaries by id:
//	              {count, unit, mean, pstdev, min, max, p50, p90, p99, p99.9}
//	partial       the backend was lost or silent and this is what its
//	              timeline had counted (its backend_errors entry stays):
//	              counters and unsent sum its contiguous buckets 0 to k-1,
//	              planned is what was due before counted_until, so planned
//	              = unsent + the outcome counters over that part; no
//	              statistics
//	counted_until the end of that prefix of buckets, RFC 3339 UTC with ms
//	gap_unsent[]  {from, to, count, why, backend}: a time the node had no engine
//	              (its engine was lost and an engine of the same node
//	              came back and took up the rest of the schedule: why
//	              "engine restarted", backend its address); count is the requests due from
//	              from to to, which no engine that lived to count them
//	              sent. The result holds what came before the gap (as
//	              its lost engine's timeline counted it) and after it
//	              (the engine that came back, whose statistics it
//	              carries), so planned = unsent + the outcome counters +
//	              the gaps' counts, for the node's whole share
//
// Counters are named benchmark.* (benchmark.http_2xx, benchmark.pool_overflow,
// benchmark.stream_resets_before_headers, ...). Statistics are keyed by
// histogram id (benchmark_http_client.latency_2xx, ...); durations are in
// nanoseconds ("unit": "ns"), sizes are raw ("unit": "raw"). Readers must
// tolerate statistics they do not know (older reports carry
// sequencer.callback and response_body_size, for example).
//
// # MadeBy
//
// What made the run, so that two soaks months apart are compared knowing
// what ran them:
//
//	driver    Program: the driver's build and host
//	plan      {path, sha256, text}: the plan file as the driver read it,
//	          its path as given, the hex SHA-256 of its bytes, and the bytes
//	          as a string (files it names, such as body_file, are not in it)
//	engines[] one entry per engine (backend address) of the plan's pools,
//	          from its Info call: {backend, node, Program fields, unknown,
//	          error}; node is the engine's --backend-name. An engine that
//	          did not answer Info has unknown true and error saying why,
//	          and nothing else; that never fails the run
//
// A Program is:
//
//	version       the module version of the build, "(devel)" for one from
//	              a checkout without a version stamp (an engine reports the
//	              version it was built to report)
//	vcs_revision  the source revision it was built from (vcs.revision)
//	vcs_modified  that checkout had uncommitted changes (vcs.modified)
//	go_version    the Go toolchain it was built with
//	host          the host name (the driver's only: a pod name on Kubernetes)
//	kernel        the kernel release, as uname -r prints it (Linux)
//	cpus          the CPUs the process may run on (runtime.NumCPU)
//	gomaxprocs    the Go scheduler's share of them, lower under a
//	              container's CPU limit
//
// An empty field was not known. The block is the same Go type, MadeBy, at
// the head of the live record. The results stream never carries it: an
// older reader would count any line there as an execution.
//
// # Results stream
//
// The results stream holds one compact Execution object per line, in the
// order the executions finished (a skipped execution too), each the same
// object as in the report. It is opened with O_APPEND and synced line by
// line, never truncated. A writer that died mid-line leaves a torn last
// line; the next writer closes it with a newline first (as does the next
// Append after one that failed part-way), so a reader (ReadStream) sees
// whole lines and counts the torn one as bad.
//
// # Reading
//
// ReadReport and ReadStream (and their *File forms) are the one reader of
// both, used by the gate, the saver and the driver alike, so a report the
// saver keeps is exactly a report the gate grades. The reader is strict
// where a looser reading would grade nothing as zero: a document that is
// not a JSON object with an "executions" array, an execution whose fields
// do not decode or make no sense (no label, a negative rate or duration, a
// ramp longer than the run, a time that is not RFC 3339) and an execution
// in the format of older sortie releases (no started_at, or no results
// with nothing saying why) are errors. Fields it does not know are
// ignored, and failures[] is read in either shape. A stream line that does
// not read is skipped and its number kept (a torn line); a label that
// appears again starts a new run, and the last run is the one to grade.
// Each execution comes back as an Entry, with the rate as written in
// exact arithmetic (ExactRate). Reads are bounded: a report, and a whole
// stream, of at most MaxReportBytes (256 MiB); a stream line of at most
// MaxLineBytes (16 MiB), a longer one being skipped unread.
//
// This package imports no network code: the gate reads reports with it.
package record

// Report is the whole verdict of a run.
type Report struct {
	// Pass is true when every execution passed.
	Pass bool `json:"pass"`
	// Cancelled is true when the run was interrupted (SIGINT, SIGTERM)
	// before its end; such a run is not judged and never passes.
	Cancelled bool `json:"cancelled,omitempty"`
	// Executions in the order the plan lists them.
	Executions []Execution `json:"executions"`
	// MadeBy says what made the run: the driver, the plan, the engines.
	// Reports written before it existed have none.
	MadeBy *MadeBy `json:"made_by,omitempty"`
	// LiveRecord is the live record the driver appended the timeline to
	// (sortie run --live-record), as it was given; absent when none was
	// written.
	LiveRecord string `json:"live_record,omitempty"`
	// DriverGaps are the times no driver followed the run, which a
	// driver started again with --resume went on with (see DriverGap);
	// absent for a run one driver saw whole.
	DriverGaps []DriverGap `json:"driver_gaps,omitempty"`
}

// Execution is one target of one scenario (or one stage of it) run on every
// backend of a pool.
type Execution struct {
	// Label names the execution: "<scenario>/<target>", with "/stage-N"
	// appended for a staircase stage.
	Label string `json:"label"`
	// Scenario is the plan's scenario name.
	Scenario string `json:"scenario"`
	// Pool is the name of the plan's pool of engines.
	Pool string `json:"pool"`
	// Rate is the planned requests per second: per backend when PerBackend,
	// else for the whole pool. For a ramping-rate executor it is the rate
	// after the ramp.
	Rate float64 `json:"rate"`
	// PerBackend says Rate is what each backend sends.
	PerBackend bool `json:"per_backend"`
	// DurationMs is the planned duration.
	DurationMs int64 `json:"duration_ms"`
	// RampMs is the planned ramp from 0 to Rate at the start of DurationMs
	// (ramping-rate executors only).
	RampMs int64 `json:"ramp_ms,omitempty"`
	// ElapsedMs runs from StartedAt to the last backend's answer.
	ElapsedMs int64 `json:"elapsed_ms"`
	// StartedAt is when the driver dispatched the execution (RFC 3339, ms).
	StartedAt string `json:"started_at,omitempty"`
	// EndedAt is when the last backend answered or was given up on.
	EndedAt string `json:"ended_at,omitempty"`
	// Pass is true when every threshold held and no backend failed.
	Pass bool `json:"pass"`
	// NotRun is true for an execution that was never started (a later stage
	// after a refusal, or a run cancelled before it); it carries no counters.
	NotRun bool `json:"not_run,omitempty"`
	// Refused is "execution_cap" when an engine refused the start at its cap
	// of concurrent executions.
	Refused string `json:"refused,omitempty"`
	// Error says why the execution failed or was not run.
	Error string `json:"error,omitempty"`
	// DNS is the name the pool was resolved from, for a dns pool.
	DNS string `json:"dns,omitempty"`
	// Backends are the engine addresses the execution was dispatched to.
	Backends []string `json:"backends"`
	// Thresholds are the judged thresholds, in plan order.
	Thresholds []Threshold `json:"thresholds,omitempty"`
	// Failures lists, one entry per backend, the non-zero counters of the
	// failure classes (the compatibility shape of the sortie + Nighthawk
	// stack). Reports this project wrote before it held sentences here;
	// reading one, each sentence lands in a Failure's Reason.
	Failures []Failure `json:"failures,omitempty"`
	// FailureReasons lists, in words, every reason the execution failed.
	FailureReasons []string `json:"failure_reasons,omitempty"`
	// Totals are the counters summed over the backends that answered.
	Totals map[string]uint64 `json:"totals,omitempty"`
	// Results holds one entry per backend that answered.
	Results []BackendResult `json:"results,omitempty"`
	// BackendErrors names every backend that failed: lost, silent, refused
	// or stalled. A backend may have both a result and an error.
	BackendErrors []BackendError `json:"backend_errors,omitempty"`
}

// Threshold is one judged threshold expression.
type Threshold struct {
	// Expr is the expression as written in the plan.
	Expr string `json:"expr"`
	// Scope is "pool" for counters and rates judged on totals, or the
	// backend address for statistics judged per backend.
	Scope string `json:"scope"`
	// Pass is true when the expression held.
	Pass bool `json:"pass"`
	// Actual is the value the expression was judged on, or why it could not
	// be judged.
	Actual string `json:"actual"`
}

// BackendResult is what one engine returned for one execution.
type BackendResult struct {
	// Backend is the engine's address.
	Backend string `json:"backend"`
	// BackendName is the engine's --backend-name (a node name), if it has one.
	BackendName string `json:"backend_name,omitempty"`
	// ElapsedMs runs from StartedAt to the engine's last outcome.
	ElapsedMs int64 `json:"elapsed_ms"`
	// StartedAt is when the engine's first request was due (RFC 3339, ms).
	StartedAt string `json:"started_at,omitempty"`
	// Planned is how many requests the plan asked of this backend.
	Planned uint64 `json:"planned,omitempty"`
	// Unsent is how many planned requests were never due because the
	// execution was cancelled first; they have no outcome, so planned =
	// unsent + the sum of the outcome counters.
	Unsent uint64 `json:"unsent,omitempty"`
	// Cancelled is true when the execution was cancelled before its end.
	Cancelled bool `json:"cancelled,omitempty"`
	// Counters by name; a counter that is absent was zero.
	Counters map[string]uint64 `json:"counters"`
	// Statistics by histogram id.
	Statistics map[string]Statistic `json:"statistics,omitempty"`
	// Partial says the backend was lost or silent and this result is
	// what its timeline had counted: Counters and Unsent are the sums of
	// the contiguous buckets 0 to k-1 it sent, Planned the requests due
	// before CountedUntil, so planned = unsent + the outcome classes for
	// the part it covers. Its backend_errors entry stays; a partial
	// result never passes as the node's whole share.
	Partial bool `json:"partial,omitempty"`
	// CountedUntil is the end of that prefix of buckets (RFC 3339, ms):
	// every request due before it is counted, none due after.
	CountedUntil string `json:"counted_until,omitempty"`
	// GapUnsent are the times the node had no engine: its engine was lost
	// and an engine of the same node (its --backend-name) came back, to
	// which the driver gave the rest of the schedule. The requests due in
	// a gap were never sent by an engine that lived to count them: they
	// are counted here, never hidden, so planned = unsent + the outcome
	// counters + the gaps' counts. Absent for a node that never left.
	GapUnsent []Gap `json:"gap_unsent,omitempty"`
}

// Gap is one time a node had no engine, inside an execution.
type Gap struct {
	// From is the end of what the lost engine had counted (its
	// counted_until), To where the engine that came back took up the
	// schedule; RFC 3339 UTC with ms.
	From string `json:"from"`
	To   string `json:"to"`
	// Count is how many requests of the node's schedule were due in
	// [From, To): none of them has an outcome.
	Count uint64 `json:"count"`
	// Why says what made the gap: "engine restarted".
	Why string `json:"why,omitempty"`
	// Backend is the address of the engine that came back.
	Backend string `json:"backend,omitempty"`
}

// GapRestarted is a Gap's Why when the node's engine was lost and an
// engine of the same node came back.
const GapRestarted = "engine restarted"

// Statistic summarises one histogram. Durations are in nanoseconds.
type Statistic struct {
	Count  uint64  `json:"count"`
	Unit   string  `json:"unit"`
	Mean   float64 `json:"mean"`
	Pstdev float64 `json:"pstdev"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	P50    float64 `json:"p50,omitempty"`
	P90    float64 `json:"p90,omitempty"`
	P99    float64 `json:"p99,omitempty"`
	P999   float64 `json:"p99.9,omitempty"`
}

// BackendError names a backend that failed an execution.
type BackendError struct {
	// Backend is the engine's address.
	Backend string `json:"backend"`
	// Kind says what happened, for a program: one of the Kind constants.
	// Reports written before it existed have none; KindOf reads their
	// words.
	Kind Kind `json:"kind,omitempty"`
	// Error says what happened, in words; it begins with the kind's word
	// for older readers ("lost: ", "silent: ", ...).
	Error string `json:"error"`
	// Refused is "execution_cap" when the engine refused the start at its cap.
	Refused string `json:"refused,omitempty"`
}

// RefusedExecutionCap is the Refused value of a start refused at an engine's
// cap of concurrent executions.
const RefusedExecutionCap = "execution_cap"

// TimeFormat is the layout of StartedAt and EndedAt: RFC 3339 in UTC with
// milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"
