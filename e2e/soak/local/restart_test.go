package local

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// TestIntegrationLocalEngineRestart: node-b's engine is killed 8 s into a
// 30 s run and a new engine of node-b starts 5 s later at its address. The
// driver gives the new engine the rest of each execution's schedule, on
// the original due times: node-b is graded with its gap, named by the
// gate; every request due before and after the gap is answered, exactly;
// node-a is whole; and every node conserves planned = outcomes + gap.
func TestIntegrationLocalEngineRestart(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--duration", "30s", "--fault", "engine-restart:node-b@8s+5s")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1: a node with a gap fails", r.code)
	}
	f := r.fault(t, "engine-restart", "node-b")
	if d := f.End.Sub(f.Begin); d < 5*time.Second {
		t.Errorf("fault line %s: the engine came back %v after the kill, want at least 5s", f, d)
	}
	// One GAP line for node-b, summed over its 8 targets: 60 rps a node.
	m := regexp.MustCompile(`(?m)^GAP node-b \+([0-9.]+)s\.\.\+([0-9.]+)s \(engine restarted\): ([0-9,]+) requests not sent; ([0-9,]+)/([0-9,]+) answered 2xx outside it$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no GAP line for node-b")
	}
	from, _ := strconv.ParseFloat(m[1], 64)
	to, _ := strconv.ParseFloat(m[2], 64)
	if from < 5 || from > 8 || to < 13 || to > 17 {
		t.Errorf("gap +%vs..+%vs, want from within 3 s before the kill at +8s, to after the restart at +13s", from, to)
	}
	if want := strconv.Itoa(int(60 * (to - from))); m[3] != thousandsOf(want) {
		t.Errorf("%s requests not sent in the gap, want 60/s x %vs = %s", m[3], to-from, want)
	}
	if m[4] != m[5] || m[5] != thousandsOf(strconv.Itoa(int(60*(30-(to-from))))) {
		t.Errorf("%s/%s answered outside the gap, want all of 60/s x %vs", m[4], m[5], 30-(to-from))
	}
	checkGraded(t, r, 1)
}

// TestIntegrationLocalEngineRestartedTwice: node-b's engine is killed 8 s
// and again 18 s into a 30 s run, each time a new engine of node-b starting
// 3 s later at its address. The driver waits for it both times: node-b is
// graded with two gaps, two GAP lines, every request due outside them
// answered, exactly; node-a is whole.
func TestIntegrationLocalEngineRestartedTwice(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--duration", "30s", "--fault", "engine-restart:node-b@8s+3s", "--fault", "engine-restart:node-b@18s+3s")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1: a node with a gap fails", r.code)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "engine-node-b-restarted-2.log")); err != nil {
		t.Errorf("the second engine that came back has no log of its own: %v", err)
	}
	// Two GAP lines for node-b, each summed over its 8 targets: 60 rps a
	// node.
	lines := regexp.MustCompile(`(?m)^GAP node-b \+([0-9.]+)s\.\.\+([0-9.]+)s \(engine restarted\): ([0-9,]+) requests not sent; ([0-9,]+)/([0-9,]+) answered 2xx outside it$`).FindAllStringSubmatch(r.stdout, -1)
	if len(lines) != 2 {
		t.Fatalf("%d GAP lines for node-b, want 2", len(lines))
	}
	var down float64
	for i, m := range lines {
		t.Logf("%s", m[0])
		from, _ := strconv.ParseFloat(m[1], 64)
		to, _ := strconv.ParseFloat(m[2], 64)
		kill := []float64{8, 18}[i]
		if from < kill-3 || from > kill || to < kill+3 || to > kill+7 {
			t.Errorf("gap %d +%vs..+%vs, want from within 3 s before the kill at +%vs, to after the restart at +%vs", i, from, to, kill, kill+3)
		}
		if want := strconv.Itoa(int(60 * (to - from))); m[3] != thousandsOf(want) {
			t.Errorf("gap %d: %s requests not sent, want 60/s x %vs = %s", i, m[3], to-from, want)
		}
		down += to - from
	}
	for _, m := range lines {
		if m[4] != m[5] || m[5] != thousandsOf(strconv.Itoa(int(60*(30-down)))) {
			t.Errorf("%s/%s answered outside the gaps, want all of 60/s x %vs", m[4], m[5], 30-down)
		}
	}
	checkGraded(t, r, 2)
}

// TestIntegrationLocalRejoinThenDriverKill: node-b's engine restarts 5 s
// into a 30 s run and rejoins; 16 s in, the driver is killed, and started
// again with --resume 2 s later. The manifest names the rejoin, so the
// resumed driver follows node-b's engine that came back by its own
// execution: one report, node-b graded with its one gap and exact counts,
// node-a whole, the driver's gap named.
func TestIntegrationLocalRejoinThenDriverKill(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--duration", "30s", "--fault", "engine-restart:node-b@5s+3s", "--fault", "driver-kill:@16s+2s")
	if r.code != 1 || r.report == nil {
		t.Fatalf("exit %d, report %v; want 1 (a node with a gap fails) and one report", r.code, r.report != nil)
	}
	if !strings.Contains(r.stderr, "starting the driver again with --resume") {
		t.Errorf("the harness did not start the driver again")
	}
	if len(r.report.DriverGaps) != 1 || !regexp.MustCompile(`(?m)^DRIVER  gap from=\S+ to=\S+  -- the driver stopped without detaching \(killed\)$`).MatchString(r.stdout) {
		t.Errorf("report driver_gaps %+v, or no DRIVER line: want the one gap named", r.report.DriverGaps)
	}
	lines := regexp.MustCompile(`(?m)^GAP node-b .*$`).FindAllString(r.stdout, -1)
	if len(lines) != 1 {
		t.Fatalf("GAP lines for node-b %q, want one", lines)
	}
	t.Logf("%s", lines[0])
	checkGraded(t, r, 1)
}

// checkGraded checks a 30 s run in which node-b's engine came back
// gaps times: every target failed with no backend lost, node-b graded
// with its gaps and exact counts (checkGapsNode), node-a whole, the law
// kept by every result, each target once.
func checkGraded(t *testing.T, r localRun, gaps int) {
	t.Helper()
	if !regexp.MustCompile(`VERDICT FAIL targets=8 passed=0 failed=8 not_run=0 backends=2 lost_backends=0`).MatchString(r.stdout) {
		t.Errorf("the verdict does not fail every target with no lost backend")
	}
	buckets := liveBuckets(t, r)
	seen := map[string]bool{}
	for _, e := range r.report.Executions {
		if seen[e.Label] {
			t.Errorf("%s twice in the report", e.Label)
		}
		seen[e.Label] = true
		share := planned30[e.Label[len("mesh/"):]] / 30
		for _, br := range e.Results {
			if err := br.Conserves(); err != nil {
				t.Errorf("%s on %s: %v", e.Label, br.BackendName, err)
			}
			if br.BackendName != "node-a" {
				checkGapsNode(t, e.Label, br, share, gaps, buckets[record.SeriesKey{Label: e.Label, Backend: br.Backend}])
				continue
			}
			var failures uint64
			for _, k := range record.FailureClasses {
				failures += br.Counters[k]
			}
			if br.Counters[record.HTTP2xx] != share*30 || len(br.GapUnsent) != 0 || br.Partial || failures != 0 {
				t.Errorf("%s on node-a: %d 2xx, %d failures, gaps %v, partial %v; want %d, none", e.Label, br.Counters[record.HTTP2xx], failures, br.GapUnsent, br.Partial, share*30)
			}
		}
	}
	if len(seen) != 8 {
		t.Errorf("the report holds %d targets, want 8", len(seen))
	}
}

// planned30 is what each target plans per node in 30 s.
var planned30 = map[string]uint64{"svc-1": 270, "svc-2": 270, "svc-3": 270, "svc-4": 270, "svc-5": 270, "svc-6": 270, "echo": 90, "uds-echo": 90}

// checkGapsNode checks node-b's result for one target with n gaps: each
// on whole seconds holding share x its length, in order, every request
// due outside them answered 2xx and nothing else, as the live record's
// buckets count them too.
func checkGapsNode(t *testing.T, label string, br record.BackendResult, share uint64, n int, buckets []record.BucketLine) {
	t.Helper()
	if len(br.GapUnsent) != n || br.Planned != share*30 {
		t.Fatalf("%s on node-b: gaps %+v, planned %d; want %d gaps of %d planned", label, br.GapUnsent, br.Planned, n, share*30)
	}
	var failures uint64
	for _, k := range record.FailureClasses {
		failures += br.Counters[k]
	}
	if failures != 0 || br.Partial || br.Unsent != 0 {
		t.Errorf("%s on node-b: failures %d, partial %v, unsent %d; want none", label, failures, br.Partial, br.Unsent)
	}
	start, _ := record.ParseTime(br.StartedAt)
	type span struct{ from, to time.Duration }
	var gaps []span
	var inGaps uint64
	for _, g := range br.GapUnsent {
		gf, _ := record.ParseTime(g.From)
		gt, _ := record.ParseTime(g.To)
		from, to := gf.Sub(start), gt.Sub(start)
		if from%time.Second != 0 || to%time.Second != 0 || g.Why != record.GapRestarted || to <= from {
			t.Errorf("%s on node-b: gap %+v is not on whole seconds from %s, empty, or not an engine restart", label, g, br.StartedAt)
		}
		if want := share * uint64((to-from)/time.Second); g.Count != want {
			t.Errorf("%s on node-b: gap %+v holds %d requests, want %d", label, g, g.Count, want)
		}
		gaps, inGaps = append(gaps, span{from, to}), inGaps+g.Count
	}
	outside := share*30 - inGaps
	if br.Counters[record.HTTP2xx] != outside {
		t.Errorf("%s on node-b: %d 2xx, want every one of the %d due outside the gaps", label, br.Counters[record.HTTP2xx], outside)
	}
	// The live record counts the same outside the gaps, and nothing in
	// them.
	var live, inside uint64
	for _, b := range buckets {
		off := time.Duration(b.OffsetMs) * time.Millisecond
		in := false
		for _, g := range gaps {
			in = in || (off >= g.from && off < g.to)
		}
		if in {
			inside += b.Counters[record.HTTP2xx]
		} else {
			live += b.Counters[record.HTTP2xx]
		}
	}
	if live != outside || inside != 0 {
		t.Errorf("%s on node-b: the live record counts %d 2xx outside the gaps and %d in them, want %d and 0", label, live, inside, outside)
	}
	t.Logf("%s on node-b: gaps %+v, %d answered outside them of %d planned", label, gaps, outside, share*30)
}

// liveBuckets reads the run's live record, by series.
func liveBuckets(t *testing.T, r localRun) map[record.SeriesKey][]record.BucketLine {
	t.Helper()
	f, err := os.Open(filepath.Join(r.dir, liveFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lv, err := record.ReadLive(f)
	if err != nil {
		t.Fatal(err)
	}
	return record.BucketsBySeries(lv.Buckets)
}

// thousandsOf puts a comma every three digits of a decimal number.
func thousandsOf(s string) string {
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
