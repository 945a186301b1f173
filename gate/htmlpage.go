package gate

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The page around the charts, written by hand rather than by html/template
// or text/template: both import net/url, and the gate imports no network
// package at all (deps_test.go). Every text from the record goes through
// esc (the html package's escaping) on its way out.

// pageWriter writes HTML, keeping the first write error.
type pageWriter struct {
	w   io.Writer
	err error
}

func (p *pageWriter) raw(s string) {
	if p.err == nil {
		_, p.err = io.WriteString(p.w, s)
	}
}

func (p *pageWriter) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// f2 writes an optional number to two decimals, "?" when unknown.
func f2(v *float64) string {
	if v == nil {
		return "?"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

func latCell(l *Latency) string {
	if l == nil {
		return ""
	}
	return f2(l.P50Ms) + " / " + f2(l.P99Ms) + " / " + f2(l.MaxMs)
}

func okClass(status string) string {
	if status == "ok" {
		return ResultPass
	}
	return ResultFail
}

func reasonsCell(reasons []string, titled bool) string {
	var b strings.Builder
	for _, r := range reasons {
		if titled {
			fmt.Fprintf(&b, `<div title="%s">%s</div>`, esc(r), esc(r))
		} else {
			fmt.Fprintf(&b, `<div>%s</div>`, esc(r))
		}
	}
	return b.String()
}

// render writes the whole page.
func (pg page) render(w io.Writer) error {
	p := &pageWriter{w: w}
	v := pg.Verdict
	c := v.Counts
	p.f("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>sortie %s: %d/%d targets passed</title>\n<style>\n%s</style>\n</head>\n<body>\n",
		esc(v.Result), c.Passed, c.Targets, pageCSS)
	p.f(`<header id="verdict" data-verdict="%s" data-exit-code="%d">`+"\n", esc(v.Result), v.ExitCode)
	p.f(`<h1><span class="badge %s">%s</span> sortie soak report</h1>`+"\n", esc(v.Result), esc(v.Result))
	p.f("<p>targets %d, passed %d, failed %d, not run %d; backends %d, lost %d; the report's own pass: %s.", c.Targets, c.Passed, c.Failed, c.NotRun, c.Backends, c.LostBackends, esc(c.ReportPass))
	if v.Window.Dispatched != "" {
		p.f(" Dispatched %s, ended %s (UTC).", esc(v.Window.Dispatched), esc(v.Window.Ended))
	}
	p.raw("</p>\n</header>\n")
	pg.renderGate(p)
	pg.renderLegend(p)
	for _, t := range pg.Targets {
		t.render(p)
	}
	p.raw("</body>\n</html>\n")
	return p.err
}

// renderGate writes the gate's table per target, per node, and its lines.
func (pg page) renderGate(p *pageWriter) {
	p.raw("<section id=\"gate\">\n<h2>The gate, per target and node</h2>\n<table id=\"gate-table\">\n")
	p.raw("<tr><th>target</th><th>status</th><th>nodes</th><th>2xx counted / planned</th><th>rate achieved / planned</th><th>backends</th><th>worst p50 / p99 / max ms</th><th>reasons</th></tr>\n")
	for _, ht := range pg.Targets {
		t := ht.T
		var chips strings.Builder
		for _, n := range t.Nodes {
			fmt.Fprintf(&chips, `<span class="chip %s" data-node="%s" title="%s">%s %s</span> `, okClass(n.Status), esc(n.Node), esc(n.Addr), esc(n.Node), esc(n.Status))
		}
		count := "?"
		if t.HTTP2xx != nil {
			count = strconv.FormatUint(*t.HTTP2xx, 10)
		}
		p.f(`<tr class="target" data-target="%s" data-status="%s"><td><a href="#%s">%s</a></td><td class="%s">%s</td><td>%s</td><td>%s / %s</td><td>%s / %s</td><td>%d/%d</td><td>%s</td><td class="why">%s</td></tr>`+"\n",
			esc(t.Name), esc(t.Status), ht.ID, esc(t.Name), esc(t.Status), esc(t.Status), chips.String(), count, esc(t.HTTP2xxPlanned),
			f2(t.RateAchieved), esc(t.RatePlanned), t.Survivors, t.Backends, latCell(t.Latency), reasonsCell(t.Reasons, true))
	}
	p.raw("</table>\n<details><summary>Per node</summary>\n<table id=\"node-table\">\n")
	p.raw("<tr><th>target</th><th>node</th><th>status</th><th>2xx counted / planned</th><th>rate / share</th><th>elapsed</th><th>p50 / p99 / max ms</th><th>reasons</th></tr>\n")
	for _, ht := range pg.Targets {
		t := ht.T
		for _, n := range t.Nodes {
			p.f(`<tr class="node" data-target="%s" data-node="%s" data-status="%s"><td>%s</td><td>%s (%s)</td><td class="%s">%s</td><td>%d / %s</td><td>%s / %s</td><td>%d ms</td><td>%s</td><td class="why">%s</td></tr>`+"\n",
				esc(t.Name), esc(n.Node), esc(n.Status), esc(t.Name), esc(n.Node), esc(n.Addr), okClass(n.Status), esc(n.Status),
				n.HTTP2xx, esc(n.Planned), f2(n.Rate), esc(n.Share), n.ElapsedMs, latCell(n.Latency), reasonsCell(n.Reasons, false))
		}
	}
	p.raw("</table>\n</details>\n")
	p.f("<details><summary>The gate's lines</summary>\n<pre id=\"gate-text\">%s</pre>\n</details>\n", esc(pg.Text))
	for _, n := range pg.Notes {
		p.f("<p class=\"note\">NOTE %s</p>\n", esc(n))
	}
	p.raw("</section>\n")
}

// renderLegend writes the colours and how to read the charts.
func (pg page) renderLegend(p *pageWriter) {
	p.raw(`<section id="legend">` + "\n" + `<p class="legend"><span><i style="background:#1f77b4"></i>2xx/s</span>`)
	for _, l := range pg.Legend {
		p.f(`<span><i style="background:%s"></i>%s</span>`, l.Color, esc(l.Class))
	}
	p.raw(`<span><i style="background:#2ca02c"></i>p50</span><span><i style="background:#ff7f0e"></i>p99</span></p>` + "\n")
	p.raw(`<details><summary>How to read the charts</summary>
<p>Per target, one chart per node, on scales shared by its nodes. Top: answered 2xx per second. Middle: the failures, stacked by class. Bottom: 2xx latency p50 and p99. Long runs are drawn in columns of several buckets: a column's rate is the mean, its failures the sum, its latency the highest p50 and p99 of its buckets. Hover a column for its exact numbers. Shaded bands are rolls (blue, labelled with the workload) and faults (red), the lighter part their settle window; click one to zoom to it. Red ticks are unattributed failures; their rows are red in the table under the charts.</p>
</details>
`)
	if !pg.HasLive {
		p.raw("<p class=\"note\">No live record was read: no timeline to draw.</p>\n")
	}
	p.raw("</section>\n")
}

// render writes one target's section: its charts, zoomed views and
// failure table.
func (ht htmlTarget) render(p *pageWriter) {
	t := ht.T
	p.f(`<section class="target" id="%s" data-target="%s" data-status="%s">`+"\n", ht.ID, esc(t.Name), esc(t.Status))
	p.f(`<h2><span class="%s">%s</span> %s</h2>`+"\n", esc(t.Status), esc(t.Status), esc(t.Name))
	charts := func(cs []htmlChart) {
		for _, c := range cs {
			p.f("<div class=\"node-name\">%s</div>\n%s\n", esc(c.Node), c.SVG)
		}
	}
	charts(ht.Charts)
	for _, z := range ht.Zooms {
		p.f(`<section class="zoom" id="%s"><h3>%s</h3>`+"\n", z.ID, esc(z.Title))
		charts(z.Charts)
		p.f(`<p><a href="#%s">back to the whole run</a></p></section>`+"\n", ht.ID)
	}
	open := ""
	if ht.Open {
		open = " open"
	}
	p.f(`<details class="samples"%s><summary>%d failure(s), %d unattributed</summary>`+"\n", open, ht.Failures, ht.Unattr)
	if len(ht.Samples) > 0 {
		p.raw("<table>\n<tr><th>time (UTC)</th><th>node</th><th>class</th><th>reason</th><th>status</th><th>replica</th><th>connection age</th><th>latency</th><th>due</th><th>fell in</th></tr>\n")
		for _, r := range ht.Samples {
			cls := "sample"
			if r.Unattributed {
				cls += " unattributed"
			}
			p.f(`<tr class="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>`+"\n",
				cls, esc(r.At), esc(r.Node), esc(r.Class), esc(r.Reason), esc(r.Status), esc(r.Replica), esc(r.ConnAge), esc(r.Latency), esc(r.Due), esc(r.In))
		}
		p.raw("</table>\n")
	}
	if ht.More > 0 {
		p.f("<p>and %d more in the live record</p>\n", ht.More)
	}
	p.raw("</details>\n</section>\n")
}
