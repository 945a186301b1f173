package driver

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/engine"
	"github.com/sortie-soak/sortie/record"
)

// waitRejoins waits until the run manifest in dir names at least n
// rejoins of every execution on backend, and returns them by label.
func waitRejoins(t *testing.T, dir, backend string, n int, within time.Duration) map[string][]record.ManifestRejoin {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := map[string][]record.ManifestRejoin{}
		all := 0
		if m, err := record.ReadManifestFile(filepath.Join(dir, record.ManifestName)); err == nil {
			for _, st := range m.Stages {
				for _, x := range st.Executions {
					if x.Backend != backend {
						continue
					}
					all++
					if len(x.Rejoins) >= n {
						got[x.Label] = x.Rejoins
					}
				}
			}
		}
		if all > 0 && len(got) == all {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manifest names %d rejoins on %s of %d executions within %v, want all of them", n, backend, len(got), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restartEngineProc kills the engine process p of node with SIGKILL and
// starts a new one of the same node at addr, as a restarted pod comes
// back.
func restartEngineProc(t *testing.T, p *proc, node, addr string) *proc {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	p.wait(t, 10*time.Second)
	// The last --listen is the one taken.
	_, np := startEngineProc(t, "--listen", addr, "--backend-name", node)
	return np
}

// checkGaps checks a node's result of an execution whose engine came back
// n times: n gaps in order, its planned share whole, every request due
// outside the gaps answered 2xx, nothing else, and the law.
func checkGaps(t *testing.T, e record.Execution, backend string, n int, planned uint64) record.BackendResult {
	t.Helper()
	br, ok := backendOf(t, e, backend)
	if !ok || len(br.GapUnsent) != n || br.Partial || br.Planned != planned || br.BackendName != "node-b" {
		t.Fatalf("%s on %s: %+v; want one whole result of node-b, %d planned, with %d gaps", e.Label, backend, br, planned, n)
	}
	var gaps uint64
	for i, g := range br.GapUnsent {
		if g.Count == 0 || g.Why != record.GapRestarted || g.Backend != backend {
			t.Errorf("%s gap %d: %+v, want requests not sent, an engine restart, at %s", e.Label, i, g, backend)
		}
		gaps += g.Count
	}
	if err := br.Conserves(); err != nil || br.Unsent != 0 || record.Sum(br.Counters) != br.Counters[record.HTTP2xx] || br.Counters[record.HTTP2xx]+gaps != planned {
		t.Errorf("%s on %s: 2xx %d + gaps %d of %d planned, unsent %d, counters %v: %v", e.Label, backend, br.Counters[record.HTTP2xx], gaps, planned, br.Unsent, br.Counters, err)
	}
	if _, bad := backendErrorOf(e, backend); bad || e.Pass {
		t.Errorf("%s: a backend error on %s, or the execution passed", e.Label, backend)
	}
	t.Logf("%s on node-b: %d answered 2xx, gaps %+v, %d planned", e.Label, br.Counters[record.HTTP2xx], br.GapUnsent, planned)
	return br
}

// TestIntegrationEngineRestartedTwice: node-b's engine process is killed
// (SIGKILL) and comes back at its address twice in one execution. The
// driver waits for it both times and gives each new engine the rest of
// the schedule: node-b's result names both gaps in order, and what was
// due outside them is answered exactly; node-a is whole.
func TestIntegrationEngineRestartedTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes for seconds")
	}
	tg := newTarget(t)
	addr, p := startEngineProc(t, "--backend-name", "node-b")
	survivor := startEngine(t, "node-a", 0)
	planPath := writePlan(t, killPlan, planData{Backends: []string{survivor, addr}, URL: tg.URL, Duration: "12s"})
	dir := t.TempDir()
	done := make(chan result, 1)
	go func() { done <- runIn(t, context.Background(), dir, planPath) }()
	// A second of load on both nodes (2 targets x 10/s each), then the
	// first restart; a second of the new engine's load, then the second.
	waitServed(t, tg, 80, 60*time.Second)
	p = restartEngineProc(t, p, "node-b", addr)
	first := waitRejoins(t, dir, addr, 1, 30*time.Second)
	// The manifest names the rejoin before the engine hears of it, and
	// the engine takes up the schedule a bucket or so later: three
	// seconds of load of both nodes pass before the second kill.
	waitServed(t, tg, tg.served.Load()+120, 30*time.Second)
	restartEngineProc(t, p, "node-b", addr)
	second := waitRejoins(t, dir, addr, 2, 30*time.Second)
	res := <-done
	if res.code != 1 || res.report == nil {
		t.Fatalf("exit %d, report %v; want 1: a node with a gap fails", res.code, res.report)
	}
	if n := strings.Count(res.stderr, "rejoined mesh/svc-1 on "+addr+" (node-b)"); n != 2 {
		t.Errorf("the driver said node-b rejoined mesh/svc-1 %d times, want 2", n)
	}
	var answered uint64
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		e := res.execution(t, label)
		assertWhole(t, e, survivor, 120)
		br := checkGaps(t, e, addr, 2, 120)
		answered += 120 + br.Counters[record.HTTP2xx]
		// The engine between the two gaps counted its part.
		if g := br.GapUnsent; g[1].From <= g[0].To {
			t.Errorf("%s: gaps %+v: the second begins where the first ends, nothing counted between them", label, g)
		}
		// The gaps are those the manifest named before each engine that
		// came back heard of the rest.
		if rj := second[label]; len(rj) != 2 || !reflect.DeepEqual(rj[0], first[label][0]) || rj[0].Gap != br.GapUnsent[0] || rj[1].Gap != br.GapUnsent[1] {
			t.Errorf("%s: the manifest's rejoins %+v do not name the report's gaps %+v", label, rj, br.GapUnsent)
		}
	}
	// A killed engine's last requests may have been served and never
	// counted (they are in its gap): the target served at least what was
	// answered, never less.
	if got := uint64(tg.served.Load()); got < answered {
		t.Errorf("target served %d, the report answered %d", got, answered)
	}
}

