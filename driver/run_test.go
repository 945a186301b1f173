package driver

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

const cleanPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: mesh
    pool: nodes
    protocol: http1
    concurrency: "1"
    timeout: 1s
    executor: {type: constant-rate, rate: 10, duration: 2s, per_backend: true, open_loop: true}
    targets:
      - {name: alpha, url: "{{.URL}}", weight: 1}
      - {name: beta, url: "{{.URL}}", weight: 1}
    thresholds:
      - "counter:benchmark.http_5xx == 0"
      - "rate:benchmark.http_2xx >= 5"
      - "latency_2xx.p99 < 5s"
`

func TestIntegrationCleanTwoEngines(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a, b := startEngine(t, "node-a", 0), startEngine(t, "node-b", 0)
	planPath := writePlan(t, cleanPlan, planData{Backends: []string{a, b}, URL: tg.URL})
	res := runDriver(t, context.Background(), testOptions(), planPath)
	if res.code != 0 {
		t.Fatalf("exit %d, want 0", res.code)
	}
	if !res.report.Pass || len(res.report.Executions) != 2 {
		t.Fatalf("pass=%v with %d executions, want a pass with 2", res.report.Pass, len(res.report.Executions))
	}
	names := map[string]string{a: "node-a", b: "node-b"}
	for _, label := range []string{"mesh/alpha", "mesh/beta"} {
		e := res.execution(t, label)
		if e.Scenario != "mesh" || e.Pool != "nodes" || e.Rate != 5 || !e.PerBackend || e.DurationMs != 2000 {
			t.Errorf("%s: header %+v", label, e)
		}
		if d := cmp.Diff([]string{a, b}, e.Backends); d != "" {
			t.Errorf("%s backends (-want +got):\n%s", label, d)
		}
		if len(e.Results) != 2 || len(e.BackendErrors) != 0 {
			t.Fatalf("%s: %d results, backend errors %v", label, len(e.Results), e.BackendErrors)
		}
		for _, br := range e.Results {
			// 5 rps for 2 s on each backend, exactly.
			if br.Counters[record.HTTP2xx] != 10 || record.Sum(br.Counters) != 10 || br.Planned != 10 {
				t.Errorf("%s on %s: counters %v planned %d, want exactly 10 http_2xx of 10 planned", label, br.Backend, br.Counters, br.Planned)
			}
			if br.BackendName != names[br.Backend] {
				t.Errorf("%s on %s: backend_name %q, want %q", label, br.Backend, br.BackendName, names[br.Backend])
			}
			st, ok := br.Statistics[record.Latency2xx]
			if !ok || st.Count != 10 || st.Unit != "ns" || st.P999 < st.P50 || st.Max < st.Min {
				t.Errorf("%s on %s: latency statistic %+v", label, br.Backend, st)
			}
			if br.StartedAt == "" || br.ElapsedMs <= 0 {
				t.Errorf("%s on %s: started_at %q elapsed %d", label, br.Backend, br.StartedAt, br.ElapsedMs)
			}
		}
		if e.Totals[record.HTTP2xx] != 20 {
			t.Errorf("%s totals %v, want 20 http_2xx", label, e.Totals)
		}
		// One pool threshold each for counter and rate, and the statistic
		// threshold once per backend.
		var scopes []string
		for _, th := range e.Thresholds {
			scopes = append(scopes, th.Scope)
			if !th.Pass {
				t.Errorf("%s: threshold %+v failed", label, th)
			}
		}
		if d := cmp.Diff([]string{"pool", "pool", a, b}, scopes); d != "" {
			t.Errorf("%s threshold scopes (-want +got):\n%s", label, d)
		}
	}
	if got := tg.served.Load(); got != 40 {
		t.Errorf("target served %d requests, want 40", got)
	}
	checkMadeBy(t, res.madeBy, planPath, []string{a, b}, names)
	checkTimelines(t, res)
	// The stream holds the report's executions, object for object.
	if res.streamBad != 0 {
		t.Errorf("%d bad stream lines", res.streamBad)
	}
	if d := cmp.Diff(res.report.Executions, res.stream); d != "" {
		t.Errorf("stream differs from the report (-report +stream):\n%s", d)
	}
	for _, want := range []string{
		"  running mesh/alpha (5 rps per backend for 2s) on " + a + ", " + b + "\n",
		"  running mesh/beta (5 rps per backend for 2s) on " + a + ", " + b + "\n",
		"  progress mesh/alpha " + a + " ",
		"  PASS mesh/alpha (scenario mesh, ",
		"  PASS mesh/beta (scenario mesh, ",
		"PASS  2/2 executions passed\n",
	} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if !strings.HasSuffix(res.stdout, "PASS  2/2 executions passed\n") || !strings.Contains(res.stdout, "PASS   mesh/alpha  (5 rps per backend for 2s, pool \"nodes\"") {
		t.Errorf("stdout summary:\n%s", res.stdout)
	}
}

const shapesPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: ramp
    pool: nodes
    timeout: 1s
    executor: {type: ramping-rate, rate: 10, duration: 2s, ramp_time: 1s, per_backend: true, open_loop: true}
    target: "{{.URL}}"
  - name: stairs
    pool: nodes
    timeout: 1s
    executor:
      type: staircase
      per_backend: true
      open_loop: true
      stages:
        - {rate: 4, duration: 1s}
        - {rate: 8, duration: 1s}
    target: "{{.URL}}"
`

