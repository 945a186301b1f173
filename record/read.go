package record

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Size caps of the reader. What is larger is refused, never read
// unbounded into memory.
const (
	// MaxReportBytes bounds a report, and a whole results stream: 256 MiB,
	// some hundred times the report of a day-long soak of thirty targets
	// on twenty nodes.
	MaxReportBytes = 256 << 20
	// MaxLineBytes bounds one line of a results stream (one execution):
	// 16 MiB, an execution on some ten thousand backends. A longer line is
	// skipped like a torn one, without being held in memory.
	MaxLineBytes = 16 << 20
)

// limits are the caps a read applies; tests lower them.
type limits struct{ file, line int }

var capped = limits{file: MaxReportBytes, line: MaxLineBytes}

// Form says what a Source was read from.
type Form string

// The forms of a Source.
const (
	FormReport Form = "report"
	FormStream Form = "stream"
)

// Entry is one execution as the reader read it: the Execution, plus what
// its Go type cannot say.
type Entry struct {
	Execution
	// ExactRate is the planned rate exactly as written (nil when absent):
	// a JSON number read as a float turns 5.94 into a binary
	// approximation, and the gate's floor is exact arithmetic. Rate holds
	// the same value as a float.
	ExactRate *big.Rat `json:"-"`
	// HasResults says a "results" field was present, even an empty one.
	HasResults bool `json:"-"`
	// Line is the stream line it was read from (1-based; 0 in a report).
	Line int `json:"-"`
}

