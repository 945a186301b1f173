package driver

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
)

// unjudgedPlan declares no threshold at all.
const unjudgedPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: bare
    pool: nodes
    timeout: 1s
    target: "{{.URL}}"
    executor: {type: constant-rate, rate: 5, duration: 1s}
`

// TestIntegrationUnjudged runs a plan without thresholds twice: against
// a target that answers every request 500, which must not pass (exit 1,
// the reason in the report), and against a healthy one, which passes.
// Both runs warn on stderr that nothing judges the execution, before the
// load.
func TestIntegrationUnjudged(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	engine := startEngine(t, "node-a", 0)

	failing := writePlan(t, unjudgedPlan, planData{Backends: []string{engine}, URL: "http://" + ln.Addr().String() + "/"})
	res := runDriver(t, context.Background(), testOptions(), failing)
	if res.code != 1 {
		t.Fatalf("every request 500 without thresholds: exit %d, want 1", res.code)
	}
	e := res.execution(t, "bare")
	if e.Pass || !strings.Contains(strings.Join(e.FailureReasons, "\n"), "none of its requests got a 2xx") {
		t.Errorf("pass %v, reasons %q", e.Pass, e.FailureReasons)
	}
	if e.Totals["benchmark.http_5xx"] == 0 {
		t.Errorf("totals %v: the target's 500s were not counted", e.Totals)
	}
	warn := "no threshold judges 1 execution(s) (bare)"
	if i, j := strings.Index(res.stderr, warn), strings.Index(res.stderr, "running"); i < 0 || (j >= 0 && j < i) {
		t.Errorf("stderr lacks the warning %q before the load:\n%s", warn, res.stderr)
	}

	healthy := writePlan(t, unjudgedPlan, planData{Backends: []string{engine}, URL: newTarget(t).URL})
	if res := runDriver(t, context.Background(), testOptions(), healthy); res.code != 0 || !strings.Contains(res.stderr, warn) {
		t.Errorf("a healthy target without thresholds: exit %d, want 0 with the warning", res.code)
	}
}
