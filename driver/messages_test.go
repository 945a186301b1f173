package driver

import (
	"context"
	"testing"

	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/record"
)

// messagesPlan runs raw TCP and UDP echo load, as the sortie + Nighthawk
// stack's plans write it; URL holds the TCP echo, Duration the UDP echo.
const messagesPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
defaults:
  pool: nodes
  timeout: 2s
  executor: {type: constant-rate, rate: 20, duration: 1s, per_backend: true, open_loop: true}
scenarios:
  - name: tcp
    target: "tcp://{{.URL}}"
    body: "ping\n"
    concurrency: "2"
    tcp: {connections: 2, max_inflight_per_connection: 8, drain_duration: 500ms}
    thresholds:
      - "counter:benchmark.tcp_inflight_lost == 0"
      - "benchmark_tcp.message_latency.p99 < 5s"
  - name: udp
    target: "udp://{{.Duration}}"
    body: "datagram"
    udp: {max_inflight: 16, timeout: 500ms}
    thresholds: ["counter:benchmark.udp_lost == 0"]
`

// TestIntegrationMessagePlans runs a TCP and a UDP scenario of a plan
// through the driver and an engine against the fixture's echo services:
// clean, every message echoed and accounted for exactly, with its
// timeline; then with datagrams dropped, the threshold fails on exactly
// those.
func TestIntegrationMessagePlans(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load")
	}
	eng := startEngine(t, "node-a", 0)
	for _, tc := range []struct {
		fault   string
		code    int
		udpLost uint64
	}{{"", 0, 0}, {"udp:drop#3", 1, 3}} {
		t.Run("fault="+tc.fault, func(t *testing.T) {
			echo, err := fixture.StartEcho(fixture.EchoOptions{TCP: "127.0.0.1:0", UDP: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			defer echo.Close()
			if tc.fault != "" {
				if err := echo.SetFault(tc.fault); err != nil {
					t.Fatal(err)
				}
			}
			plan := writePlan(t, messagesPlan, planData{Backends: []string{eng}, URL: echo.TCPAddr(), Duration: echo.UDPAddr()})
			res := runDriver(t, context.Background(), testOptions(), plan)
			if res.code != tc.code || res.report == nil {
				t.Fatalf("exit %d, want %d", res.code, tc.code)
			}
			checkTimelines(t, res)
			tcp := res.execution(t, "tcp").Results
			udp := res.execution(t, "udp").Results
			if len(tcp) != 1 || len(udp) != 1 {
				t.Fatalf("results: tcp %d, udp %d", len(tcp), len(udp))
			}
			for _, br := range []record.BackendResult{tcp[0], udp[0]} {
				if err := br.Conserves(); err != nil || br.Planned != 20 {
					t.Errorf("%s: planned %d: %v", br.Backend, br.Planned, err)
				}
			}
			if c := tcp[0].Counters; c[record.TCPMessagesReceived] != 20 || c[record.TCPMessagesSent] != 20 || c[record.TCPConnectionsOpened] != 4 {
				t.Errorf("tcp counters %v", c)
			}
			if c := udp[0].Counters; c[record.UDPDatagramsReceived] != 20-tc.udpLost || c[record.UDPLost] != tc.udpLost {
				t.Errorf("udp counters %v, want %d lost", c, tc.udpLost)
			}
			if st, ok := tcp[0].Statistics[record.TCPMessageLatency]; !ok || st.Count != 20 {
				t.Errorf("tcp statistics %v", tcp[0].Statistics)
			}
		})
	}
}
