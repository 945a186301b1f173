package driver

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// catchUpPlan runs one target at 20 rps on one engine for 4 s; {{.Duration}}
// carries the max_lateness line, or nothing.
const catchUpPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: frozen
    pool: nodes
    timeout: 1s
{{.Duration}}    executor: {type: constant-rate, rate: 20, duration: 4s, per_backend: true, open_loop: true}
    targets:
      - {name: svc, url: "{{.URL}}", weight: 1}
    thresholds: ["counter:benchmark.http_5xx == 0", "counter:benchmark.late_dropped == 0"]
`

// TestIntegrationEngineFrozenCatchUp freezes a real engine process with
// SIGSTOP for 2 s of a 4 s execution, then thaws it with SIGCONT. With
// max_lateness 500ms the engine does not fire the requests that fell due
// while it was frozen and are older than that: they are counted in
// benchmark.late_dropped and never reach the target; the rest of the
// schedule runs as planned. Without max_lateness (the default) the same
// freeze sends the whole backlog at once when the engine thaws.
func TestIntegrationEngineFrozenCatchUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes")
	}
	t.Parallel()
	const planned, freeze, maxLateness = 80, 2 * time.Second, 500 * time.Millisecond
	for _, c := range []struct {
		name    string
		bounded bool
	}{{"max_lateness", true}, {"unbounded", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t)
			victim, p := startEngineProc(t)
			d := planData{Backends: []string{victim}, URL: tg.URL}
			if c.bounded {
				d.Duration = "    max_lateness: " + maxLateness.String() + "\n"
			}
			o := testOptions()
			// The driver waits for the thawed engine's result.
			o.Grace = 20 * time.Second
			done := runDriverAsync(t, o, writePlan(t, catchUpPlan, d))
			waitServed(t, tg, 10, 20*time.Second)
			p.signal(t, syscall.SIGSTOP)
			time.Sleep(freeze)
			p.signal(t, syscall.SIGCONT)
			thawed := time.Now()
			res := <-done
			t.Logf("the driver ended %v after the thaw", time.Since(thawed).Round(time.Millisecond))
			if res.code == 2 {
				t.Fatalf("exit 2: %s", res.stderr)
			}
			e := res.execution(t, "frozen/svc")
			br, ok := backendOf(t, e, victim)
			if !ok {
				t.Fatalf("no result from the thawed engine: %+v", e)
			}
			if err := br.Conserves(); err != nil || br.Planned != planned {
				t.Fatalf("planned %d, want %d; %v", br.Planned, planned, err)
			}
			// The live record's buckets sum to the result, late_dropped
			// included, and each dropped request has its sample.
			checkTimelines(t, res)
			dropped, ok2xx := br.Counters[record.LateDropped], br.Counters[record.HTTP2xx]
			t.Logf("%s: late_dropped=%d http_2xx=%d late_sends=%d served=%d", c.name, dropped, ok2xx, br.Counters[record.LateSends], tg.served.Load())
			if !c.bounded {
				// The whole backlog was sent: every request answered.
				if dropped != 0 || ok2xx != planned {
					t.Errorf("counters %v, want all %d answered", br.Counters, planned)
				}
				return
			}
			// Frozen for at least 2 s (the sleep never returns early; the
			// engine's monotonic clock runs on while it is stopped), so
			// the requests due in at least the first 1.5 s of the freeze
			// were over 500ms late when it thawed: 30, less one at either
			// edge of that window.
			if dropped < 28 || dropped+ok2xx != planned {
				t.Errorf("late_dropped %d and http_2xx %d of %d planned (counters %v), want at least 28 dropped and the rest answered", dropped, ok2xx, planned, br.Counters)
			}
			// What was dropped never reached the target.
			if n := tg.served.Load(); n != int64(ok2xx) {
				t.Errorf("the target served %d, the engine counted %d answers", n, ok2xx)
			}
			if e.Pass {
				t.Error("an execution with requests dropped late passed")
			}
		})
	}
}

// TestIntegrationInterruptStalledTarget interrupts a run (what SIGINT
// does) while its target holds every request unanswered and the plan's
// timeout is 30 s. With the default waits the healthy engine answers the
// cancel within its bounded drain: its result is kept, the requests in
// flight counted lost, and nobody is named silent. Before, the engine
// drained for the 30 s timeout while the driver waited 30 s for it, and
// named it silent.
func TestIntegrationInterruptStalledTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a whole driver")
	}
	t.Parallel()
	var arrived atomic.Int64
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-r.Context().Done() // never answers
	})}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	eng := startEngine(t, "node-a", 0)
	const plan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: stalled
    pool: nodes
    timeout: 30s
    executor: {type: constant-rate, rate: 10, duration: 1m, per_backend: true, open_loop: true}
    targets:
      - {name: svc, url: "{{.URL}}", weight: 1}
    thresholds: ["counter:benchmark.http_5xx == 0"]
`
	o := testOptions()
	def := DefaultOptions()
	o.CancelWait, o.InterruptWait = def.CancelWait, def.InterruptWait
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	done := make(chan result, 1)
	go func() {
		done <- runDriver(t, ctx, o, writePlan(t, plan, planData{Backends: []string{eng}, URL: "http://" + lis.Addr().String() + "/"}))
	}()
	for deadline := time.Now().Add(20 * time.Second); arrived.Load() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the target saw no load in 20 s")
		}
	}
	interrupt()
	res := <-done
	if res.code != 1 {
		t.Fatalf("exit %d, want 1 (interrupted)", res.code)
	}
	e := res.execution(t, "stalled/svc")
	if be, bad := backendErrorOf(e, eng); bad {
		t.Errorf("the healthy engine was named: %+v", be)
	}
	br, ok := backendOf(t, e, eng)
	if !ok {
		t.Fatalf("the engine's result was dropped: %+v", e)
	}
	checkTimelines(t, res)
	lost := br.Counters[record.InflightLost]
	if err := br.Conserves(); err != nil || !br.Cancelled || lost < 3 || br.Unsent == 0 {
		t.Errorf("result %+v (%v), want cancelled, the requests in flight lost, the rest unsent", br, err)
	}
}

