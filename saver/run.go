package saver

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

const usageHead = `Usage: sortie-save --dir RUNDIR [flags]
       sortie-save --times REPORT_OR_STREAM

Waits for a sortie run's Job to end, then saves its verdict into RUNDIR before
anything is torn down: the Job, the driver pod and its log, every engine's
log, the results stream, the live record and the report (copied off the
report PVC through short-lived, hardened reader pods that print the file,
or one checked chunk of it, to their log: see below), and SAVED
last, only when the report parsed (read as sortie-gate reads it: a report
the gate would refuse is not saved). Teardown refuses to run without SAVED.
Run it again at any time: a good copy saved earlier is never replaced by a
worse one.

Flags:
`

const usageTail = `
RUNDIR/run.env holds KEY=VALUE lines (at most 1 MiB; blank lines and #
comments ignored; an optional "export " prefix; white space around a key or
value dropped; a value may sit in one pair of matching quotes, taken
literally, no escapes, no inline comments; the last of a key wins; unknown
keys are ignored):
%s
Lines on stdout (logs go to stderr):
  SORTIE_OVERDUE job/<name> is still running <N>s past its planned end (<end>): ...
      at the first poll at least --overdue-after past LOAD_START +
      PLANNED_DURATION while the Job is active, then at most once every
      --overdue-every while it stays active.
  SORTIE_SAVED dir=<dir> job=<complete|failed|gone> executions=<n> pass=<true|false> not_run=<n> window=<first started_at>..<last ended_at> stream_executions=<n> stream_skipped=<n> passed=<n>
      the report parsed and SAVED is written; pass is the report's verdict
      (false when it has none), passed the executions that passed,
      stream_executions the stream's execution lines (every run it holds)
      and stream_skipped its lines that do not parse, both 0 for a stream
      sortie-gate would not grade; "?" stands for a time no execution has.
  SORTIE_SAVE_FAILED no report (<why>), but the results stream IS saved: <n> execution(s) ...; grade it with sortie-gate --stream <dir>/results.jsonl; ...
  SORTIE_SAVE_FAILED no report (<why>) and no results stream (<why>); ...
  SORTIE_SAVE_INCOMPLETE job/<name> is still running <N>s past its planned end: gave up waiting; ...
      --give-up past the planned end: logs and the stream so far are saved.

Files in RUNDIR: job.json, sortie-pod.json, sortie.log (sortie-<pod>.log for
earlier attempts), engine-<pod>.log (and engine-<pod>.previous.log after a
restart; a log that broke off is kept as <file>.partial), engines-end.tsv
(podIP, node, pod, restarts; tab-separated, sorted), results.jsonl (the
results stream), live.jsonl (the live record, when run.env names LIVE),
report.json, times.tsv (label, started_at, ended_at,
elapsed_ms, backend, backend started_at, pass|fail|not_run; tab-separated,
"-" for a missing value), SAVED (the time it was written).

Copies larger than a pod's log: the kubelet rotates a container's log at
10 MiB (containerLogMaxSize, counting a few dozen bytes it adds to every
line), so a file of some megabytes cannot be printed whole through one
reader pod. When READER_COMMAND is "sortie cat" (the driver image's,
which soak run sets), each file is copied in chunks of --chunk-size
instead: one reader pod per chunk runs
  sortie cat --offset N --length M FILE
which prints the chunk, then a line
  SORTIE_CHUNK offset=<N> length=<K> size=<S> sha256=<hex>
and the chunk is kept only when it has K bytes with that sha256, from the
offset asked. A chunk refused (cut by a rotation, a broken read, a wrong
sha256 or range) is asked again, up to 3 times, at half the size when
bytes were missing. Chunks are appended to RUNDIR/<file>.part, synced; a
copy that stops there resumes from it at the next save, and a stream or
live record saved before is where the next copy starts; either only once
"sortie cat --sum" (the sha256 of that range on the PVC, SORTIE_SUM) shows
it unchanged. A copy of more than one chunk is checked the same way whole
before it gets its name. Another READER_COMMAND prints each file whole,
and a file larger than the log rotation then cannot be copied.

SIGTERM or SIGINT while waiting for the Job stops at once (nothing is saved
yet); during a copy, the copy in progress finishes (bounded by
--copy-timeout), a chunked one after its chunk in progress (kept in its
.part for the next save), and nothing new is started; no file is ever
half-written (each is written under a temporary name and renamed).

Exit status: 0 saved (SORTIE_SAVED); 1 no report saved (SORTIE_SAVE_FAILED,
SORTIE_SAVE_INCOMPLETE); 2 usage, or a run directory without a usable
run.env; 143 (SIGTERM) or 130 (SIGINT) when a signal stopped it before the
report was saved.
`

// config is what the command line says, before run.env is read.
type config struct {
	opts       Options
	kubeconfig string
	context    string
	times      string
}

