package gate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// Execution is one execution as the gate reads it: the report's fields plus
// what the report's Go type cannot say.
type Execution struct {
	record.Execution
	// rate is the planned rate exactly as written (nil when absent): a JSON
	// number read as a float would turn 5.94 into a binary approximation,
	// and the floor is exact arithmetic.
	rate *big.Rat
	// hasResults says a "results" field was present, even an empty one.
	hasResults bool
	// Line is the stream line the execution was read from (0 in a report).
	Line int
}

// wireExecution decodes an execution tolerantly. Its fields shadow the
// embedded ones of the same JSON name: the rate is kept as written, results
// are decoded apart to see whether they were there at all, and failures are
// not read (the Nighthawk-era stack wrote objects there, this driver writes
// words; the gate judges the counters, never that list).
type wireExecution struct {
	record.Execution
	Rate     json.Number     `json:"rate"`
	Failures json.RawMessage `json:"failures"`
	Results  json.RawMessage `json:"results"`
}

// Source is one run's executions, read from a report or a results stream.
type Source struct {
	// Kind is "report" or "stream".
	Kind string
	// Path names the file in messages.
	Path string
	// Pass is the report's own verdict; nil for a stream (it has none).
	Pass *bool
	// Cancelled is the report's mark of a run interrupted before its end.
	Cancelled bool
	// Executions of the graded run, in file order.
	Executions []Execution
	// Skipped lists the stream lines that held no execution (1-based).
	Skipped []int
	// Runs are the runs a stream holds, in order; the last is graded.
	Runs []StreamRun
}

// StreamRun is one run found in a results stream.
type StreamRun struct {
	// FirstLine and LastLine bound the run's execution lines (1-based).
	FirstLine, LastLine int
	// Executions is how many execution lines it holds.
	Executions int
	// Repeated is the label whose second appearance started this run
	// (empty for the first run).
	Repeated string
}

