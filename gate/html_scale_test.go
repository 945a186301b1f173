package gate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// The reference soak's shape: 8 targets x 5 nodes x 8 h 30 min at 1 s.
const (
	refTargets = 8
	refNodes   = 5
	refBuckets = 8*3600 + 30*60
)

// synthLive is a live record of the reference shape, generated on the fly
// as the driver would append it (every series' bucket i before any bucket
// i+1), so the benchmark reads it without a 400 MB file on disk. Every
// 997th bucket of a series holds a 5xx and a reset with their samples.
type synthLive struct {
	start   time.Time
	i, s    int
	buf     bytes.Buffer
	head    bool
	buckets int
}

func newSynthLive(start time.Time, buckets int) *synthLive {
	return &synthLive{start: start, buckets: buckets}
}

func (g *synthLive) Read(p []byte) (int, error) {
	for g.buf.Len() < len(p) && g.i < g.buckets {
		g.line()
	}
	if g.buf.Len() == 0 {
		return 0, io.EOF
	}
	return g.buf.Read(p)
}

func (g *synthLive) line() {
	if !g.head {
		g.head = true
		g.buf.WriteString(`{"type":"head","run_id":"synthetic"}` + "\n")
	}
	t, n := g.s/refNodes, g.s%refNodes
	label := fmt.Sprintf("soak/svc-%d", t+1)
	backend := fmt.Sprintf("10.0.0.%d:8443", n+1)
	start := g.start.Add(time.Duration(g.i) * time.Second)
	ok, fail := 60, g.i%997 == 0 && n == t%refNodes
	counters := `"benchmark.http_2xx":60`
	if fail {
		ok = 58
		counters = `"benchmark.http_2xx":58,"benchmark.http_5xx":1,"benchmark.stream_resets":1,"benchmark.stream_resets_remote_reset":1,"benchmark.stream_resets_before_headers":1`
	}
	fmt.Fprintf(&g.buf, `{"type":"bucket","label":%q,"backend":%q,"backend_name":"node-%c","index":%d,"start":%q,"offset_ms":%d,"width_ms":1000,"counters":{%s},"latency":{"count":%d,"p50":%d,"p99":%d,"max":%d}}`+"\n",
		label, backend, 'a'+n, g.i, start.UTC().Format(record.TimeFormat), g.i*1000, counters, ok, 1200000+(g.i%60)*1000, 4500000+(g.i%300)*10000, 9000000)
	if fail {
		for _, c := range []string{`"class":"benchmark.http_5xx","status":503`, `"class":"benchmark.stream_resets","reason":"benchmark.stream_resets_remote_reset","phase":"benchmark.stream_resets_before_headers"`} {
			at := start.Add(300 * time.Millisecond).UTC().Format(record.TimeFormat)
			fmt.Fprintf(&g.buf, `{"type":"sample","label":%q,"backend":%q,"backend_name":"node-%c","bucket":%d,"due":%q,"due_offset_ms":%d,"outcome":%q,"outcome_offset_ms":%d,"latency_ns":300000000,%s,"remote":"10.1.0.7:8080","conn_age_ms":51000,"conn_requests":3000}`+"\n",
				label, backend, 'a'+n, g.i, at, g.i*1000+300, at, g.i*1000+300, c)
		}
	}
	g.s++
	if g.s == refTargets*refNodes {
		g.s, g.i = 0, g.i+1
	}
}

// refStart is when the synthetic reference soak starts.
var refStart = time.Date(2026, 3, 2, 22, 0, 0, 0, time.UTC)