// Source is one run's executions, read from a report or a results stream.
type Source struct {
	// Form is FormReport or FormStream.
	Form Form
	// Path names the file in messages (set by the *File readers).
	Path string
	// Pass is the report's own verdict; nil for a stream (it has none) or
	// a report without the field.
	Pass *bool
	// Cancelled is the report's mark of a run interrupted before its end.
	Cancelled bool
	// LiveRecord is the report's live_record, as the driver was given it;
	// empty for a stream or a report without one.
	LiveRecord string
	// DriverGaps are the report's driver_gaps: when no driver followed
	// the run (it was resumed); empty for a stream.
	DriverGaps []DriverGap
	// Executions are those of the run to grade, in file order: every one
	// of a report, the last run of a stream.
	Executions []Entry
	// All are every execution read, in file order: the earlier runs of a
	// stream too. Executions is its tail.
	All []Entry
	// Skipped lists the stream lines that held no execution (1-based):
	// torn, unparseable, or longer than MaxLineBytes.
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

// Report is the source as a plain Report: its pass (false when absent),
// cancelled mark and graded executions.
func (s *Source) Report() *Report {
	return &Report{Pass: s.Pass != nil && *s.Pass, Cancelled: s.Cancelled, Executions: Plain(s.Executions), DriverGaps: s.DriverGaps}
}

// Plain returns the Executions of entries.
func Plain(entries []Entry) []Execution {
	out := make([]Execution, len(entries))
	for i, e := range entries {
		out[i] = e.Execution
	}
	return out
}

// wireExecution decodes an execution. Its fields shadow the embedded ones
// of the same JSON name: the rate is kept as written, and results are
// decoded apart to see whether they were there at all.
type wireExecution struct {
	Execution
	Rate    json.RawMessage `json:"rate"`
	Results json.RawMessage `json:"results"`
}

// ReadReportFile reads the report at path.
func ReadReportFile(path string) (*Source, error) {
	return ReadReportFileContext(context.Background(), path)
}

// ReadReportFileContext reads the report at path; the read ends when ctx
// ends (see OpenInput).
func ReadReportFileContext(ctx context.Context, path string) (*Source, error) {
	return readFile(ctx, path, "report", ReadReport)
}

// ReadStreamFile reads the results stream at path.
func ReadStreamFile(path string) (*Source, error) {
	return ReadStreamFileContext(context.Background(), path)
}

// ReadStreamFileContext reads the results stream at path; the read ends
// when ctx ends (see OpenInput).
func ReadStreamFileContext(ctx context.Context, path string) (*Source, error) {
	return readFile(ctx, path, "results stream", ReadStream)
}

// readFile reads the file at path with read; errors name what it is and
// where. A regular file over the cap is refused by its size, unread.
func readFile(ctx context.Context, path, what string, read func(io.Reader) (*Source, error)) (*Source, error) {
	f, err := OpenInput(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	defer f.Close()
	if st, err := f.(*ctxFile).f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > int64(capped.file) {
		return nil, &TooLargeError{What: what, Path: path, Max: int64(capped.file)}
	}
	src, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	src.Path = path
	return src, nil
}

// ReadReport reads a report of at most MaxReportBytes.
func ReadReport(r io.Reader) (*Source, error) { return capped.readReport(r) }

// reportTop is what a reader takes from a report's top level.
type reportTop struct {
	Pass       *bool              `json:"pass"`
	Cancelled  bool               `json:"cancelled"`
	Executions *[]json.RawMessage `json:"executions"`
	LiveRecord string             `json:"live_record"`
	DriverGaps []DriverGap        `json:"driver_gaps"`
}

// decodeReportTop decodes a report's top-level object into top as
// json.Unmarshal would (keys matched without regard to case, unknown keys
// skipped), but refuses a key written twice: encoding/json keeps the last
// of two, so a second "executions" would hide the first from the grader,
// a second "pass" overrule the first. Only the top level is walked here;
// each execution is checked whole by decodeEntry.
func decodeReportTop(data []byte, top *reportTop) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	switch {
	case err != nil:
		return err
	case tok == nil:
		// null: an object with nothing in it, as encoding/json reads it.
		if _, err := dec.Token(); err != io.EOF {
			return errors.New("data after the report's null")
		}
		return nil
	case tok != json.Delim('{'):
		return errors.New("the report is not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		folded := strings.ToLower(key)
		if seen[folded] {
			return fmt.Errorf("the key %q appears twice at the top level", key)
		}
		seen[folded] = true
		var dst any
		switch folded {
		case "pass":
			dst = &top.Pass
		case "cancelled":
			dst = &top.Cancelled
		case "executions":
			dst = &top.Executions
		case "live_record":
			dst = &top.LiveRecord
		case "driver_gaps":
			dst = &top.DriverGaps
		default:
			dst = new(json.RawMessage)
		}
		if err := dec.Decode(dst); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the report's object")
	}
	return nil
}

func (l limits) readReport(r io.Reader) (*Source, error) {
	var top reportTop
	// The first bytes are checked before the rest is read: input that is
	// not JSON (/dev/zero, a binary file) is refused at once instead of
	// being read to the cap, and only a prefix that is still valid JSON
	// is read on.
	head := make([]byte, 64<<10)
	n, err := io.ReadFull(r, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("read report: %w", err)
	}
	head = head[:n]
	if err := notJSON(head); err != nil {
		return nil, fmt.Errorf("not a sortie JSON report: %w", err)
	}
	data, tooBig, err := readCapped(io.MultiReader(bytes.NewReader(head), r), l.file)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	if tooBig {
		return nil, fmt.Errorf("not a sortie JSON report: larger than %s, the most a report may be", size(l.file))
	}
	if err := decodeReportTop(data, &top); err != nil {
		return nil, fmt.Errorf("not a sortie JSON report: %w", err)
	}
	if top.Executions == nil {
		return nil, errors.New(`not a sortie JSON report: no "executions" array`)
	}
	src := &Source{Form: FormReport, Pass: top.Pass, Cancelled: top.Cancelled, LiveRecord: top.LiveRecord, DriverGaps: top.DriverGaps}
	for i, raw := range *top.Executions {
		e, err := decodeEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("executions[%d]: %w", i, err)
		}
		src.Executions = append(src.Executions, e)
	}
	src.All = src.Executions
	if err := checkFormat(src.Executions); err != nil {
		return nil, err
	}
	return src, nil
}

// ReadStream reads a results stream of at most MaxReportBytes. A line that
// is not a JSON object with a label and fields of the right types (a torn
// line, garbage, a line over MaxLineBytes) is skipped and its number kept.
// A label that appears again starts a new run (the driver appends to the
// stream and never truncates it, so a second run lands in the same file);
// the last run is the one to grade, and Runs says where each began. A
// stream with no execution line at all is an error.
func ReadStream(r io.Reader) (*Source, error) { return capped.readStream(r) }

func (l limits) readStream(r io.Reader) (*Source, error) {
	src := &Source{Form: FormStream}
	lr := &io.LimitedReader{R: r, N: int64(l.file) + 1}
	br := bufio.NewReader(lr)
	seen := map[string]bool{}
	start := 0 // index in All of the last run's first execution
	for n := 1; ; n++ {
		line, long, rerr := readLine(br, l.line)
		if t := bytes.TrimSpace(line); long || len(t) > 0 {
			e, err := decodeEntry(t)
			if long || err != nil {
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
					start = len(src.All)
				}
				seen[e.Label] = true
				src.All = append(src.All, e)
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
	if lr.N <= 0 {
		return nil, fmt.Errorf("larger than %s, the most a results stream may be", size(l.file))
	}
	if len(src.Runs) == 0 {
		return nil, fmt.Errorf("no execution line in the results stream (%d line(s) skipped): nothing to grade", len(src.Skipped))
	}
	src.Executions = src.All[start:]
	if err := checkFormat(src.Executions); err != nil {
		return nil, err
	}
	return src, nil
}

// notJSON returns the syntax error of a prefix of a JSON document, nil
// when the prefix may still begin one (an end inside it is not an error).
func notJSON(prefix []byte) error {
	var v json.RawMessage
	err := json.NewDecoder(bytes.NewReader(prefix)).Decode(&v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return err
	}
	return nil
}

// readCapped reads all of r, but never more than max+1 bytes of it: a
// reader of outside input holds at most its cap in memory, whatever it is
// handed (/dev/zero, a FIFO). tooBig says r held more than max bytes; data
// is then not the whole input and must not be parsed.
func readCapped(r io.Reader, max int) (data []byte, tooBig bool, err error) {
	data, err = io.ReadAll(io.LimitReader(r, int64(max)+1))
	return data, len(data) > max, err
}

// readLine reads one line and its newline, of at most max bytes besides
// the newline. A longer line is read to its end without being kept: long
// is set and line is nil.
func readLine(br *bufio.Reader, max int) (line []byte, long bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(bytes.TrimSuffix(frag, []byte("\n"))) > max {
				long, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if err != bufio.ErrBufferFull {
			return line, long, err
		}
	}
}

// size words a cap in MiB.
func size(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return strconv.Itoa(n>>20) + " MiB"
	}
	return strconv.Itoa(n) + " bytes"
}

// decodeEntry decodes and checks one execution object.
func decodeEntry(raw []byte) (Entry, error) {
	var w wireExecution
	if err := json.Unmarshal(raw, &w); err != nil {
		return Entry{}, err
	}
	e := Entry{Execution: w.Execution}
	if e.Label == "" {
		return Entry{}, errors.New("no label")
	}
	// encoding/json keeps the last of two equal keys: a counter written
	// twice would be graded by whichever came last.
	if err := checkDuplicateKeys(raw); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", e.Label, err)
	}
	if rate := bytes.TrimSpace(w.Rate); len(rate) > 0 && !bytes.Equal(rate, []byte("null")) {
		if rate[0] == '"' {
			// A counter written as a string is refused by its type; the
			// rate is decoded apart, so it is refused here the same way.
			return Entry{}, fmt.Errorf("%s: rate: a JSON string %s, not a number", e.Label, rate)
		}
		r, err := ParseDecimal(string(rate))
		if err != nil {
			return Entry{}, fmt.Errorf("%s: rate: %w", e.Label, err)
		}
		if r.Sign() < 0 {
			return Entry{}, fmt.Errorf("%s: rate %s is negative", e.Label, rate)
		}
		e.ExactRate = r
		e.Rate, _ = r.Float64()
	}
	if res := bytes.TrimSpace(w.Results); len(res) > 0 && !bytes.Equal(res, []byte("null")) {
		if err := json.Unmarshal(res, &e.Results); err != nil {
			return Entry{}, fmt.Errorf("%s: results: %w", e.Label, err)
		}
		e.HasResults = true
	}
	if e.DurationMs < 0 || e.ElapsedMs < 0 || e.RampMs < 0 {
		return Entry{}, fmt.Errorf("%s: a negative duration, ramp or elapsed time", e.Label)
	}
	if e.RampMs > e.DurationMs {
		return Entry{}, fmt.Errorf("%s: ramp_ms %d is longer than duration_ms %d", e.Label, e.RampMs, e.DurationMs)
	}
	for _, ts := range []struct{ name, v string }{{"started_at", e.StartedAt}, {"ended_at", e.EndedAt}} {
		if _, err := ParseTime(ts.v); err != nil {
			return Entry{}, fmt.Errorf("%s: %s: %w", e.Label, ts.name, err)
		}
	}
	if err := checkResults(e.Results); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", e.Label, err)
	}
	for i, r := range e.Results {
		if r.ElapsedMs < 0 {
			return Entry{}, fmt.Errorf("%s: results[%d]: negative elapsed_ms", e.Label, i)
		}
		if _, err := ParseTime(r.StartedAt); err != nil {
			return Entry{}, fmt.Errorf("%s: results[%d]: started_at: %w", e.Label, i, err)
		}
	}
	return e, nil
}

