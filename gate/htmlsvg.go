package gate

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// The charts of the HTML report, drawn as inline SVG here rather than by a
// charting library in the page: the page then needs no script to show
// them, and what it shows is computed by the same code that grades.
//
// A chart is one node's timeline of one target, three panels over a
// shared time axis: answered 2xx per second, the failures of every class
// stacked, and the 2xx latency p50 and p99. A long run has far more
// buckets than a chart has pixels, so buckets are drawn by columns of
// several (downsampled): a column's rate is the mean over its buckets, its
// failures the sum, its latency the highest p50 and p99 of its buckets
// (an upper envelope, never an average of percentiles). Every column
// carries its exact numbers in a tooltip.

// maxColumns is the most columns a chart draws; the chart is chartW
// pixels wide, so a column is at least two pixels.
const maxColumns = 480

// Chart geometry, in SVG user units.
const (
	chartW     = 960
	chartLeft  = 64
	chartRight = 8
	labelH     = 14 // the row of roll and fault labels
	rateTop    = labelH + 4
	rateH      = 80
	failTop    = rateTop + rateH + 8
	failH      = 48
	latTop     = failTop + failH + 8
	latH       = 64
	axisY      = latTop + latH + 14
	chartH     = axisY + 6
	plotW      = chartW - chartLeft - chartRight
)

// classColors are the failure classes' colours, in the order of
// record.FailureClasses, chosen to be told apart.
var classColors = []string{"#e69f00", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f00", "#17becf", "#555555", "#aaaaaa"}

// classColor is the colour of record.FailureClasses[i].
func classColor(i int) string { return classColors[i%len(classColors)] }

// column is a run of buckets drawn as one.
type column struct {
	from, to time.Time // the buckets' span
	buckets  int       // buckets read in it
	ok       uint64
	fail     []uint64 // by record.FailureClasses
	p50, p99 int64    // the highest of its buckets, ns
}

func (c column) failures() uint64 {
	var n uint64
	for _, v := range c.fail {
		n += v
	}
	return n
}

// columns downsamples a series over [t0, t1) into at most maxColumns
// columns of whole buckets.
func columns(s *TimelineSeries, t0, t1 time.Time) []column {
	if s == nil || s.Width <= 0 {
		return nil
	}
	a := int(max(0, t0.Sub(s.Start)/s.Width))
	b := int(min(int64(s.Buckets()), int64((t1.Sub(s.Start)+s.Width-1)/s.Width)))
	if b <= a {
		return nil
	}
	bs := s.ordered()
	k, _ := slices.BinarySearchFunc(bs, uint32(a), func(x tlBucket, i uint32) int { return cmp.Compare(x.index, i) })
	step := (b - a + maxColumns - 1) / maxColumns
	var out []column
	for i := a; i < b; i += step {
		j := min(i+step, b)
		c := column{from: s.Start.Add(time.Duration(i) * s.Width), to: s.Start.Add(time.Duration(j) * s.Width),
			fail: make([]uint64, len(record.FailureClasses))}
		for ; k < len(bs) && int(bs[k].index) < j; k++ {
			x := bs[k]
			c.buckets++
			c.ok += x.ok
			c.p50, c.p99 = max(c.p50, x.p50), max(c.p99, x.p99)
			for f, n := range x.fail {
				c.fail[f] += n
			}
		}
		out = append(out, c)
	}
	return out
}

// rate is the column's mean 2xx per second over the buckets it read.
func (c column) rate(width time.Duration) float64 {
	if c.buckets == 0 {
		return 0
	}
	return float64(c.ok) / (float64(c.buckets) * width.Seconds())
}

// mark is a roll or fault drawn on a chart: a band from its begin to its
// end plus the settle window, linked to its zoomed view.
type mark struct {
	begin, end, settled time.Time
	label, title, zoom  string
	fault, failed       bool
}

// point is a failure drawn as a tick of its own: an unattributed one.
type point struct {
	at    time.Time
	title string
}

// scales are shared by the charts of one target, so nodes compare.
type scales struct {
	rate     float64
	fail     uint64
	lat      int64
	t0, t1   time.Time
	colWidth time.Duration // the widest column's span, for the axis label
}

func (sc *scales) fit(cols []column, width time.Duration) {
	for _, c := range cols {
		sc.rate = max(sc.rate, c.rate(width))
		sc.fail = max(sc.fail, c.failures())
		sc.lat = max(sc.lat, c.p99)
		sc.colWidth = max(sc.colWidth, c.to.Sub(c.from))
	}
}

func (sc scales) x(t time.Time) float64 {
	span := sc.t1.Sub(sc.t0)
	if span <= 0 {
		return chartLeft
	}
	f := float64(t.Sub(sc.t0)) / float64(span)
	return chartLeft + math.Max(0, math.Min(1, f))*plotW
}

// svgChart draws one node's chart.
func svgChart(node string, s *TimelineSeries, cols []column, sc scales, marks []mark, points []point) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="timeline" data-node="%s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		esc(node), chartW, chartH, chartW, chartH, esc("timeline of "+node))
	fmt.Fprintf(&b, `<rect class="frame" x="%d" y="%d" width="%d" height="%d"/>`, chartLeft, rateTop, plotW, latTop+latH-rateTop)
	for _, m := range marks {
		drawMark(&b, sc, m)
	}
	drawRate(&b, s, cols, sc)
	drawFailures(&b, cols, sc)
	drawLatency(&b, cols, sc)
	for _, p := range points {
		x := sc.x(p.at)
		fmt.Fprintf(&b, `<path class="unattributed" d="M%.1f %d l-4 -7 h8 z"><title>%s</title></path>`, x, failTop+failH, esc(p.title))
	}
	drawAxis(&b, sc)
	drawTips(&b, s, cols, sc)
	b.WriteString(`</svg>`)
	return b.String()
}