func TestIntegrationRampAndStaircase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a, b := startEngine(t, "", 0), startEngine(t, "", 0)
	planPath := writePlan(t, shapesPlan, planData{Backends: []string{a, b}, URL: tg.URL})
	res := runDriver(t, context.Background(), testOptions(), planPath, "--json")
	if res.code != 0 {
		t.Fatalf("exit %d, want 0", res.code)
	}
	if d := cmp.Diff([]string{"ramp", "stairs/stage-1", "stairs/stage-2"}, labelsOf(res.report.Executions)); d != "" {
		t.Fatalf("labels (-want +got):\n%s", d)
	}
	// Ramp to R=10 over T=1s, then hold H=1s: R*T/2 + R*H = 5 + 10.
	want := map[string]uint64{"ramp": 15, "stairs/stage-1": 4, "stairs/stage-2": 8}
	for label, n := range want {
		e := res.execution(t, label)
		for _, backend := range []string{a, b} {
			br, ok := backendOf(t, e, backend)
			if !ok {
				t.Fatalf("%s: no result from %s", label, backend)
			}
			if br.Counters[record.HTTP2xx] != n || record.Sum(br.Counters) != n || br.Planned != n {
				t.Errorf("%s on %s: counters %v planned %d, want exactly %d", label, backend, br.Counters, br.Planned, n)
			}
		}
	}
	if e := res.execution(t, "ramp"); e.RampMs != 1000 || e.Rate != 10 {
		t.Errorf("ramp: rate %v ramp_ms %d", e.Rate, e.RampMs)
	}
	if got, want := tg.served.Load(), int64(2*(15+4+8)); got != want {
		t.Errorf("target served %d, want %d", got, want)
	}
	// --json: stdout is the report and nothing else.
	src, err := record.ReadReport(strings.NewReader(res.stdout))
	if err != nil {
		t.Fatalf("stdout is not a report: %v\n%s", err, res.stdout)
	}
	if d := cmp.Diff(res.report, src.Report()); d != "" {
		t.Errorf("stdout report differs from the file (-file +stdout):\n%s", d)
	}
	if !strings.Contains(res.stderr, "  running ramp (10 rps per backend for 2s, ramp 1s) on ") {
		t.Errorf("no ramp running line")
	}
}

const capPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: mesh
    pool: nodes
    timeout: 1s
    executor:
      type: staircase
      per_backend: true
      open_loop: true
      stages:
        - {rate: 2, duration: 1s}
        - {rate: 4, duration: 1s}
        - {rate: 6, duration: 1s}
    targets:
      - {name: tcp-a, url: "{{.URL}}", weight: 1}
      - {name: tcp-c, url: "{{.URL}}", weight: 1}
  - name: after
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 2, duration: 1s, per_backend: true}
    target: "{{.URL}}"