// maxNs is the largest statistic in nanoseconds a reader takes: the
// longest time.Duration, some 292 years.
const maxNs = float64(math.MaxInt64)

// checkResults refuses what no engine could have counted: a counter whose
// sum over the backends does not fit in 64 bits (a grader adding them up
// would wrap round to a small number), and a statistic in nanoseconds
// outside 0 to maxNs (a p99 of -1, or of 1e308).
func checkResults(results []BackendResult) error {
	sums := map[string]uint64{}
	for i, r := range results {
		for _, k := range slices.Sorted(maps.Keys(r.Counters)) {
			sum, carry := bits.Add64(sums[k], r.Counters[k], 0)
			if carry != 0 {
				return fmt.Errorf("results[%d]: counter %s summed over the backends passes %d, the most a counter holds", i, k, uint64(math.MaxUint64))
			}
			sums[k] = sum
		}
		if err := checkGaps(r.GapUnsent); err != nil {
			return fmt.Errorf("results[%d]: %w", i, err)
		}
		for _, name := range slices.Sorted(maps.Keys(r.Statistics)) {
			st := r.Statistics[name]
			if st.Unit != "ns" {
				continue
			}
			for _, f := range []struct {
				field string
				v     float64
			}{{"mean", st.Mean}, {"pstdev", st.Pstdev}, {"min", st.Min}, {"max", st.Max}, {"p50", st.P50}, {"p90", st.P90}, {"p99", st.P99}, {"p99.9", st.P999}} {
				if !(f.v >= 0 && f.v <= maxNs) {
					return fmt.Errorf("results[%d]: statistic %s: %s %g ns is outside 0 to 2^63 ns", i, name, f.field, f.v)
				}
			}
		}
	}
	return nil
}

