package gate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WriteText writes the verdict as the gate's lines (see the package
// documentation for their formats). perNode adds the NODE lines.
func WriteText(w io.Writer, v Verdict, perNode bool) error {
	bw := bufio.NewWriter(w)
	for _, t := range v.Targets {
		fmt.Fprintln(bw, targetLine(t))
		if perNode {
			for _, n := range t.Nodes {
				fmt.Fprintln(bw, nodeLine(t, n))
			}
		}
	}
	for _, f := range v.RunFailures {
		fmt.Fprintf(bw, "FAIL  %s  -- %s\n", clip(f.Name), clip(f.Reason))
	}
	for _, l := range v.Lost {
		fmt.Fprintf(bw, "LOST  %s (%s)  targets=%d  error: %s\n", clip(l.Node), clip(l.Addr), l.Targets, clip(l.Error))
	}
	for _, g := range v.Gaps {
		fmt.Fprintln(bw, g.Line())
	}
	writeAttribution(bw, v.Attribution)
	for _, g := range v.DriverGaps {
		fmt.Fprintf(bw, "DRIVER  gap from=%s to=%s  -- %s\n", g.From, g.To, g.Why)
	}
	fmt.Fprintln(bw, windowLine(v.Window))
	for _, n := range v.Notes {
		fmt.Fprintf(bw, "NOTE  %s\n", clip(n))
	}
	c := v.Counts
	fmt.Fprintf(bw, "VERDICT %s targets=%d passed=%d failed=%d not_run=%d backends=%d lost_backends=%d report_pass=%s",
		v.Result, c.Targets, c.Passed, c.Failed, c.NotRun, c.Backends, c.LostBackends, c.ReportPass)
	if c.Source == "stream" {
		fmt.Fprintf(bw, " source=stream skipped_lines=%d runs=%d", c.SkippedLines, c.Runs)
	}
	fmt.Fprintln(bw)
	return bw.Flush()
}

// WriteJSON writes the verdict as one indented JSON document.
func WriteJSON(w io.Writer, v Verdict) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode verdict: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func targetLine(t Target) string {
	var b strings.Builder
	b.WriteString(t.Status)
	b.WriteString("  ")
	b.WriteString(clip(t.Name))
	if t.Ran {
		rate := "?"
		if t.RateAchieved != nil {
			rate = fmtFloat2(*t.RateAchieved)
		}
		count := "?"
		if t.HTTP2xx != nil {
			count = strconv.FormatUint(*t.HTTP2xx, 10)
		}
		fmt.Fprintf(&b, "  rate=%s/%srps http_2xx=%s/%s backends=%d/%d", rate, orQ(t.RatePlanned), count, orQ(t.HTTP2xxPlanned), t.Survivors, t.Backends)
	}
	if t.Status == ResultPass {
		b.WriteString("  failures=none")
	} else {
		b.WriteString("  -- ")
		b.WriteString(clipAll(t.Reasons))
	}
	if l := t.Latency; l != nil {
		fmt.Fprintf(&b, "  lat p50<=%s p99<=%s max<=%s", fmtMs(l.P50Ms), fmtMs(l.P99Ms), fmtMs(l.MaxMs))
	}
	return b.String()
}

func nodeLine(t Target, n Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, "NODE  %s  %s  %s", clip(t.Name), clip(n.Node), n.Status)
	if n.Answered {
		rate := "?"
		if n.Rate != nil {
			rate = fmtFloat2(*n.Rate)
		}
		fmt.Fprintf(&b, "  http_2xx=%d/%s rate=%s/%srps elapsed=%ss", n.HTTP2xx, orQ(n.Planned), rate, orQ(n.Share), fmtMsAsS(n.ElapsedMs))
		if n.StartedAt != "" {
			fmt.Fprintf(&b, " started=%s", n.StartedAt)
		}
		if l := n.Latency; l != nil {
			fmt.Fprintf(&b, " p50=%s p99=%s max=%s", fmtMs(l.P50Ms), fmtMs(l.P99Ms), fmtMs(l.MaxMs))
		}
	} else if n.Status != "REFUSED" {
		b.WriteString("  returned nothing")
	}
	if len(n.Reasons) == 0 {
		b.WriteString("  failures=none")
	} else {
		b.WriteString("  -- ")
		b.WriteString(clipAll(n.Reasons))
	}
	return b.String()
}

func windowLine(w Window) string {
	if w.Dispatched == "" {
		return fmt.Sprintf("WINDOW  dispatched=none ended=none (none of %d execution(s) started)", w.ExecutionCount)
	}
	s := fmt.Sprintf("WINDOW  dispatched=%s ended=%s", w.Dispatched, orQ(w.Ended))
	if w.EnginesFirst != "" {
		s += fmt.Sprintf(" engines_started=%s..%s", w.EnginesFirst, w.EnginesLast)
	}
	return s
}

func orQ(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// fmtRat prints an exact number: an integer as one, anything else with at
// most three decimals.
func fmtRat(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	return trimZeros(r.FloatString(3))
}

// fmtFloat2 prints a measured value with at most two decimals.
func fmtFloat2(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "?"
	}
	return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)
}