`

func TestIntegrationCapRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	// Engines that take one execution at a time, against a stage that
	// starts two on each.
	a, b := startEngine(t, "", 1), startEngine(t, "", 1)
	planPath := writePlan(t, capPlan, planData{Backends: []string{a, b}, URL: tg.URL})
	res := runDriver(t, context.Background(), testOptions(), planPath)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	rep := res.report
	want := []string{"mesh/tcp-a/stage-1", "mesh/tcp-c/stage-1", "mesh/tcp-a/stage-2", "mesh/tcp-c/stage-2",
		"mesh/tcp-a/stage-3", "mesh/tcp-c/stage-3", "after"}
	if d := cmp.Diff(want, labelsOf(rep.Executions)); d != "" {
		t.Fatalf("labels (-want +got):\n%s", d)
	}
	refusers := map[string]bool{}
	for _, e := range rep.Executions[:2] {
		if e.Pass || e.NotRun || e.Refused != record.RefusedExecutionCap {
			t.Errorf("%s: pass=%v not_run=%v refused=%q, want a refused failure", e.Label, e.Pass, e.NotRun, e.Refused)
		}
		if !strings.Contains(e.Error, "cap of 1 concurrent executions") || !strings.Contains(e.Error, "starts 2 at once") ||
			!strings.Contains(e.Error, "at least 2") || !strings.Contains(e.Error, "does not fit the cap even on an idle engine") ||
			!strings.Contains(e.Error, "none of the stage was started") {
			t.Errorf("%s: error does not name the cap and the need: %s", e.Label, e.Error)
		}
		for _, be := range e.BackendErrors {
			if be.Refused != record.RefusedExecutionCap || be.Kind != record.KindRefused || !strings.Contains(be.Error, "cap of 1") {
				t.Errorf("%s: backend error %+v", e.Label, be)
			}
			refusers[be.Backend] = true
		}
		if len(e.Thresholds) != 0 {
			t.Errorf("%s: a refused execution was judged: %+v", e.Label, e.Thresholds)
		}
		// The driver knew the cap from the engines' Info: nothing of the
		// stage started, so nothing had to be cancelled.
		if len(e.Results) != 0 || e.StartedAt != "" {
			t.Errorf("%s: the refused stage was started: started_at %q, results %+v", e.Label, e.StartedAt, e.Results)
		}
	}
	// Both engines' caps are below the stage: both are named.
	if len(refusers) != 2 {
		t.Errorf("backend errors name %v, want both backends", refusers)
	}
	// The target saw only the requests of the scenario after: 2 per
	// second for 1 s on each of the two backends.
	if n := tg.served.Load(); n != 4 {
		t.Errorf("the target served %d requests, want the 4 of the scenario after", n)
	}
	for _, e := range rep.Executions[2:6] {
		if !e.NotRun || e.Pass || e.Refused != "" || len(e.Results) != 0 || e.Totals != nil || len(e.Thresholds) != 0 || len(e.BackendErrors) != 0 {
			t.Errorf("%s: want not_run with no counters, got %+v", e.Label, e)
		}
		if !strings.HasPrefix(e.Error, "not run: mesh/stage-1 was refused because the engine on backend ") ||
			!strings.Contains(e.Error, "the stages after a refused one are not attempted") {
			t.Errorf("%s: error %q", e.Label, e.Error)
		}
	}
	// A later scenario still runs.
	if e := rep.Executions[6]; !e.Pass || len(e.Results) != 2 {
		t.Errorf("after: pass=%v results=%d, want a pass on both backends", e.Pass, len(e.Results))
	}
	if d := cmp.Diff(rep.Executions, res.stream); d != "" {
		t.Errorf("stream differs from the report (-report +stream):\n%s", d)
	}
	for _, s := range []string{"  SKIP mesh/tcp-a/stage-2 (scenario mesh): not run: mesh/stage-1 was refused", "  FAIL mesh/tcp-a/stage-1 (scenario mesh, ", "FAIL  1/3 executions passed, 4 not run"} {
		if !strings.Contains(res.stderr, s) {
			t.Errorf("stderr lacks %q", s)
		}
	}
}

const frozenDriverPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: mesh
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 4, duration: 1s, per_backend: true, open_loop: true}
    target: "{{.URL}}"
    thresholds: ["counter:benchmark.http_2xx == 8"]
`

