// Package gate grades a sortie run, from its report or its results stream,
// per target and per node: one PASS or FAIL line per target naming the node
// and class of every failure, and one VERDICT line.
//
// It is the instrument a soak is graded by, so it is strict where a looser
// reading would pass on nothing: a target missing from the report, an
// execution that was not run, a lost backend or an older report that lacks
// what the gate reads is named and fails (or is refused), never read as
// zero; overlapping counters are listed by class and never added up; and a
// run with nothing to grade is UNOBSERVED (exit 3), not a pass.
//
// Reports of this project are graded exactly. Its engine accounts for
// every request once, and its results say how many were planned: on such a
// result, planned = unsent + the sum of the outcome classes must hold
// exactly (a FAIL "accounting: 1349 outcomes for 1350 planned on node-b
// (1 missing)" otherwise), and a node without a failure must have
// http_2xx = planned (a FAIL "not clean: ..." names what else its
// requests became, unsent after a cancel say). The count floor's slack
// (99-101 % by default) exists for the older sortie + Nighthawk stack,
// whose engine could end a run one request short and whose results carry
// no planned: they are graded by the floor alone, as before. A backend
// error of kind accounting (the driver's own check) fails its node but is
// not a lost backend. Refusals at an engine's cap are read from the
// refused mark and the typed kind of record.KindOf; the words of older
// reports are read in one place, record/kind.go.
//
// The gate imports no network code (no gRPC, no client-go, not even net):
// it is the part a user runs anywhere, on a copied report.
//
// Given the run's rolls and faults and its live record, the gate also sets
// every failure against them (attrib.go): a ROLL or FAULT line per bracket
// with the failures that fell in it, their error window, recovery time and
// replicas, and an UNATTRIBUTED line per failure that fell in none, the
// findings. Those lines judge nothing: the verdict and the exit code are
// the same with them or without.
//
// The work is split in three: the readers turn files into an Input (the
// report or results stream through record.ReadReportFile and
// record.ReadStreamFile, the one reader the saver and the driver use too,
// so the saver never writes SAVED for a report the gate refuses; the share
// table, engine list and driver log through ReadShares, ReadEngines and
// ReadLog); Grade, a pure function, turns an Input into a Verdict;
// WriteText and WriteJSON print it. Run ties them to the command line.
package gate

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// Run is sortie-gate's main: it reads the flags, the inputs, grades and
// prints. The error carries the exit code: nil for PASS, 1 for FAIL, 2 for
// unusable input, 3 for UNOBSERVED.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	opts = opts.withDir()
	if err := opts.Validate(); err != nil {
		return cli.Usage(err)
	}
	if err := ctx.Err(); err != nil {
		return cli.Fail(err)
	}
	in, err := Load(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			// A signal ended a read: the input was not judged unusable.
			return cli.Fail(err)
		}
		return cli.Usage(err)
	}
	v := Grade(in)
	if opts.JSON {
		err = WriteJSON(stdout, v)
	} else {
		err = WriteText(stdout, v, opts.PerNode)
	}
	if err != nil {
		return cli.Fail(fmt.Errorf("write verdict: %w", err))
	}
	if opts.HTML != "" {
		if err := writeHTMLFile(opts.HTML, in, v); err != nil {
			// The verdict stands; a page that could not be written is
			// said, and fails a run that passed.
			return &cli.ExitError{Code: max(v.ExitCode, cli.ExitFail), Err: err}
		}
	}
	if v.ExitCode != 0 {
		return cli.Silent(v.ExitCode)
	}
	return nil
}

// writeHTMLFile writes the HTML report atomically: a reader never sees
// half a page.
func writeHTMLFile(path string, in Input, v Verdict) error {
	var text bytes.Buffer
	if err := WriteText(&text, v, true); err != nil {
		return fmt.Errorf("write html %s: %w", path, err)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, in, v, text.String()); err != nil {
		return fmt.Errorf("write html %s: %w", path, err)
	}
	if err := record.WriteFile(path, page.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write html %s: %w", path, err)
	}
	return nil
}