// parseFlags fills a config from the command line.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := config{opts: DefaultOptions()}
	fs := flag.NewFlagSet("sortie-save", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.opts.Dir, "dir", "", "the run directory: reads `RUNDIR`/run.env, writes the saved files there")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig `file` (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&c.context, "context", "", "kubeconfig `context` (default: run.env's CONTEXT, else the current context)")
	fs.DurationVar(&c.opts.Poll, "poll", c.opts.Poll, "how often the Job is looked at while it runs")
	fs.DurationVar(&c.opts.CopyTimeout, "copy-timeout", c.opts.CopyTimeout, "how long a reader pod may take to print its file (or one chunk of it)")
	fs.Int64Var(&c.opts.ChunkBytes, "chunk-size", c.opts.ChunkBytes, "copy each file in checked chunks of at most `BYTES` (65536 to 8388608), one reader pod per chunk, when READER_COMMAND is sortie cat; 0: each file whole through one reader pod")
	fs.DurationVar(&c.opts.GiveUp, "give-up", c.opts.GiveUp, "stop waiting this long past the planned end and save what exists (0: wait as long as the Job runs)")
	fs.DurationVar(&c.opts.OverdueAfter, "overdue-after", c.opts.OverdueAfter, "a Job still running this long past its planned end is overdue")
	fs.DurationVar(&c.opts.OverdueEvery, "overdue-every", c.opts.OverdueEvery, "repeat SORTIE_OVERDUE at most this often")
	fs.StringVar(&c.times, "times", "", "print times.tsv of a report or results stream `file` and exit; talks to no cluster")
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
		var keys strings.Builder
		for _, k := range RunEnvKeys {
			fmt.Fprintf(&keys, "  %-17s %s\n", k.Key, k.Doc)
		}
		fmt.Fprintf(stderr, usageTail, keys.String())
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if c.times == "" && c.opts.Dir == "" {
		return c, errors.New("--dir is required")
	}
	return c, nil
}

// Run is sortie-save's command line.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	if c.times != "" {
		return printTimes(c.times, stdout)
	}
	env, err := readRunEnv(c.opts.Dir)
	if err != nil {
		return cli.Usage(err)
	}
	if c.context != "" {
		env.Context = c.context
	}
	c.opts.Env = env
	if err := c.opts.Validate(); err != nil {
		return cli.Usage(err)
	}
	cs, logs, err := clients(c.kubeconfig, env.Context)
	if err != nil {
		return cli.Usage(err)
	}
	c.opts.Logs = logs
	c.opts.Out = stdout
	c.opts.Log = slog.New(slog.NewTextHandler(stderr, nil))
	res, err := Save(ctx, cs, clock.Real{}, c.opts)
	return exitFor(ctx, res, err)
}

// exitFor maps a save's outcome to Run's error and so the exit code.
func exitFor(ctx context.Context, res Result, err error) error {
	// A signal that stopped the saver before the report was saved sets the
	// shell's code for it (143 SIGTERM, 130 SIGINT); once the report is
	// saved, the signal changed nothing that matters.
	sig := cli.Signal(ctx)
	switch {
	case err != nil && sig != nil:
		return &cli.ExitError{Code: cli.SignalCode(sig), Err: err}
	case err != nil:
		return cli.Fail(err)
	case !res.Saved && res.Interrupted && sig != nil:
		return cli.Silent(cli.SignalCode(sig))
	case !res.Saved:
		// The closing line said why.
		return cli.Silent(cli.ExitFail)
	}
	return nil
}

// readRunEnv reads and parses dir/run.env.
func readRunEnv(dir string) (RunEnv, error) {
	f, err := os.Open(filepath.Join(dir, "run.env"))
	if err != nil {
		return RunEnv{}, fmt.Errorf("--dir must name a run directory holding run.env: %w", err)
	}
	defer f.Close()
	return ParseRunEnv(f)
}

// printTimes prints times.tsv of a report, else of a results stream.
func printTimes(path string, stdout io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return cli.Usage(fmt.Errorf("--times: %w", err))
	}
	execs, err := timesInput(b)
	if err != nil {
		return cli.Usage(fmt.Errorf("--times %s: %w", path, err))
	}
	_, err = stdout.Write(TimesTSV(execs))
	return err
}

// timesInput reads a whole report or, failing that, a results stream
// (every execution line of it, earlier runs too).
func timesInput(b []byte) ([]record.Execution, error) {
	src, rerr := record.ReadReport(bytes.NewReader(b))
	if rerr == nil {
		return src.Report().Executions, nil
	}
	src, err := record.ReadStream(bytes.NewReader(b))
	if err == nil {
		return record.Plain(src.All), nil
	}
	return nil, fmt.Errorf("neither a report (%v) nor a results stream (%v)", rerr, err)
}