// writeRefRun writes a run directory of the reference soak's shape:
// report.json, engines.tsv, rolls.log (35 rolls, in turn over the
// targets) and, when live is true, a live.jsonl of every bucket (some
// 340 MB).
func writeRefRun(tb testing.TB, dir string, live bool) {
	tb.Helper()
	rep := &record.Report{}
	var engines, rolls strings.Builder
	for n := range refNodes {
		fmt.Fprintf(&engines, "10.0.0.%d:8443 node-%c\n", n+1, 'a'+n)
	}
	const rps = 60
	for t := range refTargets {
		e := record.Execution{Label: fmt.Sprintf("soak/svc-%d", t+1), Scenario: "soak", Pool: "nodes", Rate: rps, PerBackend: true,
			DurationMs: refBuckets * 1000, ElapsedMs: refBuckets*1000 + 700, StartedAt: refStart.Format(record.TimeFormat),
			EndedAt: refStart.Add(refBuckets*time.Second + 700*time.Millisecond).Format(record.TimeFormat)}
		for n := range refNodes {
			addr := fmt.Sprintf("10.0.0.%d:8443", n+1)
			e.Backends = append(e.Backends, addr)
			e.Results = append(e.Results, record.BackendResult{Backend: addr, BackendName: fmt.Sprintf("node-%c", 'a'+n),
				ElapsedMs: refBuckets * 1000, StartedAt: refStart.Format(record.TimeFormat), Planned: rps * refBuckets,
				Counters: map[string]uint64{record.HTTP2xx: rps * refBuckets}})
		}
		rep.Executions = append(rep.Executions, e)
	}
	for i := range 35 {
		at := refStart.Add(time.Duration(i+1) * refBuckets * time.Second / 36)
		r := record.Roll{Ref: fmt.Sprintf("soak/deployment/svc-%d", i%refTargets+1), Begin: at, Took: 40 * time.Second, End: at.Add(40 * time.Second)}
		fmt.Fprintln(&rolls, r.String())
	}
	if err := record.WriteReport(filepath.Join(dir, DirReport), rep); err != nil {
		tb.Fatal(err)
	}
	for name, body := range map[string]string{DirEngines: engines.String(), DirRolls: rolls.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	if !live {
		return
	}
	f, err := os.Create(filepath.Join(dir, DirLive))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(f, newSynthLive(refStart, refBuckets)); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkHTMLReferenceSoak grades the reference soak (8 targets x 5
// nodes x 8 h 30 min at 1 s buckets, a live record of some 340 MB) with
// and without --html, side by side: the difference is what the page
// costs. It reports the page's size (page-MB) and, of the --html run, the
// time to read the live record with its timeline (read-s) and to render
// and write the page (render-s).
//
//	go test -run '^$' -bench HTMLReferenceSoak -benchtime 1x ./gate/
func BenchmarkHTMLReferenceSoak(b *testing.B) {
	dir := b.TempDir()
	writeRefRun(b, dir, true)
	args := []string{"--dir", dir, "--per-node"}
	b.Run("gate", func(b *testing.B) {
		for b.Loop() {
			if err := Run(context.Background(), args, io.Discard, io.Discard); cli.Code(err) != 0 {
				b.Fatalf("gate: %v", err)
			}
		}
	})
	b.Run("gate+html", func(b *testing.B) {
		page := filepath.Join(b.TempDir(), "report.html")
		o := DefaultOptions()
		o.Dir, o.PerNode, o.HTML = dir, true, page
		o = o.withDir()
		var read, render time.Duration
		for b.Loop() {
			t0 := time.Now()
			in, err := Load(context.Background(), o)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			v := Grade(in)
			if err := writeHTMLFile(page, in, v); err != nil {
				b.Fatal(err)
			}
			read, render = read+t1.Sub(t0), render+time.Since(t1)
		}
		st, err := os.Stat(page)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.Size())/1e6, "page-MB")
		b.ReportMetric(read.Seconds()/float64(b.N), "read-s")
		b.ReportMetric(render.Seconds()/float64(b.N), "render-s")
	})
}

// TestIntegrationHTMLReferenceShapeSize renders the page of the reference soak's
// shape, its timeline built in memory rather than read (the benchmark
// above reads it), and holds the page to 15 MB with every chart drawn.
func TestIntegrationHTMLReferenceShapeSize(t *testing.T) {
	if testing.Short() {
		t.Skip("renders 1.2 million buckets")
	}
	dir := t.TempDir()
	writeRefRun(t, dir, false)
	o := DefaultOptions()
	o.Dir, o.PerNode = dir, true
	o = o.withDir()
	in, err := Load(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	in.Live = newLiveFailures()
	in.Live.Timeline = &Timeline{}
	sc := bufio.NewScanner(newSynthLive(refStart, refBuckets))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte(`{"type":"bucket"`)):
			var bl record.BucketLine
			if err := json.Unmarshal(line, &bl); err != nil {
				t.Fatal(err)
			}
			if !in.Live.Timeline.add(&bl) {
				t.Fatalf("bucket not placed: %s", line)
			}
		case bytes.HasPrefix(line, []byte(`{"type":"sample"`)):
			var sl record.SampleLine
			if err := json.Unmarshal(line, &sl); err != nil {
				t.Fatal(err)
			}
			in.Live.addSample(&sl)
		}
	}
	v := Grade(in)
	var page bytes.Buffer
	if err := WriteHTML(&page, in, v, ""); err != nil {
		t.Fatal(err)
	}
	const limit = 15 << 20
	if page.Len() > limit {
		t.Errorf("the page is %d bytes, over %d", page.Len(), limit)
	}
	s := page.String()
	if n := strings.Count(s, `<svg class="timeline"`); n < refTargets*refNodes {
		t.Errorf("%d charts, want at least %d", n, refTargets*refNodes)
	}
	if got := strings.Count(s, `<tr class="sample`); got != in.Live.sampleCount() {
		t.Errorf("%d sample rows, want %d", got, in.Live.sampleCount())
	}
	t.Logf("page %d bytes for %d series of %d buckets, %d samples", page.Len(), len(in.Live.Timeline.Series), refBuckets, in.Live.sampleCount())
}
