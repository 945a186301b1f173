package driver

import (
	"context"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/record"
)

// wsPlan drives WebSocket echo load as the sortie + Nighthawk stack's
// plans write it: 4 streams per backend over 2 workers, 20 messages.
const wsPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
defaults:
  pool: nodes
  timeout: 2s
  body: '{"type":"ping"}'
  concurrency: "2"
  websocket: {streams: 4, max_inflight_per_stream: 8, drain_duration: 500ms}
  executor: {type: constant-rate, rate: 20, duration: 1s, per_backend: true, open_loop: true}
scenarios:
  - name: ws
    target: "http://{{.URL}}/ws"
    thresholds:
      - "counter:benchmark.stream_upgrade_rejected == 0"
      - "benchmark_stream.message_latency.p99 < 5s"
  - name: wsbinary
    target: "http://{{.URL}}/ws"
    websocket: {streams: 2, binary: true}
  - name: rejected
    target: "http://{{.URL}}/fault/503"
  - name: upgradereset
    target: "http://{{.URL}}/fault/reset"
  - name: reset
    target: "http://RESET_ADDR/ws"
  - name: goaway
    target: "http://GOAWAY_ADDR/ws"
`

// TestIntegrationWebSocketPlan runs websocket scenarios through the driver
// and an engine against the fixture's WebSocket echo: every message echoed
// and accounted for exactly; an upgrade answered 503 is
// stream_upgrade_rejected and one reset stream_open_failures, their
// messages stream_unavailable; a service whose every message resets its
// connection (fault reset), or is answered with a Close frame (fault 503),
// loses each connection's first message (stream_inflight_lost, one
// stream_early_close per connection) and the rest are stream_unavailable;
// and the run fails on the zero-failure set.
func TestIntegrationWebSocketPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load against a fixture target")
	}
	srv, _ := h2Fixture(t, fixture.ModeOK, false)
	reset, _ := h2Fixture(t, fixture.ModeReset, false)
	goaway, _ := h2Fixture(t, fixture.Mode503, false)
	eng := startEngine(t, "node-a", 0)
	text := strings.NewReplacer("RESET_ADDR", reset.Addr(fixture.DefaultService), "GOAWAY_ADDR", goaway.Addr(fixture.DefaultService)).Replace(wsPlan)
	plan := writePlan(t, text, planData{Backends: []string{eng}, URL: srv.Addr(fixture.DefaultService)})
	res := runDriver(t, context.Background(), testOptions(), plan)
	if res.code != 1 || res.report == nil {
		t.Fatalf("exit %d, want 1 (the rejected and reset upgrades fail the run)", res.code)
	}
	checkTimelines(t, res)
	ok := exactResult(t, res, "ws", eng, 20, map[string]uint64{
		record.StreamMessagesSent: 20, record.StreamMessagesReceived: 20, record.StreamsOpened: 4,
	})
	if st, found := ok.Statistics[record.StreamMessageLatency]; !found || st.Count != 20 {
		t.Errorf("ws statistics %v", ok.Statistics)
	}
	exactResult(t, res, "wsbinary", eng, 20, map[string]uint64{
		record.StreamMessagesSent: 20, record.StreamMessagesReceived: 20, record.StreamsOpened: 2,
	})
	exactResult(t, res, "rejected", eng, 20, map[string]uint64{
		record.StreamUpgradeRejected: 4, record.StreamUnavailable: 20, record.StreamsOpened: 0, record.StreamMessagesSent: 0,
	})
	exactResult(t, res, "upgradereset", eng, 20, map[string]uint64{
		record.StreamOpenFailures: 4, record.StreamUnavailable: 20, record.StreamsOpened: 0, record.StreamMessagesSent: 0,
	})
	// Each connection ends at its first message, which is lost with it
	// (one early close each), and every later message finds it gone.
	// Messages are 200 ms apart on a connection, so that is 4 lost and 16
	// unavailable, unless a worker woken late wrote a second message
	// before the end reached the engine: then that one is lost too.
	for _, label := range []string{"reset", "goaway"} {
		br := exactResult(t, res, label, eng, 20, map[string]uint64{
			record.StreamsOpened: 4, record.StreamEarlyClose: 4, record.StreamMessagesReceived: 0,
		})
		c := br.Counters
		if sent := c[record.StreamMessagesSent]; sent < 4 || c[record.StreamInflightLost] != sent || sent+c[record.StreamUnavailable] != 20 {
			t.Errorf("%s: %v, want every message sent lost (4 at least) and the rest unavailable", label, c)
		}
	}
	if n := reset.Status().Services[0].Resets; n != 4 {
		t.Errorf("the fixture reset %d connections, want 4", n)
	}
	for _, label := range []string{"ws", "wsbinary"} {
		br := exactResult(t, res, label, eng, 20, nil)
		for _, k := range record.StreamDetails {
			if record.InZeroFailureSet(k) && br.Counters[k] != 0 {
				t.Errorf("%s: %s = %d", label, k, br.Counters[k])
			}
		}
	}
}
