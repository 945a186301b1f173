package gate

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// File names --dir looks for in a run directory. They are the names the
// saver gives the files it copies out of the cluster.
const (
	DirReport  = "report.json"
	DirStream  = "results.jsonl"
	DirShares  = "shares.tsv"
	DirEngines = "engines.tsv"
	DirLog     = "sortie.log"
	DirChurn   = "churn.log"
	DirRolls   = record.RollsFileName
	DirFaults  = record.FaultsFileName
	DirLive    = "live.jsonl"
)

// Options is everything the gate is told on its command line.
type Options struct {
	// Report is the report JSON to grade; exclusive with Stream.
	Report string
	// Stream is the results stream (JSON lines) to grade; exclusive with
	// Report.
	Stream string
	// Shares is the renderer's share table ("name rps url" per line, rps per
	// backend). Empty: the targets and their rates come from the report.
	Shares string
	// Backends is how many engines were ready at launch; 0 means "count the
	// lines of Engines".
	Backends int
	// Engines maps engine addresses to node names ("ip node [pod]" per line).
	Engines string
	// FloorPct is the count floor in percent of the planned 2xx count, as a
	// decimal; the ceiling is 200 - FloorPct.
	FloorPct string
	// PerNode adds a NODE line per target and node.
	PerNode bool
	// Log is the driver's stderr, read as a second witness of executions
	// that were not run.
	Log string
	// Dir is a run directory holding the files above by their DirXxx names.
	Dir string
	// JSON prints the verdict as one JSON document instead of lines.
	JSON bool
	// MaxP99 judges every node's 2xx p99 latency against it; 0 prints
	// latency without judging it.
	MaxP99 time.Duration

	// Rolls are files of ROLLED, FAILED and FAULT lines (churn.log,
	// rolls.log, faults.log), read alike.
	Rolls []string
	// Live is the live record; empty: --dir's, else the report's
	// live_record.
	Live string
	// Settle is the settle window after a roll's or fault's end.
	Settle time.Duration
	// HTML is a file to write the HTML report to; empty writes none.
	HTML string

	// notes says what --dir chose, for the output.
	notes []string
}

// DefaultOptions returns the options before any flag is read.
func DefaultOptions() Options {
	return Options{FloorPct: "99", Settle: DefaultSettle}
}

// newFlagSet binds the gate's flags to o.
func newFlagSet(o *Options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sortie-gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Report, "report", o.Report, "grade the report `FILE` (JSON); exclusive with --stream")
	fs.StringVar(&o.Stream, "stream", o.Stream, "grade the results stream `FILE` (one JSON execution per line); needs --shares")
	fs.StringVar(&o.Shares, "shares", o.Shares, "the plan's share table `FILE`: \"name rps url\" per line, rps per backend;\nwithout it the targets and rates are the report's own")
	fs.IntVar(&o.Backends, "backends", o.Backends, "`N` engines were ready at launch; every execution must have been dispatched to N\n(default: the number of engines in --engines)")
	fs.StringVar(&o.Engines, "engines", o.Engines, "engine list `FILE`: \"address node [pod]\" per line, so lines name nodes")
	fs.StringVar(&o.FloorPct, "floor-pct", o.FloorPct, "each node's http_2xx must lie within `PCT` and 200-PCT percent of its planned count")
	fs.BoolVar(&o.PerNode, "per-node", o.PerNode, "add a NODE line per target and node")
	fs.StringVar(&o.Log, "log", o.Log, "the driver's log `FILE` (its stderr): a second witness of SKIPped executions")
	fs.StringVar(&o.Dir, "dir", o.Dir, "run directory `RUNDIR`: reads "+DirReport+" (else "+DirStream+"), "+DirShares+", "+DirEngines+" and "+DirLog+"\nwhen present; a flag given explicitly wins")
	fs.BoolVar(&o.JSON, "json", o.JSON, "print the verdict as JSON on stdout instead of lines")
	fs.DurationVar(&o.MaxP99, "max-p99", o.MaxP99, "judge latency: FAIL a node whose 2xx p99 is above `DUR` (e.g. 200ms); without it latency is printed only")
	fs.Var((*fileList)(&o.Rolls), "rolls", "a `FILE` of ROLLED, FAILED and FAULT lines (the churn driver's churn.log, soak local's\nrolls.log or faults.log) to set the failures against; repeatable")
	fs.StringVar(&o.Live, "live", o.Live, "the live record `FILE` whose failure samples are set against the rolls and faults\n(default: --dir's "+DirLive+", else the report's live_record)")
	fs.DurationVar(&o.Settle, "settle", o.Settle, "a roll's or fault's bracket runs from its begin to its end plus `DUR`: the endpoints'\npropagation lag and a drain")
	fs.StringVar(&o.HTML, "html", o.HTML, "also write the HTML report to `FILE`: one self-contained page (charts per target and\nnode, rolls and faults marked) that opens with no network; the output and exit code\nare the same with it or without")
	fs.Usage = func() { usage(fs) }
	return fs
}

