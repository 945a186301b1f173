package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/engine"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// detachAfter runs `sortie run` in dir as runIn does, sends it SIGTERM
// once the target served n requests (the driver detaches: the engines run
// on), and returns what that first driver left.
func detachAfter(t *testing.T, dir, planPath string, tg *target, n int64) result {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan result, 1)
	go func() { done <- runIn(t, ctx, dir, planPath) }()
	waitServed(t, tg, n, 60*time.Second)
	cancel(&cli.SignalError{Signal: syscall.SIGTERM})
	return <-done
}

// runIn runs `sortie run` in this process with its files in dir, as
// runDriver does, so that a second driver can go on with the first's run.
func runIn(t *testing.T, ctx context.Context, dir, planPath string, extra ...string) result {
	t.Helper()
	out := filepath.Join(dir, "report.json")
	stream := filepath.Join(dir, "stream.jsonl")
	args := append([]string{"run", planPath, "-o", out, "--results-stream", stream, "--progress", "500ms", "--status", "off"}, extra...)
	var stdout, stderr bytes.Buffer
	err := RunOptions(ctx, testOptions(), args, &stdout, &stderr)
	res := result{code: cli.Code(err), err: err, stdout: stdout.String(), stderr: stderr.String()}
	t.Logf("sortie %s: exit %d, err %v\nstderr:\n%s", strings.Join(args, " "), res.code, err, res.stderr)
	if b, rerr := os.ReadFile(out); rerr == nil {
		res.report = &record.Report{}
		if src, err := record.ReadReport(bytes.NewReader(b)); err == nil {
			res.report = src.Report()
		}
	}
	if src, serr := record.ReadStreamFile(stream); serr == nil {
		res.stream, res.streamBad = record.Plain(src.All), len(src.Skipped)
	}
	res.livePath = filepath.Join(dir, "stream.live.jsonl")
	res.liveRecord = res.livePath
	if f, err := os.Open(res.livePath); err == nil {
		res.live, _ = record.ReadLive(f)
		f.Close()
	}
	return res
}