// fmtMs prints a latency: whole milliseconds from 100 ms, one decimal from
// 10 ms, two below.
func fmtMs(ms *float64) string {
	if ms == nil {
		return "?"
	}
	v := *ms
	var s string
	switch {
	case v >= 100:
		s = strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case v >= 10:
		s = strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	default:
		s = strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
	}
	return s + "ms"
}

// fmtMsAsS prints milliseconds as seconds, exactly.
func fmtMsAsS(ms int64) string {
	return fmtRat(big.NewRat(ms, 1000))
}

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(s, "0")
		s = strings.TrimSuffix(s, ".")
	}
	return s
}

// MaxTextBytes bounds one piece of text from the report (an error, a
// reason, a name) in a text line: a 100 MB error string is cut, with how
// much was left out; --json keeps it whole.
const MaxTextBytes = 1024

// clip cuts s to MaxTextBytes, on a character boundary, and says how much
// more --json holds.
func clip(s string) string {
	if len(s) <= MaxTextBytes {
		return s
	}
	cut := MaxTextBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [%d bytes more: see --json]", s[:cut], len(s)-cut)
}

// clipAll clips every reason and joins them as a line shows them.
func clipAll(reasons []string) string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = clip(r)
	}
	return strings.Join(out, " | ")
}

// oneLine keeps a text from the report on one output line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), " / ")
}

// intList joins a few numbers and says how many more there are.
func intList(ns []int) string {
	const max = 10
	var parts []string
	for i, n := range ns {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(ns)-max))
			break
		}
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ", ")
}

// writeAttribution writes the ROLL, FAULT and UNATTRIBUTED lines.
func writeAttribution(w io.Writer, a *Attribution) {
	if a == nil {
		return
	}
	settle := fmtMsAsS(a.SettleMs) + "s"
	for _, b := range a.Rolls {
		fmt.Fprintln(w, bracketLine("ROLL  "+b.Ref, b, settle, a.HasLive))
	}
	for _, b := range a.Faults {
		fmt.Fprintln(w, bracketLine("FAULT  "+b.Kind+"  "+b.Ref, b, settle, a.HasLive))
	}
	for _, u := range a.Unattributed {
		fmt.Fprintf(w, "UNATTRIBUTED  %s  failures=%d %s", u.Target, u.Failures, nodeList(u.Nodes))
		if len(u.Classes) > 0 {
			fmt.Fprintf(w, " classes=%s", classList(u.Classes))
		}
		if u.Dropped > 0 {
			fmt.Fprintf(w, " dropped=%d", u.Dropped)
		}
		fmt.Fprintln(w)
		for _, l := range u.Listed {
			fmt.Fprintln(w, failureLine(u.Target, l))
		}
		if u.More > 0 {
			fmt.Fprintf(w, "UNATTRIBUTED  %s  and %d more\n", u.Target, u.More)
		}
	}
}

// bracketLine writes one ROLL or FAULT line after its head.
func bracketLine(head string, b Bracket, settle string, hasLive bool) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s  at=%s end=%s settle=%s", head, b.At, b.End, settle)
	switch {
	case !hasLive:
		s.WriteString("  failures=? (no live record)")
	case b.Failures == 0:
		s.WriteString("  failures=none")
	default:
		fmt.Fprintf(&s, "  failures=%d %s", b.Failures, nodeList(b.Nodes))
		if len(b.Classes) > 0 {
			fmt.Fprintf(&s, " classes=%s", classList(b.Classes))
		}
		if b.Dropped > 0 {
			fmt.Fprintf(&s, " dropped=%d", b.Dropped)
		}
		fmt.Fprintf(&s, "  window=%s..%s recovery=%ss", b.First, b.Last, fmtMsAsS(*b.RecoveryMs))
		if len(b.Replicas) > 0 {
			fmt.Fprintf(&s, "  replicas=%s", strings.Join(b.Replicas, ","))
		}
	}
	if b.Planted {
		s.WriteString("  planted: its failures stay UNATTRIBUTED")
	}
	if b.Failed {
		s.WriteString("  -- the roll FAILED: " + clip(orQ(b.Why)))
	}
	return s.String()
}

// failureLine writes one unattributed failure.
func failureLine(target string, l FailureLine) string {
	var s strings.Builder
	fmt.Fprintf(&s, "UNATTRIBUTED  %s  %s  at=%s", target, l.Node, l.At)
	if l.Dropped > 0 {
		fmt.Fprintf(&s, " dropped=%d (counted in the bucket from at=, not sampled)", l.Dropped)
		return s.String()
	}
	fmt.Fprintf(&s, " due=%s class=%s", orQ(l.Due), l.Class)
	if l.Reason != "" {
		fmt.Fprintf(&s, " reason=%s", l.Reason)
	}
	if l.Status != 0 {
		fmt.Fprintf(&s, " status=%d", l.Status)
	}
	fmt.Fprintf(&s, " remote=%s", orDash(l.Remote))
	return s.String()
}

func nodeList(ns []NodeCount) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprintf("%s=%d", n.Node, n.Count)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func classList(cs []ClassCount) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s=%d", c.Class, c.Count)
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