// Load reads every input the options name into an Input. Any error is
// unusable input.
func Load(ctx context.Context, o Options) (Input, error) {
	in := Input{Backends: o.Backends, FloorPct: o.floor(), MaxP99: o.MaxP99, Notes: o.notes}
	var err error
	if o.Report != "" {
		in.Source, err = record.ReadReportFileContext(ctx, o.Report)
	} else {
		in.Source, err = record.ReadStreamFileContext(ctx, o.Stream)
	}
	if err != nil {
		return in, err
	}
	if o.Shares != "" {
		if err := readFile(ctx, o.Shares, "share table", MaxTableBytes, func(r io.Reader) (err error) {
			in.Shares, err = ReadShares(r)
			if err == nil && in.Shares == nil {
				in.Shares = []Share{} // an empty table is no target, not "use the report"
			}
			return err
		}); err != nil {
			return in, err
		}
	}
	if o.Engines != "" {
		if err := readFile(ctx, o.Engines, "engine list", MaxTableBytes, func(r io.Reader) (err error) {
			in.Engines, err = ReadEngines(r)
			return err
		}); err != nil {
			return in, err
		}
		if in.Backends == 0 {
			if len(in.Engines) == 0 {
				return in, fmt.Errorf("engine list %s lists no engine, and --backends was not given", o.Engines)
			}
			in.Backends = len(in.Engines)
		}
	}
	if o.Log != "" {
		if err := readFile(ctx, o.Log, "driver log", 0, func(r io.Reader) (err error) {
			in.Log, err = ReadLog(r)
			return err
		}); err != nil {
			return in, err
		}
		in.LogName = o.Log
	}
	return in, loadAttribution(ctx, &in, o)
}

// loadAttribution reads the rolls and faults and the live record's
// failures. The live record is the one given, else the report's
// live_record: as the driver was given it, else beside the report.
func loadAttribution(ctx context.Context, in *Input, o Options) error {
	in.Settle = o.Settle
	if err := loadRolls(ctx, in, o.Rolls); err != nil {
		return err
	}
	live := o.Live
	if live == "" && in.Source.LiveRecord != "" {
		// A report copied away from its run may name a live record that
		// is not there: a note, not unusable input.
		live = findLive(in.Source.LiveRecord, o.Report)
		if live == "" {
			in.Notes = append(in.Notes, fmt.Sprintf("the report names the live record %s, which is not there (nor beside the report): no failure is set against the rolls", in.Source.LiveRecord))
			return nil
		}
	}
	if live == "" {
		return nil
	}
	return readFile(ctx, live, "live record", 0, func(r io.Reader) (err error) {
		in.Live, err = ReadLiveRecord(r, o.HTML != "")
		return err
	})
}

// loadRolls reads the files of ROLLED, FAILED and FAULT lines. A line it
// cannot read is a NOTE, and the others are still used: the rolls explain
// failures, they are not graded. A file that cannot be read at all is
// unusable input. Files that hold no roll and no fault leave in.Rolls nil.
func loadRolls(ctx context.Context, in *Input, paths []string) error {
	all := &record.RollLog{}
	for _, p := range paths {
		rl, err := record.ReadRollsFileContext(ctx, p)
		var le *record.RollLineError
		switch {
		case err == nil:
		case errors.As(err, &le):
			in.Notes = append(in.Notes, fmt.Sprintf("rolls: %s (skipped: no failure is set against what it says)", oneLine(err.Error())))
		default:
			return fmt.Errorf("read rolls: %w", err)
		}
		all.Rolls = append(all.Rolls, rl.Rolls...)
		all.Faults = append(all.Faults, rl.Faults...)
	}
	if len(all.Rolls)+len(all.Faults) > 0 {
		in.Rolls = all
	}
	return nil
}

