package gate

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// The HTML report (--html FILE): one self-contained page, made to be
// opened from a run directory on a laptop with no network. It holds no
// reference to anything outside itself (no script, style sheet, font or
// image from elsewhere), and its charts are inline SVG drawn by
// htmlsvg.go (the page around them by htmlpage.go); a roll's or fault's zoomed view is a section of the page that
// CSS shows when its band is clicked (the URL's #fragment), so the page
// needs no script at all.
//
// At the top: the verdict and the gate's table per target and node, with
// the gate's own text lines. Then per target: a chart per node, the rolls
// and faults marked on it, the unattributed failures as red ticks, and the
// table of its failure samples, unattributed ones highlighted.

//go:embed html.css
var pageCSS string

// maxSampleRows caps the rows of one target's failure table; the table
// says how many more the live record holds.
const maxSampleRows = 2000

// maxTicks caps the unattributed failures a chart marks one by one, so
// that a run failing all along still makes a page of bounded size; the
// failure bars and the table count them all.
const maxTicks = 500

// zoomMargin is shown either side of a bracket in its zoomed view.
const zoomMargin = 30 * time.Second

// page is what render (htmlpage.go) writes.
type page struct {
	Verdict Verdict
	Text    string // the gate's text output, as printed
	Legend  []legendItem
	Targets []htmlTarget
	HasLive bool
	Notes   []string
}

type legendItem struct{ Class, Color string }

type htmlTarget struct {
	T        Target
	ID       string
	Charts   []htmlChart
	Zooms    []htmlZoom
	Samples  []sampleRow
	More     int
	Failures int
	Unattr   int
	Open     bool // the sample table starts unfolded
}

type htmlChart struct {
	Node string
	SVG  string // drawn and escaped by svgChart
}

type htmlZoom struct {
	ID, Title string
	Charts    []htmlChart
}

type sampleRow struct {
	At, Due, Node, Class, Reason, Status, Replica, ConnAge, Latency, In string
	Unattributed                                                        bool
}

// WriteHTML renders the report page of a graded run. in is what was
// graded (its Live.Timeline, when read, is drawn), text the gate's text
// output.
func WriteHTML(w io.Writer, in Input, v Verdict, text string) error {
	p := page{Verdict: v, Text: text, HasLive: in.Live != nil && in.Live.Timeline != nil, Notes: in.Live.timelineNotes()}
	for i, c := range record.FailureClasses {
		p.Legend = append(p.Legend, legendItem{Class: short(c), Color: classColor(i)})
	}
	g := newGrader(in)
	fails := placedFailures(g, in, v)
	for i, t := range v.Targets {
		p.Targets = append(p.Targets, buildTarget(g, in, v, t, "t"+strconv.Itoa(i), fails))
	}
	bw := bufio.NewWriter(w)
	if err := p.render(bw); err != nil {
		return fmt.Errorf("render html: %w", err)
	}
	return bw.Flush()
}

func (lf *LiveFailures) timelineNotes() []string {
	if lf == nil {
		return nil
	}
	return lf.Timeline.describe()
}

// placed is a failure with what it fell in.
type placed struct {
	failure
	in      []string // the brackets that excuse it or hold it
	excused bool
}

// placedFailures sets every failure of the live record against the
// brackets, as the attribution does.
func placedFailures(g *grader, in Input, v Verdict) []placed {
	if in.Live == nil {
		return nil
	}
	targetOf := map[string]string{}
	for _, e := range in.Source.Executions {
		targetOf[e.Label] = rollName(targetName(e))
	}
	var out []placed
	for _, f := range g.failures(in.Live, targetOf) {
		p := placed{failure: f}
		if a := v.Attribution; a != nil {
			for _, bs := range [][]Bracket{a.Rolls, a.Faults} {
				for i := range bs {
					b := &bs[i]
					if b.covers(&p.failure) && p.falls(b.begin, b.end, in.Settle) {
						p.in = append(p.in, bracketName(b))
						p.excused = p.excused || !b.Planted
					}
				}
			}
		}
		out = append(out, p)
	}
	return out
}