// TestIntegrationDriverFrozen stands for a driver process stopped past its
// engines' deadlines and resumed: while the deadline loop does not run the
// engines answer, then the clock jumps an hour. The waiting answers are
// taken and nobody is called silent.
func TestIntegrationDriverFrozen(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a, b := startEngine(t, "", 0), startEngine(t, "", 0)
	planPath := writePlan(t, frozenDriverPlan, planData{Backends: []string{a, b}, URL: tg.URL})

	clk := &jumpClock{}
	var once sync.Once
	o := testOptions()
	o.Clock = clk
	o.Pause = func() {
		once.Do(func() {
			// Frozen: the engines finish and answer meanwhile.
			deadline := time.Now().Add(20 * time.Second)
			for tg.served.Load() < 8 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(1500 * time.Millisecond)
			// Resumed an hour later: every deadline phase is long past.
			clk.jump.Store(int64(time.Hour))
		})
	}
	res := runDriver(t, context.Background(), o, planPath)
	if res.code != 0 {
		t.Fatalf("exit %d, want 0", res.code)
	}
	e := res.execution(t, "mesh")
	if !e.Pass || len(e.BackendErrors) != 0 || len(e.Results) != 2 {
		t.Fatalf("pass=%v backend errors %v results %d; want a pass with both answers", e.Pass, e.BackendErrors, len(e.Results))
	}
	if e.Totals[record.HTTP2xx] != 8 {
		t.Errorf("totals %v, want 8 http_2xx", e.Totals)
	}
	if strings.Contains(res.stderr, "silent") {
		t.Errorf("someone was called silent:\n%s", res.stderr)
	}
}

// jumpClock is the wall clock read jump later: how a driver that did not
// run for that long sees the time when it resumes.
type jumpClock struct {
	clock.Real
	jump atomic.Int64
}

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.jump.Load())) }

const interruptPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: long
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 10, duration: 30s, per_backend: true, open_loop: true}
    targets:
      - {name: one, url: "{{.URL}}", weight: 1}
      - {name: two, url: "{{.URL}}", weight: 1}
  - name: later
    pool: nodes
    executor: {type: constant-rate, rate: 2, duration: 1s, per_backend: true}
    target: "{{.URL}}"
`

func TestIntegrationInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a, b := startEngine(t, "", 0), startEngine(t, "", 0)
	planPath := writePlan(t, interruptPlan, planData{Backends: []string{a, b}, URL: tg.URL})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// SIGINT once the load is flowing.
		for tg.served.Load() < 10 {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	res := runDriver(t, ctx, testOptions(), planPath)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	rep := res.report
	if rep == nil || rep.Pass || !rep.Cancelled {
		t.Fatalf("report %+v, want a cancelled failure", rep)
	}
	for _, label := range []string{"long/one", "long/two"} {
		e := res.execution(t, label)
		if e.Pass || e.NotRun || !strings.Contains(e.Error, "interrupted") || len(e.Results) != 2 || len(e.BackendErrors) != 0 {
			t.Errorf("%s: %+v, want both results kept and an interrupted error", label, e)
			continue
		}
		for _, br := range e.Results {
			// What came back is whole: every planned request is an
			// outcome or unsent.
			if !br.Cancelled || br.Planned != 150 || record.Sum(br.Counters)+br.Unsent != br.Planned || br.Counters[record.HTTP2xx] == 0 {
				t.Errorf("%s on %s: %+v", label, br.Backend, br)
			}
		}
	}
	if e := res.execution(t, "later"); !e.NotRun || !strings.Contains(e.Error, "interrupted") {
		t.Errorf("later: %+v, want not run", e)
	}
	if d := cmp.Diff(rep.Executions, res.stream); d != "" {
		t.Errorf("stream differs from the report (-report +stream):\n%s", d)
	}
}
