package driver

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// lineWriter writes the run's stderr lines. Calls' goroutines print
// progress while the coordinator prints the rest; each line is one Write.
// On a terminal with a live status (block set), every line is printed
// above the status block, which is drawn again below it.
type lineWriter struct {
	mu    sync.Mutex
	w     io.Writer
	block *liveBlock
}

func (l *lineWriter) printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	l.write(s)
}

// Write prints p, whole lines, as printf does: the driver's log goes
// through it so that it too lands above the status block.
func (l *lineWriter) Write(p []byte) (int, error) {
	l.write(string(p))
	return len(p), nil
}

func (l *lineWriter) write(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.block != nil {
		l.w.Write(l.block.frame(s))
		return
	}
	io.WriteString(l.w, s)
}

// setBlock replaces the lines of the status block, and redraws it now
// when draw is set. It does nothing without a block (not a terminal).
func (l *lineWriter) setBlock(lines []string, draw bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.block == nil {
		return
	}
	l.block.lines = lines
	if draw {
		l.w.Write(l.block.frame(""))
	}
}

// rateText is "<rate> rps per backend for <duration>[, ramp <ramp>]".
func rateText(rate float64, perBackend bool, durationMs, rampMs int64) string {
	whose := "per backend"
	if !perBackend {
		whose = "over the pool"
	}
	s := fmt.Sprintf("%s rps %s for %v", strconv.FormatFloat(rate, 'f', -1, 64), whose, time.Duration(durationMs)*time.Millisecond)
	if rampMs > 0 {
		s += fmt.Sprintf(", ramp %v", time.Duration(rampMs)*time.Millisecond)
	}
	return s
}

// running prints "  running <label> (<rate> rps per backend for <dur>) on
// <b1>, <b2>".
func (l *lineWriter) running(ex *execRun, backends []string) {
	l.printf("  running %s (%s) on %s", ex.label,
		rateText(ex.rate, ex.perBackend, ex.duration.Milliseconds(), ex.ramp.Milliseconds()),
		strings.Join(backends, ", "))
}

// progress prints "  progress <label> <backend> <elapsed> 2xx=N ..." with
// every non-zero outcome class and the latency summary.
func (l *lineWriter) progress(label, backend string, p *enginev1.Progress) {
	var b strings.Builder
	el := p.GetElapsed().AsDuration()
	if el >= time.Second {
		el = el.Round(100 * time.Millisecond)
	} else {
		el = el.Round(time.Millisecond)
	}
	fmt.Fprintf(&b, "  progress %s %s %v", label, backend, el)
	fmt.Fprintf(&b, " 2xx=%d", p.GetCounters()[record.HTTP2xx])
	for _, k := range record.Outcomes {
		if k == record.HTTP2xx {
			continue
		}
		if v := p.GetCounters()[k]; v != 0 {
			fmt.Fprintf(&b, " %s=%d", shortCounter(k), v)
		}
	}
	if p.GetLatencyCount() > 0 {
		fmt.Fprintf(&b, " mean=%v max=%v",
			roundLatency(time.Duration(p.GetLatencyMeanNs())), roundLatency(time.Duration(p.GetLatencyMaxNs())))
	}
	l.printf("%s", b.String())
}

func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// shortCounter drops the "benchmark." and "http_" prefixes:
// benchmark.http_5xx is 5xx, benchmark.pool_overflow is pool_overflow.
func shortCounter(k string) string {
	k = strings.TrimPrefix(k, "benchmark.")
	return strings.TrimPrefix(k, "http_")
}

// finished prints the one line per finished execution:
// "  PASS|FAIL|SKIP <label> (scenario <s>[, <elapsed>])[: reason]".
func (l *lineWriter) finished(e record.Execution) {
	switch {
	case e.NotRun:
		l.printf("  SKIP %s (scenario %s): %s", e.Label, e.Scenario, e.Error)
	case e.Pass:
		l.printf("  PASS %s (scenario %s, %v)", e.Label, e.Scenario, time.Duration(e.ElapsedMs)*time.Millisecond)
	default:
		l.printf("  FAIL %s (scenario %s, %v): %s", e.Label, e.Scenario, time.Duration(e.ElapsedMs)*time.Millisecond, strings.Join(e.FailureReasons, "; "))
	}
}

