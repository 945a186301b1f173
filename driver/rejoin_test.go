package driver

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sortie-soak/sortie/engine"
	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

// Where an engine that came back takes up the schedule: the start lead
// after the moment it was found, rounded up to a bucket edge, on the
// stage's own start time.
func TestRejoinOffset(t *testing.T) {
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		after time.Duration // of the fake clock past the start
		lead  time.Duration
		width time.Duration
		want  time.Duration
	}{
		{"mid-bucket", 13*time.Second + 200*time.Millisecond, 500 * time.Millisecond, time.Second, 14 * time.Second},
		{"lead crosses an edge", 13*time.Second + 600*time.Millisecond, 500 * time.Millisecond, time.Second, 15 * time.Second},
		{"on an edge", 13*time.Second + 500*time.Millisecond, 500 * time.Millisecond, time.Second, 14 * time.Second},
		{"narrow buckets", 13*time.Second + 10*time.Millisecond, 400 * time.Millisecond, 100 * time.Millisecond, 13500 * time.Millisecond},
		{"no width known", 13 * time.Second, 500 * time.Millisecond, 0, 13500 * time.Millisecond},
		{"before the start", -2 * time.Second, 500 * time.Millisecond, time.Second, 0},
	}
	for _, tt := range tests {
		// The driver reads its time from its clock: a fake one here,
		// moved to the moment the engine was found.
		clk := clock.NewFake(start.Add(min(tt.after, 0)))
		clk.Advance(max(tt.after, 0))
		if got := rejoinOffset(start, clk.Now(), tt.lead, tt.width); got != tt.want {
			t.Errorf("%s: rejoinOffset = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// rejoinRequest is one backend's request of 30 s at 15/s per worker, two
// workers: 900 planned.
func rejoinRequest() *enginev1.ExecuteRequest {
	return &enginev1.ExecuteRequest{Rate: 15, Workers: 2, Duration: durationpb.New(30 * time.Second)}
}

// rejoinCall is node-b's call of rejoinRequest at 127.0.0.12:8443, its
// timeline started on 1 s buckets at 10:00:00.
func rejoinCall() *call {
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	ex := &execRun{label: "soak/svc-1", requests: map[string]*enginev1.ExecuteRequest{"127.0.0.12:8443": rejoinRequest()},
		planned: map[string]uint64{"127.0.0.12:8443": 900}}
	c := &call{ex: ex, backend: "127.0.0.12:8443", backendName: "node-b", startAt: start, state: answered}
	c.tl.start(record.Series{Label: ex.label, Backend: c.backend, BackendName: "node-b", Start: start, Width: time.Second})
	return c
}

// The node's one result after a rejoin: what the lost engine counted
// (buckets 0..k-1), the gap from the end of those buckets to the offset,
// and what the engine that came back counted; planned is the whole
// share, and the law holds with the gap's count in it.
func TestRejoinedResult(t *testing.T) {
	c := rejoinCall()
	series := c.tl.series
	// The lost engine sent buckets 0..7 whole, and 9 (8 was in flight
	// when it died): the prefix ends at 8 s.
	for _, i := range []uint32{0, 1, 2, 3, 4, 5, 6, 7, 9} {
		c.tl.take(&enginev1.Bucket{Index: i, Counters: map[string]uint64{record.HTTP2xx: 30}})
	}
	seg := rejoinAt(c, c, "127.0.0.12:8443", 14*time.Second)
	// Requests due from 14 s to 30 s: 16 s x 15/s x 2 workers.
	seg.result = &enginev1.Result{Planned: 480, Counters: map[string]uint64{record.HTTP2xx: 480},
		Elapsed: durationpb.New(29967 * time.Millisecond)}
	c.result = seg.result

	br, ok := (&runner{}).rejoinedResult(c)
	if !ok {
		t.Fatal("no result")
	}
	want := record.Gap{From: "2026-03-02T10:00:08.000Z", To: "2026-03-02T10:00:14.000Z", Count: 180, Why: record.GapRestarted, Backend: "127.0.0.12:8443"}
	if len(br.GapUnsent) != 1 || br.GapUnsent[0] != want {
		t.Fatalf("gap %+v, want %+v", br.GapUnsent, want)
	}
	if br.Planned != 900 || br.Counters[record.HTTP2xx] != 240+480 || br.Partial || br.ElapsedMs != 29967 {
		t.Errorf("planned %d, 2xx %d, partial %v, elapsed %d; want 900, 720, false, 29967", br.Planned, br.Counters[record.HTTP2xx], br.Partial, br.ElapsedMs)
	}
	if err := br.Conserves(); err != nil {
		t.Errorf("the law: %v", err)
	}

	// Lost again after 20 s: the second engine's buckets 0..19 count
	// (those before 14 s hold nothing), planned is what was due before
	// 20 s, and the law still holds for that part.
	c.state, c.result, seg.result = lost, nil, nil
	seg.tl.start(series)
	for i := uint32(0); i < 20; i++ {
		n := uint64(0)
		if i >= 14 {
			n = 30
		}
		seg.tl.take(&enginev1.Bucket{Index: i, Counters: map[string]uint64{record.HTTP2xx: n}})
	}
	br, _ = (&runner{}).rejoinedResult(c)
	if !br.Partial || br.CountedUntil != "2026-03-02T10:00:20.000Z" || br.Planned != 600 || br.Counters[record.HTTP2xx] != 240+180 {
		t.Errorf("lost again: partial %v until %s, planned %d, 2xx %d; want true, 10:00:20, 600, 420", br.Partial, br.CountedUntil, br.Planned, br.Counters[record.HTTP2xx])
	}
	if err := br.Conserves(); err != nil {
		t.Errorf("lost again, the law: %v", err)
	}
}

// rejoinAt is the segment an engine of c's node at addr takes up at
// offset after prev (c, or c's last segment) was lost, with what prev
// counted and the gap, as tryRejoin makes it; c holds it.
func rejoinAt(c, prev *call, addr string, offset time.Duration) *call {
	seg := &call{ex: c.ex, backend: c.backend, addr: addr, backendName: c.backendName, offset: offset, startAt: c.startAt, parent: c, joined: true}
	seg.tl.quietBefore = offset
	seg.before, seg.gap = segmentGap(c, prev, offset)
	seg.gap.Backend = addr
	c.segs, c.seg = append(c.segs, seg), seg
	return seg
}

// A node whose engine came back twice: each engine's part, each gap, and
// the last engine's part sum to the planned share, the law holding with
// both gaps in it; an engine stopped (its Result cancelled) in the middle
// counts what was due before it stopped.
func TestRejoinedTwice(t *testing.T) {
	c := rejoinCall()
	// The first engine counted 0..5 s, and was killed.
	for i := uint32(0); i < 6; i++ {
		c.tl.take(&enginev1.Bucket{Index: i, Counters: map[string]uint64{record.HTTP2xx: 30}})
	}
	// The second took up at 9 s and was stopped at 18 s: 9 s x 30 sent
	// and answered, the rest of its part unsent.
	s1 := rejoinAt(c, c, "127.0.0.12:8443", 9*time.Second)
	s1.first = &enginev1.Result{Planned: 630, Unsent: 360, Cancelled: true, Counters: map[string]uint64{record.HTTP2xx: 270}}
	// The third took up at 22 s and ran to the end: 8 s x 30.
	s2 := rejoinAt(c, s1, "127.0.0.12:8443", 22*time.Second)
	s2.result = &enginev1.Result{Planned: 240, Counters: map[string]uint64{record.HTTP2xx: 240}, Elapsed: durationpb.New(29967 * time.Millisecond)}
	c.result = s2.result

	br, ok := (&runner{}).rejoinedResult(c)
	if !ok {
		t.Fatal("no result")
	}
	want := []record.Gap{
		{From: "2026-03-02T10:00:06.000Z", To: "2026-03-02T10:00:09.000Z", Count: 90, Why: record.GapRestarted, Backend: "127.0.0.12:8443"},
		{From: "2026-03-02T10:00:18.000Z", To: "2026-03-02T10:00:22.000Z", Count: 120, Why: record.GapRestarted, Backend: "127.0.0.12:8443"},
	}
	if len(br.GapUnsent) != 2 || br.GapUnsent[0] != want[0] || br.GapUnsent[1] != want[1] {
		t.Fatalf("gaps %+v, want %+v", br.GapUnsent, want)
	}
	if br.Planned != 900 || br.Counters[record.HTTP2xx] != 180+270+240 || br.Unsent != 0 || br.Partial {
		t.Errorf("planned %d, 2xx %d, unsent %d, partial %v; want 900, 690, 0, false", br.Planned, br.Counters[record.HTTP2xx], br.Unsent, br.Partial)
	}
	if err := br.Conserves(); err != nil {
		t.Errorf("the law: %v", err)
	}
}

// The bound on rejoins: a node that came back MaxRejoins times in one
// execution is not waited for again; below it, it is.
func TestRejoinBound(t *testing.T) {
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	ex := &execRun{label: "soak/svc-1", requests: map[string]*enginev1.ExecuteRequest{"b:1": rejoinRequest()}}
	var sink strings.Builder
	r := &runner{opts: testOptions(), lines: &lineWriter{w: &sink}}
	r.opts.MaxRejoins = 2
	c := &call{ex: ex, backend: "b:1", backendName: "node-b", startAt: start, started: true}
	now := start.Add(10 * time.Second)
	for n := 0; n < 2; n++ {
		if !r.rejoinable(c, now) {
			t.Fatalf("after %d rejoins: not rejoinable, want rejoinable below the bound of 2", n)
		}
		c.segs = append(c.segs, &call{})
	}
	if r.rejoinable(c, now) || !strings.Contains(sink.String(), "came back 2 times already") {
		t.Errorf("after 2 rejoins: rejoinable, or not said why not (%q)", sink.String())
	}
}

// An engine that cancelled the execution itself (stopped: a pod deleted)
// counted everything due before it stopped; the gap runs from its first
// unsent request to the offset, and the node's result is whole.
func TestRejoinedAfterEngineCancel(t *testing.T) {
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	req := rejoinRequest()
	ex := &execRun{label: "soak/svc-1", requests: map[string]*enginev1.ExecuteRequest{"10.0.2.6:8443": req},
		planned: map[string]uint64{"10.0.2.6:8443": 900}}
	c := &call{ex: ex, backend: "10.0.2.6:8443", backendName: "node-b", startAt: start, state: answered}
	// Stopped 8 s in: 120 requests a worker sent and answered, the rest
	// unsent.
	c.first = &enginev1.Result{Planned: 900, Unsent: 660, Cancelled: true, Counters: map[string]uint64{record.HTTP2xx: 240}}
	seg := rejoinAt(c, c, "10.0.3.7:8443", 14*time.Second)
	seg.result = &enginev1.Result{Planned: 480, Counters: map[string]uint64{record.HTTP2xx: 480}, Elapsed: durationpb.New(29967 * time.Millisecond)}
	c.result = seg.result
	br, ok := (&runner{}).rejoinedResult(c)
	want := record.Gap{From: "2026-03-02T10:00:08.000Z", To: "2026-03-02T10:00:14.000Z", Count: 180, Why: record.GapRestarted, Backend: "10.0.3.7:8443"}
	if !ok || len(br.GapUnsent) != 1 || br.GapUnsent[0] != want {
		t.Fatalf("gap %+v, want %+v", br.GapUnsent, want)
	}
	if br.Planned != 900 || br.Unsent != 0 || br.Cancelled || br.Counters[record.HTTP2xx] != 720 {
		t.Errorf("planned %d, unsent %d, cancelled %v, 2xx %d; want 900, 0, false, 720", br.Planned, br.Unsent, br.Cancelled, br.Counters[record.HTTP2xx])
	}
	if err := br.Conserves(); err != nil {
		t.Errorf("the law: %v", err)
	}
}

// A gap counts the requests of every worker due in it, by the engine's
// own schedule: a ramp too.
func TestNodeGapRamp(t *testing.T) {
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	// 0 -> 20/s over 10 s, then 20/s to 30 s: 100 + 400 requests a worker.
	req := &enginev1.ExecuteRequest{Rate: 20, Workers: 3, Duration: durationpb.New(30 * time.Second), Ramp: durationpb.New(10 * time.Second)}
	tests := []struct {
		until, offset time.Duration
		want          uint64
	}{
		{0, 10 * time.Second, 3 * 100},
		{4 * time.Second, 6 * time.Second, 3 * (36 - 16)},
		{8 * time.Second, 14 * time.Second, 3 * (180 - 64)},
		{12 * time.Second, 12 * time.Second, 0},
	}
	for _, tt := range tests {
		if g := nodeGap(req, start, tt.until, tt.offset); g.Count != tt.want {
			t.Errorf("gap %v..%v: %d requests, want %d", tt.until, tt.offset, g.Count, tt.want)
		}
	}
}

// engineAt serves an engine of options o on addr ("127.0.0.1:0" for any
// port) and returns it with the address it serves on.
func engineAt(t *testing.T, o engine.Options, addr string) (*engine.Engine, string) {
	t.Helper()
	if o.TLS == nil {
		o.TLS = testTLS().server
	}
	e, err := engine.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go e.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
	})
	return e, ln.Addr().String()
}

// TestIntegrationEngineStoppedRejoins: node-b's engine is stopped mid-run
// the way Kubernetes stops a pod it deletes (SIGTERM: the engine cancels
// its executions and sends their Results), and a new engine of node-b
// comes up at its address. The driver gives it the rest of each
// execution's schedule: node-b's result holds what the stopped engine
// counted, the gap, and what the new one counted, planned whole; node-a
// is whole.
func TestIntegrationEngineStoppedRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 6 s load")
	}
	tg := newTarget(t)
	o := engine.Options{BackendName: "node-b", Version: "test"}
	old, addr := engineAt(t, o, "127.0.0.1:0")
	survivor := startEngine(t, "node-a", 0)
	plan := strings.ReplaceAll(twoTargetPlan, "duration: 3s", "duration: 6s")
	planPath := writePlan(t, plan, planData{Backends: []string{survivor, addr}, URL: tg.URL})
	done := runDriverAsync(t, testOptions(), planPath)
	waitServed(t, tg, 60, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	engineAt(t, o, addr)
	res := <-done
	if res.code != 1 {
		t.Fatalf("exit %d, want 1: a node with a gap fails", res.code)
	}
	if !strings.Contains(res.stderr, "rejoined mesh/svc-1 on "+addr+" (node-b)") {
		t.Errorf("the driver did not say node-b rejoined")
	}
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		e := res.execution(t, label)
		assertWhole(t, e, survivor, 60)
		br, ok := backendOf(t, e, addr)
		if !ok || len(br.GapUnsent) != 1 || br.Partial || br.Planned != 60 {
			t.Fatalf("%s on node-b: %+v, want one whole result with one gap", label, br)
		}
		g := br.GapUnsent[0]
		var failures uint64
		for _, k := range record.FailureClasses {
			failures += br.Counters[k]
		}
		if err := br.Conserves(); err != nil || failures != 0 || br.Unsent != 0 || br.Counters[record.HTTP2xx]+g.Count != 60 || g.Count == 0 {
			t.Errorf("%s on node-b: 2xx %d + gap %d of 60, unsent %d, failures %d: %v", label, br.Counters[record.HTTP2xx], g.Count, br.Unsent, failures, err)
		}
		if _, bad := backendErrorOf(e, addr); bad || e.Pass {
			t.Errorf("%s: node-b has a backend error, or the execution passed", label)
		}
	}
}

