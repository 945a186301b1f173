package driver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	sortiegate "github.com/sortie-soak/sortie/gate"
	"github.com/sortie-soak/sortie/internal/cli"
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
		assertPartial(t, res, label, victim, "node-b", killed)
		assertWhole(t, e, survivor, 80)
	}
	checkTimelines(t, res)
}

// TestIntegrationEngineFrozenKeepsCounts freezes one engine process with
// SIGSTOP mid-run and keeps it frozen past the driver's deadline and
// answer window: the report keeps what its buckets had counted before the
// freeze, as a partial result up to at most 2 s before it, conserving
// planned over the part it covers, next to its silent entry; the gate
// fails the node and says when it went away and what it had counted. The
// engine, thawed, still stops cleanly on SIGTERM.
func TestIntegrationEngineFrozenKeepsCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes")
	}
	tg := newTarget(t)
	victim, p := startEngineProc(t, "--backend-name", "node-b")
	survivor := startEngine(t, "node-a", 0)
	planPath := writePlan(t, killPlan, planData{Backends: []string{victim, survivor}, URL: tg.URL, Duration: "8s"})
	o := testOptions()
	o.Grace, o.AnswerWindow, o.CancelWait = 2*time.Second, 3*time.Second, 2*time.Second
	done := runDriverAsync(t, o, planPath)
	// 40 requests a second in all: freeze the victim some 4 s in.
	waitServed(t, tg, 160, 30*time.Second)
	frozen := time.Now()
	p.signal(t, syscall.SIGSTOP)
	res := <-done
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		e := res.execution(t, label)
		if be, ok := backendErrorOf(e, victim); !ok || be.Kind != record.KindSilent {
			t.Errorf("%s: backend error of the frozen engine %+v, want silent", label, be)
		}
		assertPartial(t, res, label, victim, "node-b", frozen)
		assertWhole(t, e, survivor, 80)
		if e.Pass {
			t.Errorf("%s passed with a frozen backend", label)
		}
	}
	checkTimelines(t, res)
	gateNamesPartial(t, res, map[string]string{victim: "node-b", survivor: "node-a"}, victim)

	p.signal(t, syscall.SIGCONT)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Errorf("the thawed engine exited %d on SIGTERM, want 0:\n%s", code, p.Stderr())
	}
}

// assertPartial checks the partial result of backend (named node) in
// execution label of res: lost or silent at stopped, it counted up to at
// most 2 s before then, conserves planned over what it covers, and its
// counts are those of its buckets in the live record.
func assertPartial(t *testing.T, res result, label, backend, node string, stopped time.Time) {
	t.Helper()
	br, ok := backendOf(t, res.execution(t, label), backend)
	if !ok || !br.Partial || br.BackendName != node {
		t.Fatalf("%s: result of the stopped engine %+v, want a partial one of %s", label, br, node)
	}
	until, err := time.Parse(time.RFC3339Nano, br.CountedUntil)
	if err != nil {
		t.Fatalf("%s: counted_until %q: %v", label, br.CountedUntil, err)
	}
	if lag := stopped.Sub(until); lag > 2*time.Second || lag < 0 {
		t.Errorf("%s: counted until %v, %v before the engine stopped; want within 2s before it", label, until, lag)
	}
	if err := br.Conserves(); err != nil || br.Planned == 0 || br.Planned != br.Counters[record.HTTP2xx]+br.Unsent {
		t.Errorf("%s: partial result %+v does not conserve: %v", label, br, err)
	}
	var prefix []record.BucketLine
	for _, l := range record.BucketsBySeries(res.live.Buckets)[record.SeriesKey{Label: label, Backend: backend}] {
		if l.Index < uint32(br.ElapsedMs/l.WidthMs) {
			prefix = append(prefix, l)
		}
	}
	if err := record.CheckTimeline(prefix, br); err != nil {
		t.Errorf("%s: %v", label, err)
	}
}

// gateNamesPartial grades res's report with sortie-gate, nodes named by
// the engines file of nodes (address to node): it fails, and every target
// names the stopped backend lost, when it went away and the 2xx it had
// counted, as the partial result says.
func gateNamesPartial(t *testing.T, res result, nodes map[string]string, backend string) {
	t.Helper()
	dir := t.TempDir()
	var engines strings.Builder
	for addr, node := range nodes {
		fmt.Fprintf(&engines, "%s %s\n", addr, node)
	}
	enginesFile := filepath.Join(dir, "engines.txt")
	if err := os.WriteFile(enginesFile, []byte(engines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(filepath.Dir(res.livePath), "report.json")
	var stdout, stderr bytes.Buffer
	err := sortiegate.Run(context.Background(), []string{"--report", report, "--engines", enginesFile}, &stdout, &stderr)
	if code := cli.Code(err); code != cli.ExitFail {
		t.Fatalf("gate exit %d (%v), want %d:\n%s%s", code, err, cli.ExitFail, stdout.String(), stderr.String())
	}
	node := nodes[backend]
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		br, _ := backendOf(t, res.execution(t, label), backend)
		from, _ := time.Parse(time.RFC3339Nano, br.StartedAt)
		until, _ := time.Parse(time.RFC3339Nano, br.CountedUntil)
		want := fmt.Sprintf("LOST BACKEND %s (%s) at +%s, %d answered 2xx before", node, backend,
			strconv.FormatFloat(until.Sub(from).Seconds(), 'f', -1, 64)+"s", br.Counters[record.HTTP2xx])
		// The gate names a target by its name, the label's last part.
		target := label[strings.LastIndex(label, "/")+1:]
		line := regexp.MustCompile(`(?m)^FAIL  ` + regexp.QuoteMeta(target) + `  .*$`).FindString(stdout.String())
		if !strings.Contains(line, want) {
			t.Errorf("gate line of %s: %q, want it to hold %q; gate output:\n%s", target, line, want, stdout.String())
		}
	}
	if !regexp.MustCompile(`(?m)^LOST  ` + regexp.QuoteMeta(node+" ("+backend+")") + `  targets=2  `).MatchString(stdout.String()) {
		t.Errorf("gate output lacks the LOST line of %s:\n%s", node, stdout.String())
	}
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
	d := start(t, nil, binary(t, "sortie"), runArgs(planPath, "--results-stream", filepath.Join(dir, "run.jsonl"), "--status", "off", "--progress", "0")...)
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
		l.append([]record.LiveEntry{record.BucketEntry(s, s.Bucket(2*i)), record.BucketEntry(s, s.Bucket(2*i+1))})
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	l.append([]record.LiveEntry{record.BucketEntry(s, s.Bucket(99))})
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
