package driver

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/driver/threshold"
	"github.com/sortie-soak/sortie/record"
)

// floorsPlan is the rendered soak shape in small: a heavy target with three
// times the share of a light one, the bash-compatible floor of the smallest
// share (99 % of 3 rps on one backend) on the scenario, and the heavy
// target's own floor (99 % of its 9 rps).
const floorsPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: mesh
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 12, duration: 2s, per_backend: true, open_loop: true}
    targets:
      - {name: heavy, url: "{{.URL}}heavy", weight: 3, thresholds: ["rate:benchmark.http_2xx >= 8.91"]}
      - {name: light, url: "{{.URL}}light", weight: 1}
    thresholds:
      - "rate:benchmark.http_2xx >= 2.97"
`

// TestIntegrationTargetFloor runs a heavy target that loses a third of its
// requests (every third one answered 503). Its own floor fails it, where
// the scenario's single floor, written for the smallest share, would have
// passed it: the defect of one rate floor for all targets.
func TestIntegrationTargetFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	var heavy atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/heavy" && heavy.Add(1)%3 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	engine := startEngine(t, "node-a", 0)
	planPath := writePlan(t, floorsPlan, planData{Backends: []string{engine}, URL: "http://" + ln.Addr().String() + "/"})
	res := runDriver(t, context.Background(), testOptions(), planPath)
	if res.code != 1 || res.report == nil || res.report.Pass {
		t.Fatalf("exit %d, report %v: want exit 1 and a failed report", res.code, res.report)
	}

	e := res.execution(t, "mesh/heavy")
	// 9 rps for 2 s: 18 planned, every third refused.
	if e.Totals[record.HTTP2xx] != 12 || e.Totals[record.HTTP5xx] != 6 {
		t.Fatalf("heavy totals %v, want 12 http_2xx and 6 http_5xx", e.Totals)
	}
	if e.Pass || len(e.Thresholds) != 1 {
		t.Fatalf("heavy: pass %v, thresholds %+v; want a failure on its own floor alone", e.Pass, e.Thresholds)
	}
	own := e.Thresholds[0]
	if own.Expr != "rate:benchmark.http_2xx >= 8.91" || own.Scope != "pool" || own.Pass {
		t.Errorf("heavy threshold %+v, want its own floor, failed on the pool", own)
	}
	if len(e.FailureReasons) != 1 || !strings.HasPrefix(e.FailureReasons[0], "threshold rate:benchmark.http_2xx >= 8.91 failed on the pool: actual ") {
		t.Errorf("heavy failure reasons %q", e.FailureReasons)
	}
	// The smallest share's floor, judged on the same totals, holds: 12
	// answers over the run's elapsed time are above 2.97 per second until
	// the run takes twice its duration.
	floor, err := threshold.Parse("rate:benchmark.http_2xx >= 2.97")
	if err != nil {
		t.Fatal(err)
	}
	if pass, actual := floor.EvalPool(e.Totals, elapsedOf(e)); !pass {
		t.Errorf("the scenario's floor fails heavy too (actual %s): the test shows nothing", actual)
	}

	light := res.execution(t, "mesh/light")
	if len(light.Thresholds) != 1 || light.Thresholds[0].Expr != "rate:benchmark.http_2xx >= 2.97" {
		t.Errorf("light thresholds %+v, want the scenario's floor", light.Thresholds)
	}
	if light.Totals[record.HTTP2xx] != 6 || light.Totals[record.HTTP5xx] != 0 {
		t.Errorf("light totals %v, want 6 http_2xx", light.Totals)
	}
}

// elapsedOf is the longest backend's elapsed time, the divisor of a rate.
func elapsedOf(e record.Execution) (d time.Duration) {
	for _, br := range e.Results {
		d = max(d, time.Duration(br.ElapsedMs)*time.Millisecond)
	}
	return d
}