// ReadReport decodes a report. Fields it does not know are ignored; a
// document that is not a JSON object with an "executions" array, an
// execution whose fields do not decode, and an execution in an older format
// (no started_at, or no results with nothing saying why) are errors: the
// gate never grades what it cannot read as zeros.
func ReadReport(data []byte) (*Source, error) {
	var top struct {
		Pass       *bool              `json:"pass"`
		Cancelled  bool               `json:"cancelled"`
		Executions *[]json.RawMessage `json:"executions"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("not a sortie JSON report: %w", err)
	}
	if top.Executions == nil {
		return nil, errors.New(`not a sortie JSON report: no "executions" array`)
	}
	src := &Source{Kind: "report", Pass: top.Pass, Cancelled: top.Cancelled}
	for i, raw := range *top.Executions {
		e, err := decodeExecution(raw)
		if err != nil {
			return nil, fmt.Errorf("executions[%d]: %w", i, err)
		}
		src.Executions = append(src.Executions, e)
	}
	if err := checkFormat(src.Executions); err != nil {
		return nil, err
	}
	return src, nil
}

// ReadStream reads a results stream. A line that is not a JSON object with
// a label and fields of the right types is skipped and its line number
// kept. A label that appears again starts a new run (the driver appends to
// the stream and never truncates it, so a second run lands in the same
// file); the last run is the one graded, and Runs says where each began.
// A stream with no execution line at all is an error.
func ReadStream(r io.Reader) (*Source, error) {
	src := &Source{Kind: "stream"}
	var all []Execution
	seen := map[string]bool{}
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, rerr := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if e, err := decodeExecution(t); err != nil {
				src.Skipped = append(src.Skipped, n)
			} else {
				e.Line = n
				if len(src.Runs) == 0 || seen[e.Label] {
					rep := ""
					if len(src.Runs) > 0 {
						rep = e.Label
					}
					src.Runs = append(src.Runs, StreamRun{FirstLine: n, Repeated: rep})
					seen = map[string]bool{}
					all = all[:0]
				}
				seen[e.Label] = true
				all = append(all, e)
				run := &src.Runs[len(src.Runs)-1]
				run.LastLine = n
				run.Executions++
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("read results stream: %w", rerr)
		}
	}
	if len(src.Runs) == 0 {
		return nil, fmt.Errorf("no execution line in the results stream (%d line(s) skipped): nothing to grade", len(src.Skipped))
	}
	src.Executions = all
	if err := checkFormat(src.Executions); err != nil {
		return nil, err
	}
	return src, nil
}

// decodeExecution decodes and checks one execution object.
func decodeExecution(raw []byte) (Execution, error) {
	var w wireExecution
	if err := json.Unmarshal(raw, &w); err != nil {
		return Execution{}, err
	}
	e := Execution{Execution: w.Execution}
	if e.Label == "" {
		return Execution{}, errors.New("no label")
	}
	if w.Rate != "" {
		r, err := parseDecimal(string(w.Rate))
		if err != nil {
			return Execution{}, fmt.Errorf("%s: rate: %w", e.Label, err)
		}
		if r.Sign() < 0 {
			return Execution{}, fmt.Errorf("%s: rate %s is negative", e.Label, w.Rate)
		}
		e.rate = r
		e.Rate, _ = r.Float64()
	}
	if res := bytes.TrimSpace(w.Results); len(res) > 0 && !bytes.Equal(res, []byte("null")) {
		if err := json.Unmarshal(res, &e.Results); err != nil {
			return Execution{}, fmt.Errorf("%s: results: %w", e.Label, err)
		}
		e.hasResults = true
	}
	if e.DurationMs < 0 || e.ElapsedMs < 0 || e.RampMs < 0 {
		return Execution{}, fmt.Errorf("%s: a negative duration, ramp or elapsed time", e.Label)
	}
	if e.RampMs > e.DurationMs {
		return Execution{}, fmt.Errorf("%s: ramp_ms %d is longer than duration_ms %d", e.Label, e.RampMs, e.DurationMs)
	}
	for _, ts := range []struct{ name, v string }{{"started_at", e.StartedAt}, {"ended_at", e.EndedAt}} {
		if _, err := parseTime(ts.v); err != nil {
			return Execution{}, fmt.Errorf("%s: %s: %w", e.Label, ts.name, err)
		}
	}
	for i, r := range e.Results {
		if r.ElapsedMs < 0 {
			return Execution{}, fmt.Errorf("%s: results[%d]: negative elapsed_ms", e.Label, i)
		}
		if _, err := parseTime(r.StartedAt); err != nil {
			return Execution{}, fmt.Errorf("%s: results[%d]: started_at: %w", e.Label, i, err)
		}
	}
	return e, nil
}

// checkFormat refuses executions in the formats older sortie releases
// wrote. An execution that ran must carry started_at (the releases without
// it did not count requests still in flight at the end, so a zero there
// means "not counted", not "none"), and per-backend results unless its
// backend errors or its error say why there are none. A refused execution
// has no counters to misread and fails anyway, so it needs neither.
func checkFormat(execs []Execution) error {
	var noStart, noResults []string
	for _, e := range execs {
		if e.NotRun {
			continue
		}
		if e.StartedAt == "" && !refused(e) {
			noStart = append(noStart, e.Label)
		}
		if !e.hasResults && len(e.BackendErrors) == 0 && e.Error == "" {
			noResults = append(noResults, e.Label)
		}
	}
	if len(noStart) == 0 && len(noResults) == 0 {
		return nil
	}
	var parts []string
	if len(noStart) > 0 {
		parts = append(parts, "without started_at: "+listSome(noStart))
	}
	if len(noResults) > 0 {
		parts = append(parts, "without per-backend results: "+listSome(noResults))
	}
	return fmt.Errorf("an older report format the gate does not grade (executions %s); its counters would read as zero without having been counted: grade it with the tooling of the release that wrote it", strings.Join(parts, "; "))
}

// listSome joins the first few names and says how many more there are.
func listSome(names []string) string {
	const max = 5
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// parseTime parses a report timestamp; the empty string is no time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// parseDecimal reads a non-exotic decimal number ("9", "5.94", "1e3")
// exactly. Exponents are bounded: a rate or percentage of 10^30 means
// nothing, and an unbounded one would make the arithmetic enormous.
func parseDecimal(s string) (*big.Rat, error) {
	if s == "" || len(s) > 64 {
		return nil, fmt.Errorf("%q is not a number", s)
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp, err := strconv.Atoi(s[i+1:])
		if err != nil || exp > 30 || exp < -30 {
			return nil, fmt.Errorf("%q is not a number in range", s)
		}
	}
	if strings.ContainsAny(s, "/xXpP_") {
		// big.Rat also reads fractions and other bases; a report or a share
		// table holds plain decimals.
		return nil, fmt.Errorf("%q is not a decimal number", s)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("%q is not a number", s)
	}
	return r, nil
}

// Share is one line of the renderer's share table.
type Share struct {
	// Name is the target's name (the execution label without its scenario).
	Name string
	// RPS is the target's planned rate per backend, as written.
	RPS string
	rps *big.Rat
	// URL is the target's URL (not judged).
	URL string
	// Line is the table line it was read from.
	Line int
}

// ReadShares reads a share table: one target per line, "name rps [url]"
// separated by tabs or spaces. Blank lines and lines starting with # are
// ignored; a malformed line, a negative rate or a name listed twice is an
// error naming its line.
func ReadShares(r io.Reader) ([]Share, error) {
	var out []Share
	seen := map[string]int{}
	err := eachLine(r, func(n int, f []string) error {
		if len(f) < 2 {
			return fmt.Errorf("line %d: want \"name rps url\", got %d field(s)", n, len(f))
		}
		rps, err := parseDecimal(f[1])
		if err != nil {
			return fmt.Errorf("line %d: rps: %w", n, err)
		}
		if rps.Sign() < 0 {
			return fmt.Errorf("line %d: rps %s is negative", n, f[1])
		}
		if prev, ok := seen[f[0]]; ok {
			return fmt.Errorf("line %d: target %s is already listed on line %d", n, f[0], prev)
		}
		seen[f[0]] = n
		s := Share{Name: f[0], RPS: f[1], rps: rps, Line: n}
		if len(f) > 2 {
			s.URL = f[2]
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// Engine is one line of the engine list: an engine's address and the node
// it runs on.
type Engine struct {
	Addr string
	Node string
}

// matches says the engine list's entry names the engine at addr: exactly
// when the entry has a port, by host when it has none.
func (en Engine) matches(addr string) bool {
	if en.Addr == addr {
		return true
	}
	return hostOf(en.Addr) == en.Addr && hostOf(addr) == en.Addr
}

// ReadEngines reads an engine list: "address node [pod]" per line,
// separated by tabs or spaces. An address with a port names that engine
// only; one without names every engine on that host. Blank lines and lines
// starting with # are ignored; an address listed twice is an error.
func ReadEngines(r io.Reader) ([]Engine, error) {
	var out []Engine
	seen := map[string]int{}
	err := eachLine(r, func(n int, f []string) error {
		if len(f) < 2 {
			return fmt.Errorf("line %d: want \"address node [pod]\", got %d field(s)", n, len(f))
		}
		h := f[0]
		if prev, ok := seen[h]; ok {
			return fmt.Errorf("line %d: engine %s is already listed on line %d", n, f[0], prev)
		}
		seen[h] = n
		out = append(out, Engine{Addr: f[0], Node: f[1]})
		return nil
	})
	return out, err
}

// eachLine calls fn with the fields of every line that is not blank or a
// comment.
func eachLine(r io.Reader, fn func(n int, fields []string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, strings.Fields(line)); err != nil {
			return err
		}
	}
	return sc.Err()
}

// hostOf strips the port from an address: "10.1.2.3:8443" -> "10.1.2.3",
// "[::1]:8443" -> "::1". An address without a port is returned as it is.
// (The net package would do this; the gate imports no network code.)
func hostOf(addr string) string {
	if strings.HasPrefix(addr, "[") {
		if i := strings.IndexByte(addr, ']'); i > 0 {
			return addr[1:i]
		}
		return addr
	}
	if strings.Count(addr, ":") == 1 {
		return addr[:strings.IndexByte(addr, ':')]
	}
	return addr
}

// LogSummary is what the driver's log says about executions it skipped.
type LogSummary struct {
	// Skipped are the labels of its SKIP lines, each once, in order.
	Skipped []string
	// SkipLines counts the SKIP lines (the driver prints each skipped
	// execution in its narration and again in its summary).
	SkipLines int
	// Summary is its last "N/M executions passed[, K not run]" line.
	Summary string
	// NotRun is K of that line (0 when the line says none).
	NotRun int
}

var (
	logSkip    = regexp.MustCompile(`^\s*SKIP\s+(\S+)`)
	logSummary = regexp.MustCompile(`^(?:PASS|FAIL)\s+\d+/\d+ executions passed(?:, (\d+) not run)?\s*$`)
)

// ReadLog reads the driver's log for its SKIP lines and summary line.
func ReadLog(r io.Reader) (*LogSummary, error) {
	ls := &LogSummary{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := logSkip.FindStringSubmatch(line); m != nil {
			ls.SkipLines++
			if !seen[m[1]] {
				seen[m[1]] = true
				ls.Skipped = append(ls.Skipped, m[1])
			}
			continue
		}
		if m := logSummary.FindStringSubmatch(line); m != nil {
			ls.Summary = strings.TrimSpace(line)
			ls.NotRun = 0
			if m[1] != "" {
				k, err := strconv.Atoi(m[1])
				if err != nil {
					return nil, fmt.Errorf("summary line %q: %w", line, err)
				}
				ls.NotRun = k
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ls, nil
}