func drawMark(b *strings.Builder, sc scales, m mark) {
	x0, x1, x2 := sc.x(m.begin), sc.x(m.end), sc.x(m.settled)
	cls := "roll"
	if m.fault {
		cls = "fault"
	}
	if m.failed {
		cls += " failed"
	}
	fmt.Fprintf(b, `<a class="%s" href="#%s" data-ref="%s"><title>%s</title>`, cls, esc(m.zoom), esc(m.label), esc(m.title))
	fmt.Fprintf(b, `<rect class="band" x="%.1f" y="%d" width="%.1f" height="%d"/>`, x0, rateTop, math.Max(1, x1-x0), latTop+latH-rateTop)
	if x2 > x1 {
		fmt.Fprintf(b, `<rect class="settle" x="%.1f" y="%d" width="%.1f" height="%d"/>`, x1, rateTop, x2-x1, latTop+latH-rateTop)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%d">%s</text></a>`, x0, labelH-3, esc(m.label))
}

// drawRate draws the 2xx per second as a line, broken where no bucket was
// read.
func drawRate(b *strings.Builder, s *TimelineSeries, cols []column, sc scales) {
	if s == nil {
		return
	}
	y := func(v float64) float64 { return rateTop + rateH - v/math.Max(sc.rate, 1e-9)*rateH }
	stepPath(b, "rate", cols, sc, func(c column) bool { return c.buckets > 0 },
		func(c column) float64 { return y(c.rate(s.Width)) })
	fmt.Fprintf(b, `<text class="scale" x="%d" y="%d">%s/s</text>`, chartLeft-4, rateTop+10, fmtNum(sc.rate))
	fmt.Fprintf(b, `<text class="scale" x="%d" y="%d">2xx</text>`, chartLeft-4, rateTop+rateH/2+4)
}

// drawFailures stacks the failure classes per column, one path per class.
func drawFailures(b *strings.Builder, cols []column, sc scales) {
	fmt.Fprintf(b, `<text class="scale" x="%d" y="%d">%d</text>`, chartLeft-4, failTop+10, sc.fail)
	fmt.Fprintf(b, `<text class="scale" x="%d" y="%d">failures</text>`, chartLeft-4, failTop+failH/2+4)
	if sc.fail == 0 {
		fmt.Fprintf(b, `<text class="none" x="%d" y="%d">no failure</text>`, chartLeft+6, failTop+failH/2+4)
		return
	}
	unit := float64(failH) / float64(sc.fail)
	base := make([]float64, len(cols))
	for k := range record.FailureClasses {
		var d strings.Builder
		for i, c := range cols {
			if c.fail[k] == 0 {
				continue
			}
			h := math.Max(1, float64(c.fail[k])*unit)
			x0, x1 := sc.x(c.from), sc.x(c.to)
			fmt.Fprintf(&d, "M%.1f %.1fh%.1fv%.1fh%.1fz", x0, failTop+failH-base[i]-h, math.Max(1, x1-x0), h, -math.Max(1, x1-x0))
			base[i] += h
		}
		if d.Len() > 0 {
			fmt.Fprintf(b, `<path class="fail" data-class="%s" fill="%s" d="%s"/>`, short(record.FailureClasses[k]), classColor(k), d.String())
		}
	}
}

// drawLatency draws the p50 and p99 lines in ms.
func drawLatency(b *strings.Builder, cols []column, sc scales) {
	fmt.Fprintf(b, `<text class="scale" x="%d" y="%d">%s ms</text>`, chartLeft-4, latTop+10, fmtNum(float64(sc.lat)/1e6))
	fmt.Fprintf(b, `<text class="scale" x="%d" y="%d">latency</text>`, chartLeft-4, latTop+latH/2+4)
	y := func(ns int64) float64 { return latTop + latH - float64(ns)/math.Max(float64(sc.lat), 1)*latH }
	for _, q := range []struct {
		cls string
		v   func(column) int64
	}{{"p50", func(c column) int64 { return c.p50 }}, {"p99", func(c column) int64 { return c.p99 }}} {
		stepPath(b, q.cls, cols, sc, func(c column) bool { return c.ok > 0 },
			func(c column) float64 { return y(q.v(c)) })
	}
}

// stepPath writes a path of class cls that steps through the columns at
// height y, one level per column, broken where a column has no value.
func stepPath(b *strings.Builder, cls string, cols []column, sc scales, has func(column) bool, y func(column) float64) {
	fmt.Fprintf(b, `<path class="%s" d="`, cls)
	pen := false
	for _, c := range cols {
		if !has(c) {
			pen = false
			continue
		}
		cmd := 'L'
		if !pen {
			cmd = 'M'
		}
		fmt.Fprintf(b, "%c%.1f %.1fH%.1f", cmd, sc.x(c.from), y(c), sc.x(c.to))
		pen = true
	}
	b.WriteString(`"/>`)
}

// drawAxis writes the time axis: five ticks, in UTC.
func drawAxis(b *strings.Builder, sc scales) {
	const ticks = 5
	span := sc.t1.Sub(sc.t0)
	for i := 0; i <= ticks; i++ {
		t := sc.t0.Add(span * time.Duration(i) / ticks)
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case ticks:
			anchor = "end"
		}
		fmt.Fprintf(b, `<text class="axis" x="%.1f" y="%d" text-anchor="%s">%s</text>`, sc.x(t), axisY, anchor, t.UTC().Format("15:04:05"))
	}
}

