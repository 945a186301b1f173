package driver

import (
	"context"
	"testing"

	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/record"
)

const grpcPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: grpc
    pool: nodes
    grpc: {mode: unary}
    body: "hello"
    connections: 2
    timeout: 2s
    request_timeout: 300ms
    executor: {type: constant-rate, rate: 40, duration: 1s, per_backend: true, open_loop: true}
    targets:
{{.URL}}    thresholds: ["counter:benchmark.grpc_error == 0"]
`

// TestIntegrationGRPCUnary runs a grpc unary plan against fixture targets
// speaking h2c, one healthy and one per fault, and finds every planned
// call in exactly one class by the gRPC law (planned = Σ grpc_status.* +
// the stream-less classes): a 503 window of three calls is three
// grpc_status.14 answered HTTP 200 and in no HTTP class, two resets are
// grpc_status.missing and stream_resets, a hang is request_timeout and
// grpc_status.missing; the rest grpc_status.0 and http_2xx.
func TestIntegrationGRPCUnary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load against fixture targets")
	}
	t.Parallel()
	status := func(code string) string { return record.GRPCStatusPrefix + code }
	targets := []struct {
		name  string
		fault fixture.Fault
		want  map[string]uint64
	}{
		{"ok", fixture.Fault{Mode: fixture.ModeOK}, map[string]uint64{record.HTTP2xx: 10, record.GRPCStatusOK: 10}},
		{"unavailable", fixture.Fault{Mode: fixture.Mode503, Count: 3}, map[string]uint64{
			record.HTTP2xx: 7, record.GRPCStatusOK: 7, status("14"): 3, record.GRPCError: 3}},
		{"reset", fixture.Fault{Mode: fixture.ModeReset, Count: 2}, map[string]uint64{
			record.HTTP2xx: 8, record.GRPCStatusOK: 8, record.StreamResets: 2, record.GRPCStatusMissing: 2, record.GRPCError: 2,
			record.ResetsBeforeHeaders: 2, record.StreamResetsPrefix + record.ReasonRemoteReset: 2}},
		{"hang", fixture.Fault{Mode: fixture.ModeHang}, map[string]uint64{
			record.RequestTimeout: 10, record.GRPCStatusMissing: 10, record.GRPCError: 10}},
	}
	var list string
	servers := map[string]*fixture.Server{}
	for _, tg := range targets {
		s, url := h2Fixture(t, fixture.ModeOK, false)
		if tg.fault.Mode != fixture.ModeOK {
			if err := s.Set(fixture.DefaultService, tg.fault); err != nil {
				t.Fatal(err)
			}
		}
		servers[tg.name] = s
		list += "      - {name: " + tg.name + ", url: \"" + url + "acme.Greeter/SayHello\"}\n"
	}
	engine := startEngine(t, "node-a", 0)
	planPath := writePlan(t, grpcPlan, planData{Backends: []string{engine}, URL: list})
	res := runDriver(t, context.Background(), testOptions(), planPath)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1 (the grpc_error threshold fails)", res.code)
	}
	for _, tg := range targets {
		label := "grpc/" + tg.name
		br := exactResult(t, res, label, engine, 10, tg.want)
		// Nothing else: every counter of the result is one the case
		// names, but late_sends (pacing accuracy on a loaded machine, no
		// outcome).
		for k, v := range br.Counters {
			if _, want := tg.want[k]; !want && v != 0 && k != record.LateSends {
				t.Errorf("%s: unexpected %s = %d", label, k, v)
			}
		}
		if n := servers[tg.name].Status().Services[0].HTTP2Requests; n != 10 {
			t.Errorf("%s: the fixture saw %d HTTP/2 requests, want 10", label, n)
		}
		if st, ok := br.Statistics[record.LatencyGRPCOK]; !ok || st.Count != tg.want[record.GRPCStatusOK] {
			t.Errorf("%s: %s missing or its count is not grpc_status.0's (%d)", label, record.LatencyGRPCOK, tg.want[record.GRPCStatusOK])
		}
	}
	checkTimelines(t, res)
}