// checkResumed checks a resumed run's report: it passed, every backend's
// result is whole and exact, the target served exactly what was planned
// (nothing sent twice), the stream holds each execution once, the live
// record no bucket twice, and the report names one driver gap.
func checkResumed(t *testing.T, res result, tg *target, dir, why string) {
	t.Helper()
	if res.code != 0 || res.report == nil || !res.report.Pass {
		t.Fatalf("resumed run: exit %d, report %+v", res.code, res.report)
	}
	var planned uint64
	for _, e := range res.report.Executions {
		for _, br := range e.Results {
			if br.Partial || br.Counters[record.HTTP2xx] != br.Planned {
				t.Errorf("%s on %s: %d 2xx of %d planned (partial %v)", e.Label, br.Backend, br.Counters[record.HTTP2xx], br.Planned, br.Partial)
			}
			planned += br.Planned
		}
	}
	if got := uint64(tg.served.Load()); got != planned || planned == 0 {
		t.Errorf("target served %d requests, the report planned %d", got, planned)
	}
	if len(res.stream) != 2 {
		t.Errorf("results stream holds %v, want each execution once", labelsOf(res.stream))
	}
	checkNoBucketTwice(t, res)
	checkTimelines(t, res)
	m, err := record.ReadManifestFile(filepath.Join(dir, record.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Finished || len(m.DriverGaps) != 1 || m.DriverGaps[0].Why != why {
		t.Errorf("manifest finished %v, gaps %+v; want finished and one gap: %s", m.Finished, m.DriverGaps, why)
	}
	var whole struct {
		DriverGaps []record.DriverGap `json:"driver_gaps"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	if err := jsonUnmarshal(b, &whole); err != nil || len(whole.DriverGaps) != 1 || whole.DriverGaps[0].Why != why {
		t.Errorf("report driver_gaps %+v (%v), want one: %s", whole.DriverGaps, err, why)
	}
}

// TestIntegrationDriverKilledResumes kills the driver process with
// SIGKILL mid-run; a driver started again on the same report resumes the
// run by its manifest: the engines ran on, and the report is whole, each
// request counted once, the gap named.
func TestIntegrationDriverKilledResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a, _ := startEngineProc(t, "--backend-name", "node-a")
	b, _ := startEngineProc(t, "--backend-name", "node-b")
	planPath := writePlan(t, killPlan, planData{Backends: []string{a, b}, URL: tg.URL, Duration: "6s"})
	dir := t.TempDir()
	d := start(t, nil, binary(t, "sortie"), runArgs(planPath, "-o", filepath.Join(dir, "report.json"),
		"--results-stream", filepath.Join(dir, "stream.jsonl"), "--status", "off", "--progress", "0")...)
	waitServed(t, tg, 2*40, 60*time.Second)
	d.signal(t, syscall.SIGKILL)
	d.wait(t, 10*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "report.json")); err == nil {
		t.Fatal("a killed driver wrote a report")
	}
	// Started again without --resume: the unfinished manifest resumes.
	res := runIn(t, context.Background(), dir, planPath)
	checkResumed(t, res, tg, dir, "the driver stopped without detaching (killed)")
}

// TestIntegrationDriverTermDetaches: SIGTERM makes a driver with a report
// detach (no cancel, no report), the engines run on, and --resume takes
// the run over.
func TestIntegrationDriverTermDetaches(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a := startEngine(t, "node-a", 0)
	b := startEngine(t, "node-b", 0)
	planPath := writePlan(t, killPlan, planData{Backends: []string{a, b}, URL: tg.URL, Duration: "6s"})
	dir := t.TempDir()
	first := detachAfter(t, dir, planPath, tg, 2*40)
	if first.code != cli.ExitTerminated || first.report != nil || !strings.Contains(first.stderr, "DETACHED run ") {
		t.Fatalf("SIGTERM: exit %d, report %v; want 143, no report, a DETACHED line", first.code, first.report)
	}
	m, err := record.ReadManifestFile(filepath.Join(dir, record.ManifestName))
	if err != nil || m.DetachedAt == "" || m.Finished {
		t.Fatalf("manifest after the detach: %+v, %v", m, err)
	}
	// The engines run on without a driver.
	n := tg.served.Load()
	waitServed(t, tg, n+40, 30*time.Second)
	res := runIn(t, context.Background(), dir, planPath, "--resume")
	checkResumed(t, res, tg, dir, "detached (SIGTERM)")
}

// TestIntegrationCancelDetached: sortie run --cancel RUNDIR cancels a
// detached run's executions on their engines and marks it cancelled, so
// that a driver started again does not resume it by itself.
func TestIntegrationCancelDetached(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a := startEngine(t, "node-a", 0)
	planPath := writePlan(t, killPlan, planData{Backends: []string{a}, URL: tg.URL, Duration: "60s"})
	dir := t.TempDir()
	first := detachAfter(t, dir, planPath, tg, 40)
	if first.code != cli.ExitTerminated {
		t.Fatalf("SIGTERM: exit %d, want 143", first.code)
	}
	var stdout, stderr bytes.Buffer
	err := RunOptions(context.Background(), testOptions(), []string{"run", "--cancel", dir}, &stdout, &stderr)
	if err != nil || strings.Count(stdout.String(), "CANCELLED ") != 2 {
		t.Fatalf("--cancel: %v, stdout %q, stderr %q; want two CANCELLED lines", err, stdout.String(), stderr.String())
	}
	m, err := record.ReadManifestFile(filepath.Join(dir, record.ManifestName))
	if err != nil || !m.Cancelled {
		t.Fatalf("manifest after --cancel: %+v, %v", m, err)
	}
	// The load stops: the target's count settles far below the plan.
	time.Sleep(time.Second)
	n := tg.served.Load()
	time.Sleep(time.Second)
	if got := tg.served.Load(); got != n || got >= 60*20 {
		t.Errorf("served %d then %d after --cancel; want the load stopped", n, got)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// TestIntegrationResumeAfterRetention: a driver that resumes after the
// engine let the execution go names the backend lost, and keeps what the
// live record holds of it as its partial result.
func TestIntegrationResumeAfterRetention(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a := startEngineWith(t, engine.Options{BackendName: "node-a", Retention: 50 * time.Millisecond})
	planPath := writePlan(t, killPlan, planData{Backends: []string{a}, URL: tg.URL, Duration: "6s"})
	dir := t.TempDir()
	// Three seconds of load (20 requests a second), a bucket or two on
	// disk, then detach.
	first := detachAfter(t, dir, planPath, tg, 60)
	if first.code != cli.ExitTerminated {
		t.Fatalf("SIGTERM: exit %d, want 143", first.code)
	}
	// The executions end and their retention passes.
	waitServed(t, tg, 2*6*10, 30*time.Second)
	time.Sleep(time.Second)
	res := runIn(t, context.Background(), dir, planPath)
	if res.code != 1 || res.report == nil {
		t.Fatalf("exit %d, report %v; want 1 and a report", res.code, res.report)
	}
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		ex := res.execution(t, label)
		if be, ok := backendErrorOf(ex, a); !ok || be.Kind != record.KindLost || !strings.Contains(be.Error, "holds no execution") {
			t.Errorf("%s: backend error %+v, want lost: the engine holds no execution", label, be)
		}
		br, ok := backendOf(t, ex, a)
		if !ok || !br.Partial || br.Counters[record.HTTP2xx] == 0 || br.BackendName != "node-a" {
			t.Errorf("%s: result %+v, want the live record's part, of node-a", label, br)
		}
	}
}

// What a resume or a cancel cannot do is refused before any load, with
// exit 2 and the reason.
func TestResumeRefusals(t *testing.T) {
	planPath := writePlan(t, killPlan, planData{Backends: []string{"127.0.0.1:1"}, URL: "http://127.0.0.1:1/", Duration: "1s"})
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	other := filepath.Join(t.TempDir(), "report.json")
	// An unfinished run of another plan, next to other.
	if err := record.WriteManifest(record.ManifestPath(other), &record.Manifest{RunID: "r0", Plan: "old.yaml", PlanSHA256: "00",
		Backends: map[string][]string{"nodes": {"127.0.0.1:1"}}, Stages: []record.ManifestStage{}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"resume without a report", []string{"run", planPath, "--resume"}, "--resume needs the report"},
		{"resume without a manifest", []string{"run", planPath, "-o", report, "--resume"}, "no run manifest"},
		{"cancel with a plan", []string{"run", "--cancel", dir, planPath}, "takes no PLAN"},
		{"cancel without a manifest", []string{"run", "--cancel", dir}, "no run manifest"},
		{"another plan", []string{"run", planPath, "-o", other, "--resume"}, "is not the plan the run began with"},
	} {
		var stdout, stderr bytes.Buffer
		err := RunOptions(context.Background(), testOptions(), tc.args, &stdout, &stderr)
		if cli.Code(err) != cli.ExitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: exit %d, %v; want 2 and %q", tc.name, cli.Code(err), err, tc.want)
		}
	}
}

// TestIntegrationResumeLongAfterTheEnd: a driver that resumes after every
// deadline of the run passed (it was away longer than the run's slack)
// takes the answers the engines kept and blames no engine: the time it was
// away moves the deadlines, as a stopped driver's does.
func TestIntegrationResumeLongAfterTheEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a := startEngine(t, "node-a", 0)
	b := startEngine(t, "node-b", 0)
	planPath := writePlan(t, killPlan, planData{Backends: []string{a, b}, URL: tg.URL, Duration: "3s"})
	dir := t.TempDir()
	first := detachAfter(t, dir, planPath, tg, 40)
	if first.code != cli.ExitTerminated {
		t.Fatalf("SIGTERM: exit %d, want 143", first.code)
	}
	// The run ends (2 x 2 x 3 s x 10 requests), then its deadline and
	// answer window pass: timeout 1 s + drain 1 s + grace 2 s + window 2 s.
	waitServed(t, tg, 120, 30*time.Second)
	time.Sleep(7 * time.Second)
	res := runIn(t, context.Background(), dir, planPath)
	checkResumed(t, res, tg, dir, "detached (SIGTERM)")
}

// A report directory that holds an unfinished run of another plan (kept
// from an abandoned run) starts a new run, rather than failing every
// driver started there.
func TestIntegrationAnotherPlanStartsANewRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load")
	}
	tg := newTarget(t)
	a := startEngine(t, "node-a", 0)
	planPath := writePlan(t, killPlan, planData{Backends: []string{a}, URL: tg.URL, Duration: "1s"})
	dir := t.TempDir()
	if err := record.WriteManifest(filepath.Join(dir, record.ManifestName), &record.Manifest{RunID: "r0", Plan: "old.yaml", PlanSHA256: "00",
		Backends: map[string][]string{"nodes": {"127.0.0.1:1"}}, Stages: []record.ManifestStage{}}); err != nil {
		t.Fatal(err)
	}
	res := runIn(t, context.Background(), dir, planPath)
	if res.code != 0 || !strings.Contains(res.stderr, "is of another plan; a new run starts") {
		t.Fatalf("exit %d; want a new run that passes, and the note", res.code)
	}
	m, err := record.ReadManifestFile(filepath.Join(dir, record.ManifestName))
	if err != nil || m.RunID == "r0" || !m.Finished || len(m.DriverGaps) != 0 {
		t.Errorf("manifest %+v, %v: want the new run's, finished, no gap", m, err)
	}
}
