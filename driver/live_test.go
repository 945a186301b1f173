package driver

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

const killPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: mesh
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 20, duration: {{.Duration}}, per_backend: true, open_loop: true}
    targets:
      - {name: svc-1, url: "{{.URL}}", weight: 1}
      - {name: svc-2, url: "{{.URL}}", weight: 1}
`

func TestLiveRecordPath(t *testing.T) {
	for _, tt := range []struct{ flag, stream, want string }{
		{"", "", ""},
		{"", "out/stream.jsonl", "out/stream.live.jsonl"},
		{"", "stream", "stream.live.jsonl"},
		{"", "a.b/s.json", "a.b/s.live.jsonl"},
		{"-", "s.jsonl", ""},
		{"off", "s.jsonl", ""},
		{"x.jsonl", "s.jsonl", "x.jsonl"},
		{"x.jsonl", "", "x.jsonl"},
	} {
		if got := liveRecordPath(tt.flag, tt.stream); got != tt.want {
			t.Errorf("liveRecordPath(%q, %q) = %q, want %q", tt.flag, tt.stream, got, tt.want)
		}
	}
}

// TestIntegrationEngineKilledKeepsCounts kills one engine process with
// SIGKILL mid-run: the report keeps what its buckets had counted, as a
// partial result up to at most 2 s before the kill, conserving planned
// over the part it covers, next to its lost entry.
func TestIntegrationEngineKilledKeepsCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes")
	}
	tg := newTarget(t)
	victim, p := startEngineProc(t, "--backend-name", "node-b")
	survivor := startEngine(t, "node-a", 0)
	planPath := writePlan(t, killPlan, planData{Backends: []string{victim, survivor}, URL: tg.URL, Duration: "8s"})
	done := runDriverAsync(t, testOptions(), planPath)
	// Each engine at 20 rps split over two targets: 40 requests a second
	// in all. Kill the victim some 4 s in.
	waitServed(t, tg, 160, 30*time.Second)
	killed := time.Now()
	p.signal(t, syscall.SIGKILL)
	res := <-done
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		e := res.execution(t, label)
		if be, ok := backendErrorOf(e, victim); !ok || be.Kind != record.KindLost {
			t.Errorf("%s: backend error of the killed engine %+v, want lost", label, be)
		}
		br, ok := backendOf(t, e, victim)
		if !ok || !br.Partial || br.BackendName != "node-b" {
			t.Fatalf("%s: result of the killed engine %+v, want a partial one of node-b", label, br)
		}
		until, err := time.Parse(time.RFC3339Nano, br.CountedUntil)
		if err != nil {
			t.Fatalf("%s: counted_until %q: %v", label, br.CountedUntil, err)
		}
		if lag := killed.Sub(until); lag > 2*time.Second || lag < 0 {
			t.Errorf("%s: counted until %v, %v before the kill; want within 2s before it", label, until, lag)
		}
		if err := br.Conserves(); err != nil || br.Planned == 0 || br.Planned != br.Counters[record.HTTP2xx]+br.Unsent {
			t.Errorf("%s: partial result %+v does not conserve: %v", label, br, err)
		}
		// Its counts are those of the buckets the live record holds for
		// it, up to counted_until.
		var prefix []record.BucketLine
		for _, l := range record.BucketsBySeries(res.live.Buckets)[record.SeriesKey{Label: label, Backend: victim}] {
			if l.Index < uint32(br.ElapsedMs/l.WidthMs) {
				prefix = append(prefix, l)
			}
		}
		if err := record.CheckTimeline(prefix, br); err != nil {
			t.Errorf("%s: %v", label, err)
		}
		assertWhole(t, e, survivor, 80)
	}
	checkTimelines(t, res)
}

// TestIntegrationDriverKilledLiveRecord kills the driver process with
// SIGKILL about 10 s into a 20 s run: the live record on disk parses, and
// holds for every execution and backend its buckets from 0 on, with no
// gap, up to at most 2 s before the kill.
func TestIntegrationDriverKilledLiveRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for 10 seconds")
	}
	tg := newTarget(t)
	a, _ := startEngineProc(t, "--backend-name", "node-a")
	b, _ := startEngineProc(t, "--backend-name", "node-b")
	planPath := writePlan(t, killPlan, planData{Backends: []string{a, b}, URL: tg.URL, Duration: "20s"})
	dir := t.TempDir()
	live := filepath.Join(dir, "run.live.jsonl")
	d := start(t, nil, binary(t, "sortie"), "run", planPath, "--results-stream", filepath.Join(dir, "run.jsonl"), "--status", "off", "--progress", "0")
	// Executions start 2 s after dispatch (the default start lead); the
	// first Started lines are in the live record's bucket starts.
	// 40 requests a second in all: kill the driver some 10 s in.
	waitServed(t, tg, 10*40, 60*time.Second)
	killed := time.Now()
	d.signal(t, syscall.SIGKILL)
	d.wait(t, 10*time.Second)

	f, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lv, err := record.ReadLive(f)
	if err != nil {
		t.Fatalf("read live record: %v", err)
	}
	if len(lv.Heads) != 1 || lv.Heads[0].MadeBy == nil || len(lv.Skipped) > 1 {
		t.Errorf("heads %+v, skipped lines %v; want one head and at most a torn last line", lv.Heads, lv.Skipped)
	}
	if st, err := f.Stat(); err == nil && len(lv.Buckets) > 0 {
		t.Logf("live record: %d bytes, %d bucket and %d sample lines", st.Size(), len(lv.Buckets), len(lv.Samples))
	}
	series := record.BucketsBySeries(lv.Buckets)
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		for _, backend := range []string{a, b} {
			lines := series[record.SeriesKey{Label: label, Backend: backend}]
			if len(lines) == 0 {
				t.Errorf("%s on %s: no bucket on disk", label, backend)
				continue
			}
			idx := make([]uint32, 0, len(lines))
			for _, l := range lines {
				idx = append(idx, l.Index)
			}
			slices.Sort(idx)
			for i, k := range idx {
				if k != uint32(i) {
					t.Fatalf("%s on %s: bucket indexes %v, want 0 to %d without a gap", label, backend, idx, len(idx)-1)
				}
			}
			last := lines[0]
			for _, l := range lines {
				if l.Index > last.Index {
					last = l
				}
			}
			start, err := time.Parse(time.RFC3339Nano, last.Start)
			if err != nil {
				t.Fatalf("bucket start %q: %v", last.Start, err)
			}
			end := start.Add(time.Duration(last.WidthMs) * time.Millisecond)
			if lag := killed.Sub(end); lag > 2*time.Second {
				t.Errorf("%s on %s: buckets on disk end at %v, %v before the kill; want within 2s", label, backend, end, lag)
			}
			t.Logf("%s on %s: %d buckets on disk, ending %v before the kill", label, backend, len(idx), killed.Sub(end))
		}
	}
}

// TestLiveRecordBatches: lines queued while the flusher waits between
// batches are written, in order, when the record is closed, however long
// the wait; lines after the close are dropped.
func TestLiveRecordBatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.jsonl")
	w, err := record.OpenLive(path)
	if err != nil {
		t.Fatal(err)
	}
	s := record.Series{Label: "s/t", Backend: "b", Start: time.Unix(0, 0), Width: time.Second}
	l := newLiveRecord(w, slog.New(slog.DiscardHandler), time.Hour)
	for i := range uint32(5) {
		l.append([]any{s.Bucket(2 * i), s.Bucket(2*i + 1)})
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	l.append([]any{s.Bucket(99)})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lv, err := record.ReadLive(f)
	if err != nil {
		t.Fatal(err)
	}
	var idx []uint32
	for _, b := range lv.Buckets {
		idx = append(idx, b.Index)
	}
	if want := []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(idx, want) || len(lv.Skipped) != 0 {
		t.Errorf("buckets %v (skipped %v), want %v", idx, lv.Skipped, want)
	}
}

// TestTimelinePartial: buckets that come out of order wait until the
// prefix reaches them; the partial result sums the contiguous prefix only,
// ends at its last bucket, and plans what the pacer had due before then,
// so it conserves.
func TestTimelinePartial(t *testing.T) {
	req := &enginev1.ExecuteRequest{Rate: 10, Workers: 2, Duration: durationpb.New(10 * time.Second)}
	c := &call{ex: &execRun{label: "s/t", requests: map[string]*enginev1.ExecuteRequest{"b": req}}, backend: "b", backendName: "node-b"}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, ok := c.tl.partial(c); ok {
		t.Fatal("a partial result before Started")
	}
	c.tl.start(seriesOf(c, &enginev1.Started{StartTime: timestamppb.New(start), BucketWidth: durationpb.New(time.Second)}))
	bucket := func(i uint32, ok, resets, unsent uint64) *enginev1.Bucket {
		return &enginev1.Bucket{Index: i, Counters: map[string]uint64{record.HTTP2xx: ok, record.StreamResets: resets, record.HTTP5xx: 0}, Unsent: unsent}
	}
	// 20 requests due per second over both workers; bucket 2 is ahead of
	// bucket 1, bucket 4 beyond a gap at 3.
	lines := c.tl.progress(&enginev1.Progress{Buckets: []*enginev1.Bucket{bucket(0, 20, 0, 0), bucket(2, 18, 2, 0), bucket(4, 20, 0, 0)}})
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	if br, _ := c.tl.partial(c); br.CountedUntil != "2026-01-02T03:04:06.000Z" || br.Planned != 20 || br.Counters[record.HTTP2xx] != 20 {
		t.Errorf("after bucket 0 alone: %+v", br)
	}
	c.tl.progress(&enginev1.Progress{Buckets: []*enginev1.Bucket{bucket(1, 15, 0, 5)}})
	br, ok := c.tl.partial(c)
	want := record.BackendResult{
		Backend: "b", BackendName: "node-b", ElapsedMs: 3000, StartedAt: "2026-01-02T03:04:05.000Z",
		Planned: 60, Unsent: 5, Counters: map[string]uint64{record.HTTP2xx: 53, record.StreamResets: 2},
		Partial: true, CountedUntil: "2026-01-02T03:04:08.000Z",
	}
	if d := cmp.Diff(want, br); !ok || d != "" {
		t.Errorf("partial result (-want +got):\n%s", d)
	}
	if err := br.Conserves(); err != nil {
		t.Error(err)
	}
}
