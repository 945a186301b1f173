package driver

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// busyPlan holds one execution slot of its engine for long enough.
const busyPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: hold
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 1, duration: 60s, per_backend: true}
    target: "{{.URL}}"
`

// twoPlan starts two executions at once on every backend.
const twoPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: pair
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 2, duration: 1s, per_backend: true}
    targets:
      - {name: a, url: "{{.URL}}", weight: 1}
      - {name: b, url: "{{.URL}}", weight: 1}
`

// TestIntegrationCapRefusalBusy: a stage that fits an idle engine's cap
// is started, and when another run holds a slot the engine refuses at its
// cap; the driver cancels what had started and names the refusal. (A
// stage over the cap of an idle engine never starts: see
// TestIntegrationCapRefusal.)
func TestIntegrationCapRefusalBusy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	eng := startEngine(t, "", 2)
	holdCtx, stopHold := context.WithCancel(context.Background())
	held := make(chan struct{})
	go func() {
		defer close(held)
		runDriver(t, holdCtx, testOptions(), writePlan(t, busyPlan, planData{Backends: []string{eng}, URL: tg.URL}))
	}()
	defer func() { stopHold(); <-held }()

	cc, err := grpc.NewClient(eng, grpc.WithTransportCredentials(credentials.NewTLS(testTLS().client)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for {
		info, err := enginev1.NewEngineClient(cc).Info(context.Background(), &enginev1.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(info.GetRunning()) > 0 {
			break
		}
		select {
		case <-held:
			t.Fatal("the holding run ended before it held a slot")
		case <-time.After(10 * time.Millisecond): // poll, never spin
		}
	}

	res := runDriver(t, context.Background(), testOptions(), writePlan(t, twoPlan, planData{Backends: []string{eng}, URL: tg.URL}))
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	for _, e := range res.report.Executions {
		if e.Pass || e.Refused != record.RefusedExecutionCap || !strings.Contains(e.Error, "refused a start") ||
			!strings.Contains(e.Error, "fits the cap only when nothing else runs on it") {
			t.Errorf("%s: pass=%v refused=%q error %q", e.Label, e.Pass, e.Refused, e.Error)
		}
		for _, br := range e.Results {
			if !br.Cancelled {
				t.Errorf("%s: a started execution of the refused stage was not cancelled: %+v", e.Label, br)
			}
		}
	}
}