// findLive finds the report's live_record: as named, else by its name
// beside the report; "" when it is in neither place.
func findLive(named, report string) string {
	for _, p := range []string{named, filepath.Join(filepath.Dir(report), filepath.Base(named))} {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// MaxTableBytes bounds a share table and an engine list, 16 MiB: some
// hundred thousand lines, far more targets or engines than a run has.
const MaxTableBytes = 16 << 20

// readFile reads the file at path with fn, through record.OpenInput: the
// read ends when ctx ends. With max above 0 the file is read whole first
// and refused when larger; with 0 fn streams it line by line, holding one
// bounded line at a time.
func readFile(ctx context.Context, path, what string, max int, fn func(io.Reader) error) error {
	var r io.Reader
	if max > 0 {
		data, err := record.ReadInput(ctx, path, what, max)
		var tooBig *record.TooLargeError
		if errors.As(err, &tooBig) {
			return err // it names the file and the limit
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		r = bytes.NewReader(data)
	} else {
		f, err := record.OpenInput(ctx, path)
		if err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		defer f.Close()
		r = f
	}
	if err := fn(r); err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	return nil
}

// usage is --help: every flag, then the output line formats.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `usage: sortie-gate (--report FILE | --stream FILE | --dir RUNDIR) [flags]

Grades a sortie run per target and per node against the zero-failure set
and a count floor, and prints one line per target and a VERDICT line.

Flags:
`)
	fs.PrintDefaults()
	fmt.Fprint(w, helpText)
}

const helpText = `
Files of --dir RUNDIR (each used when present, unless its flag is given):
  ` + DirReport + `    the report            (--report)
  ` + DirStream + `  the results stream    (--stream; used only when there is no ` + DirReport + `)
  ` + DirShares + `     the share table       (--shares)
  ` + DirEngines + `    the engine list       (--engines)
  ` + DirLog + `     the driver's log      (--log)
  ` + DirChurn + `      the churn driver's ROLLED/FAILED lines   (--rolls; the three files are read alike,
  ` + DirRolls + `      soak local's ROLLED/FAILED lines           and --rolls FILE replaces all three)
  ` + DirFaults + `     soak local's FAULT lines
  ` + DirLive + `     the live record       (--live; else the report's live_record, as named or beside it)

A target passes when ALL of these hold:
  - it is in the report once, and was run (not_run: NOT RUN) and not refused
    (refused: execution_cap: REFUSED AT THE EXECUTION CAP);
  - it was dispatched to exactly --backends engines, and none was lost (a
    lost backend fails the target; the survivors are still judged);
  - every node's counters of the zero-failure set are 0: http_4xx,
    http_5xx, stream_resets*, pool_connection_failure, pool_failure_*,
    pool_overflow, http_inflight_lost, request_timeout, late_dropped,
    connection_protocol_error; of a tcp:// or tcps:// target
    tcp_deferred, tcp_unavailable, tcp_echo_mismatch, tcp_inflight_lost,
    tcp_drain_incomplete, tcp_connect_failures, tcp_connection_closed; of
    a udp:// target udp_lost, udp_send_errors, udp_deferred,
    udp_unavailable, udp_unexpected; of a websocket target
    stream_deferred, stream_unavailable, stream_unexpected_message,
    stream_inflight_lost, stream_drain_incomplete, stream_open_failures,
    stream_upgrade_rejected, stream_early_close, stream_protocol_errors;
    of a grpc unary target grpc_error
    and every grpc_status.<code> but grpc_status.0 (1..16, missing)
    (listed by class and node, never added across classes);
  - every node's http_2xx lies within --floor-pct and 200 - --floor-pct
    percent of share x the configured duration (share x (D - T/2) with a
    ramp of T), in exact arithmetic;
  - on a node whose result carries planned (reports of this project's
    engine), every planned request is accounted for exactly once:
    planned = unsent + http_1xx + ... + http_5xx + stream_resets +
    pool_connection_failure + pool_failure_timeout + pool_overflow +
    http_inflight_lost + request_timeout + late_dropped (+ the counts of
    its gap_unsent), and a node without a failure has http_2xx = planned
    (less its gaps' counts). A TCP target's classes are tcp_messages_sent
    + tcp_deferred + tcp_unavailable, a UDP target's
    udp_datagrams_received + udp_lost + udp_send_errors + udp_deferred +
    udp_unavailable, a websocket target's stream_messages_sent +
    stream_deferred + stream_unavailable; their http_2xx (in these lines)
    is the messages that succeeded: echoed (or, for TCP without an echo,
    written).
    A gRPC target's (one with a grpc_status counter) are every
    grpc_status.<code> + pool_connection_failure + pool_failure_timeout +
    pool_overflow + http_inflight_lost + late_dropped: each call with a
    stream has one grpc-status, and a failed call answered 200 is in no
    HTTP class; its http_2xx is the calls with grpc-status 0. No slack: the floor's 1 % exists for the older sortie +
    Nighthawk stack, whose results carry no planned and are judged by the
    floor alone;
  - every node's own elapsed time is within 5 % of the planned duration,
    or within one request interval of the node's share (1/share seconds)
    when that is more: a short run is measured to about its last request;
  - no threshold of the plan failed, and with --max-p99 no node's 2xx p99
    is above it.

Output lines (fields separated by two spaces):
  PASS  <target>  rate=<achieved>/<planned>rps http_2xx=<counted>/<planned> backends=<survivors>/<N>  failures=none[  lat p50<=<ms> p99<=<ms> max<=<ms>]
  FAIL  <target>  rate=... http_2xx=... backends=...  -- <reason> | <reason> ...[  lat ...]
  FAIL  <target>  -- missing from the report (never driven) | NOT RUN: ...
  NODE  <target>  <node>  ok|FAIL|LOST|REFUSED  http_2xx=<n>/<planned> rate=<r>/<share>rps elapsed=<s>s started=<t> p50=.. p99=.. max=..  failures=none|-- <reasons>
        (with --per-node, after each target line)
  FAIL  <name>  -- <reason>            a failure of the whole run (a cancelled run, a driver log that
                                       shows skipped executions the report does not)
  LOST  <node> (<address>)  targets=<k>  error: <first error>
  GAP <node> +<s>s..+<s>s (<why>): <n> requests not sent; <a>/<o> answered 2xx outside it
        a time the node had no engine (a result's gap_unsent: its engine was
        lost, one of the same node came back and took up the rest of the
        schedule; why is "engine restarted"), one line per node and per
        gap (an engine that came back twice leaves two: the n-th gap of
        every target's result sums into the node's n-th line) summed over
        its targets: from the earliest start to the latest end, in seconds
        from the node's started_at (its request 0's due time, one decimal);
        <n> the requests due in the gap, never sent; <a> the 2xx of the
        requests due outside every gap, <o> how many were due outside
        them (numbers with a comma every three digits: 1,530). Each
        target's own GAP is among its reasons and its node's. A gap fails
        the node; the rest of the node is judged as usual against what was
        due outside the gaps (floor, exactness: planned = unsent + outcomes
        + the gaps' counts), the other nodes whole
  DRIVER  gap from=<t> to=<t>  -- <why>
        a time no driver followed the run (the report's driver_gaps: it was
        detached or killed, and a driver resumed it); named, not judged: the
        engines ran on and the counts are whole
  WINDOW  dispatched=<first started_at> ended=<last ended_at> engines_started=<first>..<last>
  ROLL  <ref>  at=<t> end=<t> settle=<s>s  failures=none|<n> [<node>=<n> ...] classes=<class>=<n>,...[ dropped=<n>]  window=<first>..<last> recovery=<s>s  replicas=<ip:port>,...[  -- the roll FAILED: <why>]
  FAULT  <kind>  <subject>  at=<t> end=<t> settle=<s>s  failures=...  (the same fields)[  planted: its failures stay UNATTRIBUTED]
  UNATTRIBUTED  <target>  failures=<n> [<node>=<n> ...] classes=<class>=<n>,...[ dropped=<n>]
  UNATTRIBUTED  <target>  <node>  at=<outcome> due=<due> class=<class>[ reason=<reason>][ status=<code>] remote=<ip:port>|-
  UNATTRIBUTED  <target>  <node>  at=<bucket start> dropped=<n> (counted in the bucket from at=, not sampled)
  UNATTRIBUTED  <target>  and <n> more
        (the failures set against the rolls and faults: only with rolls, faults
        or a live record; after the LOST lines, before WINDOW; see below)
  NOTE  <text>                         what the gate noticed and did not judge
  VERDICT PASS|FAIL|UNOBSERVED targets= passed= failed= not_run= backends= lost_backends= report_pass=true|false|absent
        (a stream adds: source=stream skipped_lines=<n> runs=<n>)

Reasons on a FAIL line include:
  GAP <node> +<s>s..+<s>s (engine restarted): <n> requests not sent; <a>/<o> answered 2xx outside it
      the target's requests on a node whose engine restarted (see GAP above)
  LOST BACKEND <node> (<address>) [counters reported|returned nothing]
  LOST BACKEND <node> (<address>) at +<s>s, <n> answered 2xx before
      a lost node whose partial result (the driver's count of its timeline)
      ends <s> seconds after its start, with <n> 2xx counted by then
  survivors <node>=ok|FAIL ...  |  no backend survived
  failures <class>=<n> [<node>=<n> ...] ...
  driver saturated: <n> request(s) not sent [<node>=<n> ...] (pool_overflow: ...)
  in flight at the end: <n> request(s) with no outcome [<node>=<n> ...] (http_inflight_lost: ...)
  engine behind: <n> request(s) not sent [<node>=<n> ...] (late_dropped: ...)
  http_2xx below|above <pct>% of the planned <n> on [<node>=<count> ...]
  accounting: <n> outcomes[ + <u> unsent] for <planned> planned on <node> (<d> missing|<d> counted twice)
  not clean: http_2xx <n> != <planned> planned on <node> (<class>=<n> ... unsent=<u>)
  the driver says the result of <node> breaks planned = unsent + outcomes: <its error>
  ran off plan (<s>s) on [<node>=<s>s ...]
  backends <d>/<N> dispatched (not dispatched: <node> ...)

Nodes are named by --engines (address -> node), else by the engine's own
backend_name in the report, else by the address.

Failures against the rolls and faults. With a live record (its failure
samples) and the rolls and faults (ROLLED/FAILED/FAULT lines, any of the
files above), each roll and fault gets a line of the failures that fell in
its bracket: from its at= to its end= plus --settle (default 10s: the
endpoints' propagation lag and a drain). The failures are the samples of
the zero-failure set's outcome classes (http_4xx, http_5xx, stream_resets,
the pool and timeout classes, tcp and udp) and of every failed gRPC status
(grpc_status.1..16 and grpc_status.missing, reason grpc_error): a gRPC call
answered 200 with a failed status is in no HTTP class and is placed by its
status sample like an HTTP failure; a failed call also in an HTTP, reset or
timeout class has that class's sample only (one sample a failed call). A failure falls in it when its
outcome time or its due time does, both edges included. A roll covers its
own target's failures only: the last part of its ref (a churn ref
<ns>/<kind>/<name> matches on <name>) is the target's name (the label
without its scenario and a /stage-N). A fault covers its subject's: a
target's, a node's, or every failure for "driver". window= is the first
and last failure's time (outcome, or due when it has none), recovery= runs
from the bracket's at= to its last failure, replicas= are the remotes
(ip:port) the failures reached. A failure past the engines' sample budget
is only counted in its bucket (dropped=): it is placed by its bucket's
interval, timed at its start. A failure in two brackets counts in both. A
target-fail fault is planted (soak local's stand-in for a failure nothing
explains): it counts its failures but does not excuse them. A raw TCP
connection is never reopened, so a tcp_unavailable of a target and node
that falls in no bracket counts in the brackets that held an earlier
tcp_unavailable of the same target and node: the roll or fault that closed
the connection. Every failure
in no other bracket is UNATTRIBUTED, per target with a count line, then one
line each (at most 20 per target, then "and <n> more"): those are the
findings. These lines change no verdict and no exit code: a failure fails
its target wherever it fell. Of a live record holding several runs (a head
line starts each), the last is read. A ROLLED/FAILED/FAULT line that
cannot be read is a NOTE and is skipped; the others are still used.

The HTML report (--html FILE) is one self-contained page, written
atomically after the lines: the verdict and the table per target and node,
then per target a chart per node of the live record's timeline (2xx per
second, the failures stacked by class, 2xx latency p50 and p99; long runs
drawn in columns of several buckets, exact numbers on hover), every roll and
fault as a band that zooms to it when clicked, unattributed failures as red
ticks and red rows of the failure samples' table. It fetches nothing (no
script, no font, no image) and opens with no network. The lines and the
exit code are the same with it or without; a page that cannot be written
is an error, and a run that passed then exits 1.

A results stream is appended to and never truncated. Lines that hold no
execution (a torn or unparseable line) are skipped and counted; the
execution they held is then missing and fails its target. A label that
appears again starts a new run in the same file: the LAST run is graded,
and a NOTE says where it starts. A stream needs --shares, because only the
share table names executions that never reached it.

Text from the report (an error, a reason, a name) is cut in the text
lines at 1024 bytes, saying how much more --json holds; --json keeps
it whole.

Input the gate refuses as unusable (exit 2), naming the file and what is
wrong: a report or stream over 256 MiB (a report that is not JSON is
refused at its first bad byte; /dev/zero is not read to its end), a share
table or engine list over 16 MiB; a rate written as a string, a key
written twice in one object, a latency statistic in ns outside 0 to 2^63,
counters of one execution whose sum over the backends does not fit in 64
bits. In a stream such an execution line is skipped and counted instead.
A signal ends a read that blocks (a FIFO).

Exit: 0 PASS, 1 FAIL, 2 unusable input (flags, a missing or unreadable
file, garbage, a report in an older format without started_at or results,
a report or stream over 256 MiB; a stream line over 16 MiB is skipped),
3 UNOBSERVED (nothing was planned or nothing to grade).
`