func bracketName(b *Bracket) string {
	if b.Kind == "roll" {
		return "roll " + b.Ref
	}
	return "fault " + b.Kind + " " + b.Ref
}

// labelsOf are the execution labels of a target, by the gate's rule.
func labelsOf(in Input, t Target) map[string]bool {
	out := map[string]bool{}
	if t.Label != "" {
		out[t.Label] = true
	}
	for _, e := range in.Source.Executions {
		if e.Label == t.Name || targetName(e) == t.Name {
			out[e.Label] = true
		}
	}
	return out
}

// buildTarget draws one target's charts and zoomed views and lists its
// failures.
func buildTarget(g *grader, in Input, v Verdict, t Target, id string, fails []placed) htmlTarget {
	ht := htmlTarget{T: t, ID: id}
	labels := labelsOf(in, t)
	var mine []placed
	for _, f := range fails {
		if labels[f.label] {
			mine = append(mine, f)
		}
	}
	ht.Samples, ht.More, ht.Failures, ht.Unattr = sampleRows(in.Live, mine)
	ht.Open = len(ht.Samples) <= 20
	if in.Live == nil || in.Live.Timeline == nil {
		return ht
	}
	var series []*TimelineSeries
	for _, s := range in.Live.Timeline.Series {
		if labels[s.Label] {
			series = append(series, s)
		}
	}
	if len(series) == 0 {
		return ht
	}
	nodes := nodeSeries(g, t, series)
	t0, t1 := series[0].Start, series[0].End()
	for _, s := range series {
		t0, t1 = minTime(t0, s.Start), maxTime(t1, s.End())
	}
	brackets := targetBrackets(v, t, labels)
	// The axis holds every bucket, failure and bracket of the target, so
	// that none falls off the chart of a record with gaps.
	for _, f := range mine {
		if !f.at.IsZero() {
			t0, t1 = minTime(t0, f.at), maxTime(t1, f.at.Add(time.Millisecond))
		}
	}
	for _, b := range brackets {
		t0, t1 = minTime(t0, b.begin), maxTime(t1, b.end.Add(in.Settle))
	}
	marks := func(node string) []mark {
		var out []mark
		for i, b := range brackets {
			if b.Node != "" && b.Node != node {
				continue
			}
			out = append(out, newMark(b, in.Settle, id+"-z"+strconv.Itoa(i)))
		}
		return out
	}
	ht.Charts = drawNodes(in.Live, nodes, t0, t1, marks, mine)
	for i, b := range brackets {
		z0, z1 := b.begin.Add(-zoomMargin), b.end.Add(in.Settle+zoomMargin)
		ht.Zooms = append(ht.Zooms, htmlZoom{ID: id + "-z" + strconv.Itoa(i), Title: bracketTitle(b, in.Settle),
			Charts: drawNodes(in.Live, nodes, maxTime(z0, t0), minTime(z1, t1), marks, mine)})
	}
	return ht
}

// nodeSeries pairs the target's nodes (in the verdict's order, then any
// the record adds) with their series.
type nodeChart struct {
	node   string
	series *TimelineSeries
}

func nodeSeries(g *grader, t Target, series []*TimelineSeries) []nodeChart {
	var out []nodeChart
	used := map[*TimelineSeries]bool{}
	for _, n := range t.Nodes {
		nl := nodeChart{node: n.Node}
		for _, s := range series {
			if s.Backend == n.Addr && !used[s] {
				nl.series, used[s] = s, true
				break
			}
		}
		out = append(out, nl)
	}
	for _, s := range series {
		if !used[s] {
			out = append(out, nodeChart{node: g.nodeNamed(s.Backend, s.BackendName), series: s})
		}
	}
	return out
}

