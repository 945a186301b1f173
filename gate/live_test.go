package gate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/sortie-soak/sortie/record"
)

// liveRecordOf writes a live record of the reference soak at the
// engine's sample budget: 8 targets x 5 nodes x perSeries failure
// samples (resets on a few replicas), and a bucket that dropped some on
// every series.
func liveRecordOf(tb testing.TB, perSeries int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	if err := enc.Encode(record.HeadLine{Type: record.LineHead, RunID: "bench"}); err != nil {
		tb.Fatal(err)
	}
	for t := range 8 {
		for n := range 5 {
			s := record.Series{Label: fmt.Sprintf("soak/svc-%d", t+1), Backend: fmt.Sprintf("10.0.0.%d:8443", n+1),
				BackendName: fmt.Sprintf("node-%c", 'a'+n), Start: start, Width: time.Second}
			for i := range perSeries {
				due := int64(i) * int64(3*time.Second) / 2
				l := s.Sample(due, due+int64(time.Millisecond)+int64(i%7)*int64(time.Microsecond))
				l.Class, l.Reason, l.Phase = record.StreamResets, record.StreamResetsPrefix+record.ReasonConnectionTermination, record.ResetsBeforeHeaders
				l.Remote = fmt.Sprintf("10.1.%d.%d:18081", t, i%4)
				l.ConnAgeMs, l.ConnRequests = int64(i%1000), uint64(i%5000)
				if err := enc.Encode(l); err != nil {
					tb.Fatal(err)
				}
			}
			b := s.Bucket(uint32(perSeries * 3 / 2))
			b.Counters = map[string]uint64{record.StreamResets: 5}
			b.SamplesDropped = 5
			if err := enc.Encode(b); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return buf.Bytes()
}

// BenchmarkLiveFailuresHeap is what the gate keeps of a live record per
// failure sample, at 400,000 samples (8 targets x 5 nodes at the engine's
// budget of 10,000 each): the heap ReadLiveFailures' result holds, after
// a collection, divided by the samples (B/sample), and the heap still in
// use once the failures are set against a roll (B/sample-graded).
//
//	go test ./gate -run '^$' -bench LiveFailuresHeap -benchtime 1x
func BenchmarkLiveFailuresHeap(b *testing.B) {
	const perSeries = 10_000
	const n = 40 * perSeries
	live := liveRecordOf(b, perSeries)
	rolls, err := record.ParseRolls(bytes.NewReader([]byte(
		"ROLLED soak/deployment/svc-3 at=2026-03-02T10:00:50.000Z took=10s\n")))
	if err != nil {
		b.Fatal(err)
	}
	src := &record.Source{}
	var kept, graded float64
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		lf, err := ReadLiveFailures(bytes.NewReader(live))
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept = float64(after.HeapAlloc-before.HeapAlloc) / n
		if got := lf.sampleCount(); got != n {
			b.Fatalf("read %d samples, want %d", got, n)
		}
		v := Grade(Input{Source: src, Backends: 5, Rolls: &rolls, Live: lf, Settle: DefaultSettle})
		runtime.GC()
		runtime.ReadMemStats(&after)
		graded = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(lf)
		runtime.KeepAlive(v)
	}
	b.ReportMetric(kept, "B/sample")
	b.ReportMetric(graded, "B/sample-graded")
}

// TestLiveSampleKeepsEverything: what the gate keeps of a sample gives
// back every field it prints exactly as the line said, in the compact
// form and in the side map alike: due texts in and out of
// record.TimeFormat, times that do not parse, times outside Unix
// nanoseconds, statuses above 16 bits, connection ages outside 32 bits.
func TestLiveSampleKeepsEverything(t *testing.T) {
	lines := []record.SampleLine{
		{Label: "soak/svc-1", Backend: "10.0.0.1:8443", BackendName: "node-a", Due: "2026-03-02T10:00:01.000Z", Outcome: "2026-03-02T10:00:01.250Z",
			Class: record.StreamResets, Reason: record.StreamResetsPrefix + record.ReasonRemoteReset, Remote: "10.1.0.1:18081", ConnAgeMs: 4_000_000_000, LatencyNs: 250_000_001},
		{Label: "soak/svc-1", Backend: "10.0.0.1:8443", Due: "2026-03-02T12:00:01+02:00", Outcome: "2026-03-02T10:00:01.123456789Z", Class: record.HTTP5xx, Status: 503, ConnAgeMs: 12, LatencyNs: 123_456_789},
		{Label: "soak/svc-2", Backend: "10.0.0.2:8443", Due: "bad", Outcome: "", Class: record.HTTP4xx, Status: 70000, LatencyNs: -5},
		{Label: "soak/svc-2", Backend: "10.0.0.2:8443", Due: "9999-12-31T23:59:59.000Z", Outcome: "1000-01-01T00:00:00Z", Class: record.PoolOverflow, ConnAgeMs: 1 << 40},
		{Label: "soak/svc-2", Backend: "10.0.0.2:8443", Due: "", Outcome: "2026-03-02T10:00:02.000Z", Class: record.HTTP5xx, Status: -1, ConnAgeMs: -1},
	}
	var buf bytes.Buffer
	for _, l := range lines {
		l.Type = record.LineSample
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(append(b, '\n'))
	}
	lf, err := ReadLiveFailures(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if lf.sampleCount() != len(lines) || len(lf.series.vals) != 3 {
		t.Fatalf("kept %d samples of %d series, want %d of 3", lf.sampleCount(), len(lf.series.vals), len(lines))
	}
	for i, l := range lines {
		wantDue, derr := time.Parse(time.RFC3339, l.Due)
		wantOut, oerr := time.Parse(time.RFC3339, l.Outcome)
		due, out, dueOK, outOK := lf.times(i)
		if dueOK != (derr == nil) || outOK != (oerr == nil) || dueOK && !due.Equal(wantDue) || outOK && !out.Equal(wantOut) {
			t.Errorf("sample %d: times %v (%v), %v (%v); want %v, %v", i, due, dueOK, out, outOK, l.Due, l.Outcome)
		}
		v := lf.view(i)
		k := lf.series.at(lf.samples[i].series)
		got := []any{v.due, v.status, v.class, lf.class(i), v.reason, v.remote, v.connAgeMs, v.latencyNs, v.label, lf.str(k.backend), lf.str(k.name)}
		want := []any{l.Due, l.Status, l.Class, l.Class, l.Reason, l.Remote, l.ConnAgeMs, l.LatencyNs, l.Label, l.Backend, l.BackendName}
		for j := range got {
			if got[j] != want[j] {
				t.Errorf("sample %d: field %d = %v, want %v", i, j, got[j], want[j])
			}
		}
	}
	if unsafe.Sizeof(liveSample{}) != 48 {
		t.Errorf("a liveSample takes %d bytes, want 48", unsafe.Sizeof(liveSample{}))
	}
}

// TestHTMLSampleRowsSayTheLine: the HTML page's failure-sample table,
// drawn from the compact store, shows each sample line's status,
// replica, connection age, latency and due exactly as the line said.
func TestHTMLSampleRowsSayTheLine(t *testing.T) {
	dir := filepath.Join("testdata", "attrib")
	page := filepath.Join(t.TempDir(), "report.html")
	runCase(t, dir, "--per-node", "--html", page)
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	live, err := os.ReadFile(filepath.Join(dir, DirLive))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range bytes.Split(live, []byte("\n")) {
		if !bytes.Contains(line, []byte(`"type":"sample"`)) {
			continue
		}
		var l record.SampleLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		status, age := "", ""
		if l.Status != 0 {
			status = strconv.Itoa(l.Status)
		}
		if l.Remote != "" {
			age = strconv.FormatInt(l.ConnAgeMs, 10) + " ms"
		}
		cells := fmt.Sprintf("<td>%s</td><td>%s</td><td>%s</td><td>%s ms</td><td>%s</td>",
			esc(status), esc(l.Remote), esc(age), fmtNum(float64(l.LatencyNs)/1e6), esc(l.Due))
		if !bytes.Contains(b, []byte(cells)) {
			t.Errorf("no sample row with %s", cells)
		}
		n++
	}
	if n == 0 {
		t.Fatal("the fixture has no sample line")
	}
}