// tally counts the executions for the final line.
type tally struct{ passed, run, notRun int }

func count(execs []record.Execution) tally {
	var t tally
	for _, e := range execs {
		switch {
		case e.NotRun:
			t.notRun++
		case e.Pass:
			t.passed++
			t.run++
		default:
			t.run++
		}
	}
	return t
}

// finalLine is "PASS|FAIL  N/M executions passed[, K not run]": M counts
// the executions that were started, K those that never were.
func finalLine(rep *record.Report) string {
	t := count(rep.Executions)
	verdict := "FAIL"
	if rep.Pass {
		verdict = "PASS"
	}
	s := fmt.Sprintf("%s  %d/%d executions passed", verdict, t.passed, t.run)
	if t.notRun > 0 {
		s += fmt.Sprintf(", %d not run", t.notRun)
	}
	if rep.Cancelled {
		s += " (run interrupted)"
	}
	return s
}

// writeSummary writes the text summary of a run: a block per execution
// and the final line.
func writeSummary(w io.Writer, rep *record.Report) {
	for _, e := range rep.Executions {
		writeExecution(w, e)
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, finalLine(rep))
}

const indent = "       "

func writeExecution(w io.Writer, e record.Execution) {
	verdict := "FAIL"
	switch {
	case e.NotRun:
		verdict = "SKIP"
	case e.Pass:
		verdict = "PASS"
	}
	head := rateText(e.Rate, e.PerBackend, e.DurationMs, e.RampMs) + fmt.Sprintf(", pool %q", e.Pool)
	if !e.NotRun {
		head += fmt.Sprintf(", %v", time.Duration(e.ElapsedMs)*time.Millisecond)
		if e.StartedAt != "" {
			head += ", started " + e.StartedAt
		}
	}
	fmt.Fprintf(w, "%-6s %s  (%s)\n", verdict, e.Label, head)
	if e.NotRun {
		fmt.Fprintf(w, "%s%s\n", indent, e.Error)
		return
	}
	if e.DNS != "" {
		fmt.Fprintf(w, "%s%s resolved to %s\n", indent, e.DNS, strings.Join(e.Backends, ", "))
	}
	if e.Error != "" {
		fmt.Fprintf(w, "%serror: %s\n", indent, e.Error)
	}
	for _, br := range e.Results {
		name := br.Backend
		if br.BackendName != "" {
			name += " (" + br.BackendName + ")"
		}
		fmt.Fprintf(w, "%s%s: %s\n", indent, name, resultText(br))
	}
	for _, be := range e.BackendErrors {
		fmt.Fprintf(w, "%s%s: error: %s\n", indent, be.Backend, be.Error)
	}
	for _, t := range e.Thresholds {
		mark := "ok  "
		if !t.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s%s %s  (%s: %s)\n", indent, mark, t.Expr, t.Scope, t.Actual)
	}
}

// resultText is one backend's counters and its 2xx latency.
func resultText(br record.BackendResult) string {
	var parts []string
	if br.Planned > 0 {
		parts = append(parts, fmt.Sprintf("planned %d", br.Planned))
	}
	if br.Unsent > 0 {
		parts = append(parts, fmt.Sprintf("unsent %d", br.Unsent))
	}
	keys := make([]string, 0, len(br.Counters))
	for k := range br.Counters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", shortCounter(k), br.Counters[k]))
	}
	if len(br.Counters) == 0 {
		parts = append(parts, "no outcomes")
	}
	if s, ok := br.Statistics[record.Latency2xx]; ok && s.Count > 0 {
		parts = append(parts, fmt.Sprintf("latency_2xx p50 %v p99 %v max %v",
			roundLatency(time.Duration(s.P50)), roundLatency(time.Duration(s.P99)), roundLatency(time.Duration(s.Max))))
	}
	if br.Cancelled {
		parts = append(parts, "cancelled")
	}
	return strings.Join(parts, ", ")
}