// TestIntegrationResumeAfterRejoin: node-b's engine is stopped and an
// engine of node-b comes back at its address; after the driver gave it
// the rest of the schedule, the driver process is killed (SIGKILL). The
// driver started again resumes from the manifest, which names the rejoin:
// it follows the engine that came back by its own execution, takes the
// first engine's count from the manifest, and writes one report in which
// the gap plus both engines' counts are node-b's planned share, each
// request counted once: the target served exactly what the report says
// was answered.
func TestIntegrationResumeAfterRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	o := engine.Options{BackendName: "node-b", Version: "test"}
	old, addr := engineAt(t, o, "127.0.0.1:0")
	survivor := startEngine(t, "node-a", 0)
	planPath := writePlan(t, killPlan, planData{Backends: []string{survivor, addr}, URL: tg.URL, Duration: "10s"})
	dir := t.TempDir()
	d := start(t, nil, binary(t, "sortie"), runArgs(planPath, "-o", filepath.Join(dir, "report.json"),
		"--results-stream", filepath.Join(dir, "stream.jsonl"), "--status", "off", "--progress", "0")...)
	waitServed(t, tg, 80, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	engineAt(t, o, addr)
	waitRejoins(t, dir, addr, 1, 30*time.Second)
	// The engine that came back sends for a second, and the driver
	// writes some of it to the live record; then the driver dies.
	waitServed(t, tg, tg.served.Load()+80, 30*time.Second)
	d.signal(t, syscall.SIGKILL)
	d.wait(t, 10*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "report.json")); err == nil {
		t.Fatal("a killed driver wrote a report")
	}
	res := runIn(t, context.Background(), dir, planPath)
	if res.code != 1 || res.report == nil {
		t.Fatalf("resumed run: exit %d, report %v; want 1 (a node with a gap fails) and a report", res.code, res.report)
	}
	var answered uint64
	if res.live == nil {
		t.Fatalf("no live record at %s", res.livePath)
	}
	buckets := record.BucketsBySeries(res.live.Buckets)
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		e := res.execution(t, label)
		assertWhole(t, e, survivor, 100)
		br := checkGaps(t, e, addr, 1, 100)
		answered += 100 + br.Counters[record.HTTP2xx]
		// The resumed driver went on from where the live record's lines
		// of the engine that came back end: what they count is what
		// both engines answered, no bucket of it written twice. (The
		// stopped engine's own buckets after it stopped are there too,
		// holding its unsent requests only.)
		var live uint64
		for _, b := range buckets[record.SeriesKey{Label: label, Backend: addr}] {
			live += b.Counters[record.HTTP2xx]
		}
		if live != br.Counters[record.HTTP2xx] {
			t.Errorf("%s on node-b: the live record counts %d 2xx, the report %d", label, live, br.Counters[record.HTTP2xx])
		}
	}
	if got := uint64(tg.served.Load()); got != answered {
		t.Errorf("target served %d requests, the report answered %d: a request lost or counted twice", got, answered)
	}
	if len(res.stream) != 2 {
		t.Errorf("results stream holds %v, want each execution once", labelsOf(res.stream))
	}
	m, err := record.ReadManifestFile(filepath.Join(dir, record.ManifestName))
	if err != nil || !m.Finished || len(m.DriverGaps) != 1 {
		t.Errorf("manifest %+v, %v; want finished, one driver gap", m, err)
	}
}

// checkNoBucketTwice checks that the live record holds no bucket of a
// series twice.
func checkNoBucketTwice(t *testing.T, res result) {
	t.Helper()
	if res.live == nil {
		t.Fatalf("no live record at %s", res.livePath)
	}
	seen := map[record.SeriesKey]map[uint32]bool{}
	for _, b := range res.live.Buckets {
		k := record.SeriesKey{Label: b.Label, Backend: b.Backend}
		if seen[k] == nil {
			seen[k] = map[uint32]bool{}
		}
		if seen[k][b.Index] {
			t.Errorf("%s on %s: bucket %d twice in the live record", b.Label, b.Backend, b.Index)
		}
		seen[k][b.Index] = true
	}
}