// drawTips lays a transparent column over each drawn column whose
// tooltip holds its exact numbers.
func drawTips(b *strings.Builder, s *TimelineSeries, cols []column, sc scales) {
	if s == nil {
		return
	}
	b.WriteString(`<g class="tips">`)
	for _, c := range cols {
		x0, x1 := sc.x(c.from), sc.x(c.to)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`,
			x0, rateTop, math.Max(1, x1-x0), latTop+latH-rateTop, esc(tipText(s, c)))
	}
	b.WriteString(`</g>`)
}

// tipText is a column's exact numbers.
func tipText(s *TimelineSeries, c column) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s – %s UTC", c.from.UTC().Format("15:04:05"), c.to.UTC().Format("15:04:05"))
	if c.buckets == 0 {
		b.WriteString("\nno bucket recorded")
		return b.String()
	}
	fmt.Fprintf(&b, "\n2xx %d in %d bucket(s) (%s/s)", c.ok, c.buckets, fmtNum(c.rate(s.Width)))
	for k, n := range c.fail {
		if n > 0 {
			fmt.Fprintf(&b, "\n%s %d", short(record.FailureClasses[k]), n)
		}
	}
	if c.ok > 0 {
		fmt.Fprintf(&b, "\np50 ≤ %s ms, p99 ≤ %s ms", fmtNum(float64(c.p50)/1e6), fmtNum(float64(c.p99)/1e6))
	}
	return b.String()
}

// fmtNum writes a number with three significant digits at most.
func fmtNum(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// esc escapes text for HTML and SVG, attribute values included.
func esc(s string) string { return html.EscapeString(s) }