// parseFlags reads args into options. It does not look at the file system.
func parseFlags(args []string, stderr io.Writer) (Options, error) {
	o := DefaultOptions()
	fs := newFlagSet(&o, stderr)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: every input is given by a flag", fs.Arg(0))
	}
	return o, nil
}

// withDir fills every input that was not given explicitly from the run
// directory, by file name, when the file exists there.
func (o Options) withDir() Options {
	if o.Dir == "" {
		return o
	}
	has := func(name string) (string, bool) {
		p := filepath.Join(o.Dir, name)
		st, err := os.Stat(p)
		return p, err == nil && st.Mode().IsRegular()
	}
	if o.Report == "" && o.Stream == "" {
		if p, ok := has(DirReport); ok {
			o.Report = p
		} else if p, ok := has(DirStream); ok {
			o.Stream = p
			o.notes = append(o.notes, fmt.Sprintf("%s has no %s: grading the results stream %s (the run did not write its report)", o.Dir, DirReport, p))
		}
	}
	if len(o.Rolls) == 0 {
		for _, name := range []string{DirChurn, DirRolls, DirFaults} {
			if p, ok := has(name); ok {
				o.Rolls = append(o.Rolls, p)
			}
		}
	}
	for _, f := range []struct {
		dst  *string
		name string
	}{{&o.Shares, DirShares}, {&o.Engines, DirEngines}, {&o.Log, DirLog}, {&o.Live, DirLive}} {
		if *f.dst == "" {
			if p, ok := has(f.name); ok {
				*f.dst = p
			}
		}
	}
	return o
}

// floor returns FloorPct as an exact rational, or nil when it is not a
// decimal number.
func (o Options) floor() *big.Rat {
	r, err := record.ParseDecimal(o.FloorPct)
	if err != nil {
		return nil
	}
	return r
}

// Validate returns every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	switch {
	case o.Report != "" && o.Stream != "":
		errs = append(errs, errors.New("--report and --stream are exclusive: give one source"))
	case o.Report == "" && o.Stream == "":
		if o.Dir != "" {
			errs = append(errs, fmt.Errorf("--dir %s holds neither %s nor %s", o.Dir, DirReport, DirStream))
		} else {
			errs = append(errs, errors.New("need --report FILE, --stream FILE or --dir RUNDIR"))
		}
	}
	if o.Stream != "" && o.Shares == "" {
		errs = append(errs, errors.New("--stream needs --shares: a stream holds only the executions that finished, and only the share table names the ones that are missing"))
	}
	if f := o.floor(); f == nil {
		errs = append(errs, fmt.Errorf("--floor-pct %q is not a number", o.FloorPct))
	} else if f.Sign() <= 0 || f.Cmp(big.NewRat(100, 1)) > 0 {
		errs = append(errs, fmt.Errorf("--floor-pct %s must be above 0 and at most 100", o.FloorPct))
	}
	if o.Backends < 0 {
		errs = append(errs, fmt.Errorf("--backends %d must be positive", o.Backends))
	}
	if o.Backends == 0 && o.Engines == "" {
		errs = append(errs, errors.New("need --backends N (or --engines FILE, whose engines are counted)"))
	}
	if o.Settle < 0 {
		errs = append(errs, fmt.Errorf("--settle %s must not be negative", o.Settle))
	}
	if o.MaxP99 < 0 {
		errs = append(errs, fmt.Errorf("--max-p99 %s must not be negative", o.MaxP99))
	}
	return errors.Join(errs...)
}

// fileList is a repeatable flag of file names.
type fileList []string

func (l *fileList) String() string { return strings.Join(*l, ",") }

func (l *fileList) Set(v string) error {
	if v == "" {
		return errors.New("want a file name")
	}
	*l = append(*l, v)
	return nil
}