// checkGaps refuses a gap_unsent no driver could have written: a time
// that is not RFC 3339, a gap that ends before it begins or before the
// one ahead of it ends, counts whose sum does not fit in 64 bits.
func checkGaps(gaps []Gap) error {
	var prev time.Time
	var sum uint64
	for i, g := range gaps {
		from, err := ParseTime(g.From)
		if err != nil || g.From == "" {
			return fmt.Errorf("gap_unsent[%d]: from %q is not an RFC 3339 time", i, g.From)
		}
		to, err := ParseTime(g.To)
		if err != nil || g.To == "" {
			return fmt.Errorf("gap_unsent[%d]: to %q is not an RFC 3339 time", i, g.To)
		}
		if to.Before(from) || from.Before(prev) {
			return fmt.Errorf("gap_unsent[%d]: %s..%s ends before it begins, or begins before the gap ahead of it ends", i, g.From, g.To)
		}
		prev = to
		var carry uint64
		if sum, carry = bits.Add64(sum, g.Count, 0); carry != 0 {
			return fmt.Errorf("gap_unsent[%d]: the counts sum past %d", i, uint64(math.MaxUint64))
		}
	}
	return nil
}

// checkDuplicateKeys refuses a JSON value in which one object holds the
// same key twice. raw is valid JSON (it was decoded already).
func checkDuplicateKeys(raw []byte) error {
	type frame struct {
		keys    map[string]bool // nil for an array
		wantKey bool
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	done := func() { // a value ended: its object now expects a key
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			stack[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF; anything else was reported by the decode
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); !ok || d != '}' {
				top := stack[n-1]
				key, _ := tok.(string)
				if top.keys[key] {
					return fmt.Errorf("the key %q appears twice in one object", key)
				}
				top.keys[key], top.wantKey = true, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			done()
		default:
			done()
		}
	}
}

// checkFormat refuses executions in the formats older sortie releases
// wrote. An execution that ran must carry started_at (the releases without
// it did not count requests still in flight at the end, so a zero there
// means "not counted", not "none"), and per-backend results unless its
// backend errors or its error say why there are none. A refused execution
// has no counters to misread and fails anyway, so it needs neither.
func checkFormat(execs []Entry) error {
	var noStart, noResults []string
	for _, e := range execs {
		if e.NotRun {
			continue
		}
		if e.StartedAt == "" && !ExecutionRefused(e.Execution) {
			noStart = append(noStart, e.Label)
		}
		if !e.HasResults && len(e.BackendErrors) == 0 && e.Error == "" {
			noResults = append(noResults, e.Label)
		}
	}
	if len(noStart) == 0 && len(noResults) == 0 {
		return nil
	}
	var parts []string
	if len(noStart) > 0 {
		parts = append(parts, "without started_at: "+ListSome(noStart))
	}
	if len(noResults) > 0 {
		parts = append(parts, "without per-backend results: "+ListSome(noResults))
	}
	return fmt.Errorf("an older report format the gate does not grade (executions %s); its counters would read as zero without having been counted: grade it with the tooling of the release that wrote it", strings.Join(parts, "; "))
}

// ListSome joins the first five names and says how many more there are.
func ListSome(names []string) string {
	const max = 5
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// ParseTime parses a report timestamp (RFC 3339); the empty string is no
// time, the zero Time.
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// ParseDecimal reads a plain decimal number ("9", "5.94", "1e3") exactly.
// Exponents are bounded: a rate or percentage of 10^30 means nothing, and
// an unbounded one would make the arithmetic enormous.
func ParseDecimal(s string) (*big.Rat, error) {
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