// drawNodes draws a chart per node over [t0, t1), on shared scales.
func drawNodes(live *LiveFailures, nodes []nodeChart, t0, t1 time.Time, marks func(string) []mark, fails []placed) []htmlChart {
	sc := scales{t0: t0, t1: t1}
	cols := make([][]column, len(nodes))
	for i, n := range nodes {
		cols[i] = columns(n.series, t0, t1)
		if n.series != nil {
			sc.fit(cols[i], n.series.Width)
		}
	}
	var out []htmlChart
	for i, n := range nodes {
		var pts []point
		for _, f := range fails {
			if !f.excused && f.node == n.node && !f.at.Before(t0) && f.at.Before(t1) && len(pts) < maxTicks {
				pts = append(pts, point{at: f.at, title: failureTitle(live, f)})
			}
		}
		out = append(out, htmlChart{Node: n.node, SVG: svgChart(n.node, n.series, cols[i], sc, marks(n.node), pts)})
	}
	return out
}

// targetBrackets are the rolls and faults that cover a target: its own
// rolls, the faults of its target or of any node, the driver's.
func targetBrackets(v Verdict, t Target, labels map[string]bool) []*Bracket {
	a := v.Attribution
	if a == nil {
		return nil
	}
	names := map[string]bool{rollName(t.Name): true}
	for l := range labels {
		names[labelTarget(l)] = true
	}
	var out []*Bracket
	for _, bs := range [][]Bracket{a.Rolls, a.Faults} {
		for i := range bs {
			b := &bs[i]
			if b.Target == "" || names[b.Target] {
				out = append(out, b)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].begin.Before(out[j].begin) })
	return out
}

func newMark(b *Bracket, settle time.Duration, zoom string) mark {
	var label string
	if b.Kind == "roll" {
		label = (record.Roll{Ref: b.Ref}).Name()
	} else {
		label = b.Kind + " " + b.Ref
	}
	return mark{begin: b.begin, end: b.end, settled: b.end.Add(settle), label: label, title: bracketTitle(b, settle),
		zoom: zoom, fault: b.Kind != "roll", failed: b.Failed}
}

func bracketTitle(b *Bracket, settle time.Duration) string {
	s := fmt.Sprintf("%s at=%s end=%s settle=%s failures=%d", bracketName(b), b.At, b.End, settle, b.Failures)
	if b.Failed {
		s += " (the roll FAILED: " + b.Why + ")"
	}
	if b.Planted {
		s += " (planted: its failures stay unattributed)"
	}
	return s
}

// sampleRows lists a target's failures, first maxSampleRows.
func sampleRows(live *LiveFailures, fails []placed) (rows []sampleRow, more, total, unattr int) {
	for _, f := range fails {
		total++
		if !f.excused {
			unattr++
		}
		if len(rows) >= maxSampleRows {
			more++
			continue
		}
		r := sampleRow{Node: f.node, At: "?", Unattributed: !f.excused, In: "UNATTRIBUTED"}
		if !f.at.IsZero() {
			r.At = f.at.UTC().Format(record.TimeFormat)
		}
		if len(f.in) > 0 {
			r.In = joinComma(f.in)
			if !f.excused {
				r.In = "UNATTRIBUTED (in " + r.In + ")"
			}
		}
		if f.sample >= 0 {
			s := live.view(f.sample)
			r.Due, r.Class, r.Reason, r.Replica = s.due, short(s.class), reasonOf(s.class, s.reason), s.remote
			if s.status != 0 {
				r.Status = strconv.Itoa(s.status)
			}
			if s.remote != "" {
				r.ConnAge = strconv.FormatInt(s.connAgeMs, 10) + " ms"
			}
			r.Latency = fmtNum(float64(s.latencyNs)/1e6) + " ms"
		} else {
			r.Class = fmt.Sprintf("%d dropped (counted in the bucket, not sampled)", f.dropped)
		}
		rows = append(rows, r)
	}
	return rows, more, total, unattr
}

func failureTitle(live *LiveFailures, f placed) string {
	if f.sample < 0 {
		return fmt.Sprintf("UNATTRIBUTED %d dropped failure(s) in the bucket from %s", f.dropped, f.at.UTC().Format(record.TimeFormat))
	}
	s := live.view(f.sample)
	return fmt.Sprintf("UNATTRIBUTED %s %s at %s remote=%s", short(s.class), reasonOf(s.class, s.reason), f.at.UTC().Format(record.TimeFormat), s.remote)
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(x)
	}
	return b.String()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
