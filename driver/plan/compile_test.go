package plan

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/driver/threshold"
	"github.com/sortie-soak/sortie/engine/pacer"
)

func mustParse(t *testing.T, yaml string) *Plan {
	t.Helper()
	p, err := Parse("plan.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

const dnsPoolRate = `version: v1
pools:
  - {name: nodes, dns: "engines.test:8443"}
scenarios:
  - name: pool-rate
    pool: nodes
    executor:
      type: constant-rate
      rate: 120
      duration: 10s
    targets:
      - {name: a, url: "http://a.test/"}
      - {name: b, url: "http://b.test/"}
`

// TestCompileResolvedPool checks that a pool's rate is split over the
// backends the run resolved, and refused, at the rate's position, when it
// does not divide over them.
func TestCompileResolvedPool(t *testing.T) {
	p := mustParse(t, dnsPoolRate)
	tests := []struct {
		backends []string
		wantRate uint32 // per worker
		wantErr  string
	}{
		{backends: []string{"10.0.0.1:8443"}, wantRate: 60},
		{backends: []string{"10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.3:8443"}, wantRate: 20},
		{backends: []string{"10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.3:8443", "10.0.0.4:8443"}, wantRate: 15},
		{
			backends: []string{"10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.3:8443", "10.0.0.4:8443", "10.0.0.5:8443", "10.0.0.6:8443", "10.0.0.7:8443"},
			wantErr:  "plan.yaml:9:13: scenario pool-rate: scenarios[0].executor.rate: rate 120 over 7 backends is 17.142857… per backend, not a whole number; nearest whole splits: rate 112 (16 per backend, 8×2) or rate 126 (18 per backend, 9×2)",
		},
		{
			backends: []string{"10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.3:8443", "10.0.0.4:8443", "10.0.0.5:8443", "10.0.0.6:8443", "10.0.0.7:8443", "10.0.0.8:8443"},
			wantErr:  "plan.yaml:9:13: scenario pool-rate: scenarios[0].executor.rate: rate 120 (15 per backend) over weights 1:1 gives shares 7.5×2, not whole numbers; nearest whole splits: rate 112 (14 per backend, 7×2) or rate 128 (16 per backend, 8×2)",
		},
	}
	for _, tt := range tests {
		c, err := p.Compile(map[string][]string{"nodes": tt.backends})
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%d backends: error %v, want %q", len(tt.backends), err, tt.wantErr)
			}
			var perr *Error
			if err != nil && (!errors.As(err, &perr) || perr.Line != 9 || perr.Col != 13) {
				t.Errorf("%d backends: error position %+v, want 9:13", len(tt.backends), perr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%d backends: %v", len(tt.backends), err)
		}
		for _, ex := range c.Scenarios[0].Stages[0].Executions {
			if got := len(ex.Requests); got != len(tt.backends) {
				t.Errorf("%s: %d requests, want %d", ex.Label, got, len(tt.backends))
			}
			if ex.Rate != 60 || ex.PerBackend {
				t.Errorf("%s: rate %v per_backend %v, want 60 for the pool", ex.Label, ex.Rate, ex.PerBackend)
			}
			for _, b := range tt.backends {
				if r := ex.Requests[b].GetRate(); r != tt.wantRate {
					t.Errorf("%s on %s: worker rate %d, want %d", ex.Label, b, r, tt.wantRate)
				}
				if n := ex.Planned[b]; n != uint64(tt.wantRate)*10 {
					t.Errorf("%s on %s: planned %d, want %d", ex.Label, b, n, tt.wantRate*10)
				}
			}
		}
	}
}

func TestCompileBackends(t *testing.T) {
	p := mustParse(t, dnsPoolRate)
	tests := []struct {
		name     string
		backends map[string][]string
		want     string
	}{
		{"missing", nil, "plan.yaml:6:11: scenario pool-rate: scenarios[0].pool: pool nodes has no backends"},
		{"empty", map[string][]string{"nodes": {}}, "plan.yaml:6:11: scenario pool-rate: scenarios[0].pool: pool nodes has no backends"},
		{"twice", map[string][]string{"nodes": {"10.0.0.1:8443", "10.0.0.1:8443"}}, "plan.yaml:6:11: scenario pool-rate: scenarios[0].pool: pool nodes lists backend 10.0.0.1:8443 twice"},
	}
	for _, tt := range tests {
		_, err := p.Compile(tt.backends)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: Compile error %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestCompileExecutions checks every field of the executions of a
// staircase over two backends, stats named by address.
func TestCompileExecutions(t *testing.T) {
	p, err := Load(filepath.Join("testdata", "plans", "valid-staircase.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	backends := []string{"127.0.0.1:7001", "127.0.0.1:7002"}
	c, err := p.Compile(map[string][]string{"local": backends})
	if err != nil {
		t.Fatal(err)
	}
	cs := c.Scenarios[0]
	if cs.Name != "steps" || cs.Pool.Name != "local" || !cmp.Equal(cs.Backends, backends) {
		t.Errorf("scenario %q pool %q backends %v", cs.Name, cs.Pool.Name, cs.Backends)
	}
	type row struct {
		Stage, Label, Target string
		Rate                 float64
		WorkerRate           uint32
		Duration             time.Duration
		Planned              uint64
		StatsTarget          string
	}
	var got []row
	for _, st := range cs.Stages {
		for _, ex := range st.Executions {
			if ex.Scenario != "steps" || !ex.PerBackend || ex.Ramp != 0 || ex.Timeout != 30*time.Second || len(ex.Thresholds) != 2 {
				t.Errorf("%s: %+v", ex.Label, ex)
			}
			for _, b := range backends {
				req := ex.Requests[b]
				if req.GetExecutionId() != "" || req.GetStartTime() != nil {
					t.Errorf("%s on %s: execution_id %q start_time %v, want both unset", ex.Label, b, req.GetExecutionId(), req.GetStartTime())
				}
				if req.GetLabel() != ex.Label || req.GetWorkers() != 2 || req.GetDuration().AsDuration() != ex.Duration {
					t.Errorf("%s on %s: request %v", ex.Label, b, req)
				}
				if want := SanitizeMetricName(b); req.GetStats().GetBackend() != want {
					t.Errorf("%s on %s: stats.backend %q, want %q", ex.Label, b, req.GetStats().GetBackend(), want)
				}
				if ex.Planned[b] != ex.Planned[backends[0]] {
					t.Errorf("%s: planned differs between backends: %v", ex.Label, ex.Planned)
				}
			}
			r := ex.Requests[backends[0]]
			got = append(got, row{st.Name, ex.Label, ex.Target, ex.Rate, r.GetRate(), ex.Duration, ex.Planned[backends[0]], r.GetStats().GetTarget()})
		}
	}
	want := []row{
		{"stage-1", "steps/a/stage-1", "a", 4, 2, 10 * time.Second, 40, "a_stage_1"},
		{"stage-1", "steps/b/stage-1", "b", 4, 2, 10 * time.Second, 40, "b_stage_1"},
		{"stage-2", "steps/a/stage-2", "a", 8, 4, 10 * time.Second, 80, "a_stage_2"},
		{"stage-2", "steps/b/stage-2", "b", 8, 4, 10 * time.Second, 80, "b_stage_2"},
		{"stage-3", "steps/a/stage-3", "a", 16, 8, 5 * time.Second, 80, "a_stage_3"},
		{"stage-3", "steps/b/stage-3", "b", 16, 8, 5 * time.Second, 80, "b_stage_3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("executions (-want +got):\n%s", diff)
	}
	// The requests of two backends are distinct messages: the run sets
	// execution_id and start_time on each.
	ex := cs.Stages[0].Executions[0]
	if ex.Requests[backends[0]] == ex.Requests[backends[1]] {
		t.Error("two backends share one request message")
	}
}

// TestPlannedMatchesEngine checks, for every valid plan, that what the plan
// says each backend will send is what the engine's own schedule plans for
// the request it is given.
func TestPlannedMatchesEngine(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "plans", "valid-*.yaml"))
	for _, file := range files {
		p, err := Load(file)
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.Compile(p.Placeholders())
		if err != nil {
			t.Fatal(err)
		}
		for _, cs := range c.Scenarios {
			for _, st := range cs.Stages {
				for _, ex := range st.Executions {
					for b, req := range ex.Requests {
						pc, err := pacer.New(req.GetRate(), req.GetDuration().AsDuration(), req.GetRamp().AsDuration())
						if err != nil {
							t.Errorf("%s %s on %s: the engine refuses it: %v", file, ex.Label, b, err)
							continue
						}
						if got, want := pc.Planned()*uint64(req.GetWorkers()), ex.Planned[b]; got != want {
							t.Errorf("%s %s on %s: engine plans %d, plan says %d", file, ex.Label, b, got, want)
						}
					}
				}
			}
		}
	}
}

func TestRampingPlanned(t *testing.T) {
	// Ramp to R over T, then hold: R·T/2 + R·(D−T) per worker.
	p := mustParse(t, `version: v1
pools: [{name: l, services: ["127.0.0.1:1"]}]
scenarios:
  - name: r
    pool: l
    target: "http://127.0.0.1/"
    concurrency: "3"
    executor: {type: ramping-rate, rate: 30, ramp_time: 20s, duration: 1m, per_backend: true}
`)
	c, err := p.Compile(p.Placeholders())
	if err != nil {
		t.Fatal(err)
	}
	ex := c.Scenarios[0].Stages[0].Executions[0]
	// 10 per worker: 10·20/2 + 10·40 = 500, three workers.
	if got := ex.Planned["127.0.0.1:1"]; got != 1500 {
		t.Errorf("planned %d, want 1500", got)
	}
	if ex.Ramp != 20*time.Second || ex.Duration != time.Minute || ex.Rate != 30 {
		t.Errorf("ramp %v duration %v rate %v", ex.Ramp, ex.Duration, ex.Rate)
	}
}

func TestPlaceholdersAndPool(t *testing.T) {
	p := mustParse(t, `version: v1
pools:
  - {name: svc, services: ["127.0.0.1:2", "127.0.0.1:1"]}
  - {name: ds, dns: "engines.test:8443"}
scenarios:
  - {name: s, pool: svc, target: "http://x/", executor: {type: constant-rate, rate: 2, duration: 1s}}
`)
	want := map[string][]string{"svc": {"127.0.0.1:2", "127.0.0.1:1"}, "ds": {"engines.test:8443"}}
	if diff := cmp.Diff(want, p.Placeholders()); diff != "" {
		t.Errorf("Placeholders (-want +got):\n%s", diff)
	}
	if got := p.Pool("ds"); got.DNS != "engines.test:8443" || got.Services != nil {
		t.Errorf("Pool(ds) = %+v", got)
	}
	if got := p.Pool("nope"); got.Name != "" {
		t.Errorf("Pool(nope) = %+v", got)
	}
}

func TestParseScenarioFields(t *testing.T) {
	p := mustParse(t, `version: v1
pools: [{name: l, services: ["127.0.0.1:1"]}]
thresholds: ["counter:benchmark.http_5xx == 0"]
scenarios:
  - name: s
    pool: l
    target: "http://x/"
    headers: ["Host: y", "X-A:  spaced  "]
    executor: {type: constant-rate, rate: 2, duration: 1s}
    thresholds: ["latency_2xx.p99 < 1s"]
`)
	s := p.Scenarios[0]
	th := func(e string) threshold.Threshold {
		x, err := threshold.Parse(e)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	want := Scenario{
		Name: "s", Pool: "l",
		Targets:     []Target{{URL: "http://x/", Weight: 1}},
		Method:      "GET",
		Headers:     []Header{{"Host", "y"}, {"X-A", "spaced"}},
		Protocol:    "http1",
		Mode:        ModeHTTP,
		Connections: 100, Concurrency: 1, Timeout: 30 * time.Second,
		Executor:   Executor{Type: ConstantRate, Rate: 2, Duration: time.Second},
		Thresholds: []threshold.Threshold{th("latency_2xx.p99 < 1s"), th("counter:benchmark.http_5xx == 0")},
	}
	if diff := cmp.Diff(want, s, cmp.AllowUnexported(Scenario{}), cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == ".pos"
	}, cmp.Ignore())); diff != "" {
		t.Errorf("scenario (-want +got):\n%s", diff)
	}
}

// TestParseFilesBesideThePlan checks that body_file and TLS files are read
// relative to the plan's directory, not the working directory, and that a
// device is refused rather than read for ever.
func TestParseFilesBesideThePlan(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "body.bin"), []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := `version: v1
pools: [{name: l, services: ["127.0.0.1:1"]}]
scenarios:
  - {name: s, pool: l, target: "http://x/", body_file: BODY, executor: {type: constant-rate, rate: 1, duration: 1s}}
`
	p, err := Parse(filepath.Join(dir, "plan.yaml"), []byte(strings.Replace(plan, "BODY", "body.bin", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p.Scenarios[0].Body); got != "payload" {
		t.Errorf("body %q", got)
	}
	_, err = Parse(filepath.Join(dir, "plan.yaml"), []byte(strings.Replace(plan, "BODY", "/dev/zero", 1)))
	if err == nil || !strings.Contains(err.Error(), "read /dev/zero: not a regular file") {
		t.Errorf("body_file /dev/zero: %v", err)
	}
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, make([]byte, MaxBody+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Parse(filepath.Join(dir, "plan.yaml"), []byte(strings.Replace(plan, "BODY", "big.bin", 1)))
	if err == nil || !strings.Contains(err.Error(), "more than the 3145728 an engine accepts") {
		t.Errorf("body_file too big: %v", err)
	}
}

// TestAliasExpansion checks that a small file naming a large value many
// times through aliases is refused quickly instead of walked for ever.
func TestAliasExpansion(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: v1\nx0: &a0 [\"a\", \"a\", \"a\", \"a\", \"a\", \"a\", \"a\", \"a\", \"a\", \"a\"]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("x" + itoa(i) + ": &a" + itoa(i) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + itoa(i-1))
		}
		b.WriteString("]\n")
	}
	b.WriteString("pools: [{name: l, services: *a8}]\n")
	b.WriteString("scenarios: [{name: s, pool: l, target: \"http://x/\", headers: *a8, executor: {type: constant-rate, rate: 1, duration: 1s}}]\n")
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("accepted")
	}
	// services and headers are lists of strings: a list inside is refused
	// at once, so nothing is expanded; and the unknown keys are reported.
	if !strings.Contains(err.Error(), `unknown field "x0"`) {
		t.Errorf("error: %v", err)
	}
	// Targets are mappings that can repeat through aliases; a plan that
	// expands past the budget is refused.
	b.Reset()
	b.WriteString("version: v1\nt: &t {name: a, url: \"http://x/\"}\n")
	b.WriteString("l0: &l0 [*t, *t, *t, *t, *t, *t, *t, *t, *t, *t]\n")
	b.WriteString("pools: [{name: l, services: [\"127.0.0.1:1\"]}]\n")
	b.WriteString("scenarios: &s0 [")
	for j := 0; j < 200; j++ {
		if j > 0 {
			b.WriteString(", ")
		}
		b.WriteString("{name: s" + itoa(j) + ", pool: l, targets: *big, executor: {type: constant-rate, rate: 1, duration: 1s}}")
	}
	b.WriteString("]\n")
	doc := strings.Replace(b.String(), "scenarios:", "big: &big ["+strings.Repeat("*t, ", 20000)+"*t]\nscenarios:", 1)
	start := time.Now()
	_, err = Parse("bomb.yaml", []byte(doc))
	if err == nil || !strings.Contains(err.Error(), "plan too large") {
		t.Errorf("error: %.300v", err)
	}
	t.Logf("refused in %v", time.Since(start))
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestSanitizeMetricName(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.7:8443":  "10_0_0_7_8443",
		"[::1]:7002":     "___1__7002",
		"Node-A.example": "node_a_example",
		"":               "",
	} {
		if got := SanitizeMetricName(in); got != want {
			t.Errorf("SanitizeMetricName(%q) = %q, want %q", in, got, want)
		}
	}
}