// A resume after a rejoin reads the live record for the engine that came
// back last: it passes over as many lines as the rejoin says the engines
// before it wrote (a stopped engine's buckets past its stop share indexes
// with the new engine's), starts the prefix at the new engine's offset,
// and asks Attach for the buckets after its empty ones and its lines.
func TestLoadResumedAfterRejoin(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.jsonl")
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	s := record.Series{Label: "mesh/svc-1", Backend: "127.0.0.1:9", BackendName: "node-b", Start: start, Width: time.Second}
	bucket := func(i uint32, ok, unsent uint64) record.LiveEntry {
		l := s.Bucket(i)
		l.Counters, l.Unsent = map[string]uint64{record.HTTP2xx: ok}, unsent
		return record.BucketEntry(s, l)
	}
	sample := func(due time.Duration) record.LiveEntry {
		return record.SampleEntry(s, int64(due), int64(due+time.Millisecond), s.Sample(int64(due), int64(due+time.Millisecond)))
	}
	w, err := record.OpenLive(live)
	if err != nil {
		t.Fatal(err)
	}
	// The first engine: 0..3 answered, one failure sample, then stopped:
	// 4..9 unsent. The engine that came back at 6 s: 6..7 answered, one
	// sample.
	entries := []record.LiveEntry{record.HeadEntry(record.HeadLine{RunID: "r1"})}
	for i := uint32(0); i < 10; i++ {
		if i < 4 {
			entries = append(entries, bucket(i, 10, 0))
		} else {
			entries = append(entries, bucket(i, 0, 10))
		}
	}
	entries = append(entries, sample(1500*time.Millisecond), bucket(6, 10, 0), bucket(7, 10, 0), sample(6500*time.Millisecond))
	if err := w.Append(entries...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m := &record.Manifest{RunID: "r1", Stages: []record.ManifestStage{{Name: "mesh", Dispatched: "2026-03-02T09:59:59.500Z", StartTime: "2026-03-02T10:00:00.000Z",
		Executions: []record.ManifestExecution{{Label: s.Label, Backend: s.Backend, ExecutionID: "r1/mesh/svc-1@127.0.0.1:9",
			Rejoins: []record.ManifestRejoin{{Addr: s.Backend, ExecutionID: "r1/mesh/svc-1@127.0.0.1:9~rejoin1", OffsetMs: 6000,
				LiveBucketsBefore: 10, LiveSamplesBefore: 1}}}}}}}
	rs, err := loadResumed(m, "", live)
	if err != nil {
		t.Fatal(err)
	}
	h := rs.held[record.SeriesKey{Label: s.Label, Backend: s.Backend}]
	if h == nil || h.tl == nil {
		t.Fatal("nothing held of the engine that came back")
	}
	// Attach from bucket 8: its 6 empty buckets before 6 s, then 6 and 7.
	if h.buckets != 8 || h.samples != 1 || h.lines != 2 || h.series.BackendName != "node-b" {
		t.Errorf("held: from bucket %d, sample %d, %d lines, node %q; want 8, 1, 2, node-b", h.buckets, h.samples, h.lines, h.series.BackendName)
	}
	c := &call{ex: &execRun{label: s.Label, requests: map[string]*enginev1.ExecuteRequest{s.Backend: rejoinRequest()}}, backend: s.Backend, offset: 6 * time.Second}
	c.tl.adopt(h.tl)
	if br, ok := c.tl.partial(c); !ok || c.tl.until() != 8*time.Second || br.Counters[record.HTTP2xx] != 20 || br.Unsent != 0 {
		t.Errorf("the engine that came back's prefix: until %v, %+v; want 8s, 20 2xx, no unsent", c.tl.until(), br)
	}
}