// TestIntegrationRequestTimeout runs a plan with request_timeout against
// a target that never answers: every request is benchmark.request_timeout
// within the run, in the report, the live record's buckets and samples,
// and the thresholds judge it; none is left to be lost in flight at the end.
func TestIntegrationRequestTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a whole driver")
	}
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	})}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	eng := startEngine(t, "node-a", 0)
	const plan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: hung
    pool: nodes
    timeout: 30s
    request_timeout: 200ms
    executor: {type: constant-rate, rate: 10, duration: 1s, per_backend: true, open_loop: true}
    targets:
      - {name: svc, url: "{{.URL}}", weight: 1}
    thresholds: ["counter:benchmark.request_timeout == 0"]
`
	res := runDriver(t, context.Background(), testOptions(), writePlan(t, plan, planData{Backends: []string{eng}, URL: "http://" + lis.Addr().String() + "/"}))
	if res.code != 1 {
		t.Fatalf("exit %d, want 1 (the threshold fails)", res.code)
	}
	e := res.execution(t, "hung/svc")
	br, ok := backendOf(t, e, eng)
	if !ok {
		t.Fatalf("no result: %+v", e)
	}
	if n := br.Counters[record.RequestTimeout]; n != 10 || br.Conserves() != nil || br.Counters[record.InflightLost] != 0 {
		t.Errorf("counters %v, want all 10 request_timeout", br.Counters)
	}
	if len(e.Thresholds) != 1 || e.Thresholds[0].Pass || e.Pass {
		t.Errorf("thresholds %+v pass %v, want the request_timeout threshold failed", e.Thresholds, e.Pass)
	}
	checkTimelines(t, res)
}
