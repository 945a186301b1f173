package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/record"
)

// rawCounters are, per raw protocol, the counter of the messages echoed
// and the zero-failure set (every other way a message can end).
var rawCounters = map[string]struct {
	echoed string
	zero   []string
}{
	ProtocolTCP: {record.TCPMessagesReceived, []string{record.TCPDeferred, record.TCPUnavailable, record.TCPEchoMismatch,
		record.TCPInflightLost, record.TCPDrainIncomplete, record.TCPConnectFailures, record.TCPConnectionClosed}},
	ProtocolUDP: {record.UDPDatagramsReceived, []string{record.UDPLost, record.UDPSendErrors, record.UDPDeferred,
		record.UDPUnavailable, record.UDPUnexpected}},
}

// checkRawClean holds a raw run to exact counts: the plan's targets are
// all PROTO:// with the body, every planned message of every target and
// node was sent and echoed, none failed, and the gate passed all 8.
func checkRawClean(t *testing.T, r localRun, proto string) {
	t.Helper()
	plan, err := os.ReadFile(filepath.Join(r.dir, planFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(plan), `url: "`+proto+`://127.0.0.1:`); n != 8 || !strings.Contains(string(plan), "    body: \""+rawBody+"\"\n") {
		t.Errorf("plan.yaml has %d %s:// targets (want 8) or no body:\n%s", n, proto, plan)
	}
	if r.code != 0 || !strings.Contains(r.stdout, "VERDICT PASS targets=8 passed=8 failed=0") {
		t.Fatalf("exit %d: a clean %s run must pass", r.code, proto)
	}
	c := rawCounters[proto]
	for target, want := range planned {
		nodes := r.counts(t, target)
		if len(nodes) != 2 {
			t.Errorf("%s: %d nodes, want 2", target, len(nodes))
		}
		for node, got := range nodes {
			if got[c.echoed] != want || record.Succeeded(got) != want {
				t.Errorf("%s on %s: %s=%d succeeded=%d, want %d", target, node, c.echoed, got[c.echoed], record.Succeeded(got), want)
			}
			for _, k := range c.zero {
				if got[k] != 0 {
					t.Errorf("%s on %s: %s=%d, want 0", target, node, k, got[k])
				}
			}
		}
	}
}

// TestIntegrationLocalTCP: --protocol tcp runs the whole loop on the
// targets' TCP echo services through their local Services, with exact
// counts.
func TestIntegrationLocalTCP(t *testing.T) {
	t.Parallel()
	checkRawClean(t, runSoakLocal(t, "--protocol", "tcp"), ProtocolTCP)
}

// TestIntegrationLocalUDP: --protocol udp likewise on the UDP echo
// services, through the UDP stand-in of a Service.
func TestIntegrationLocalUDP(t *testing.T) {
	t.Parallel()
	checkRawClean(t, runSoakLocal(t, "--protocol", "udp"), ProtocolUDP)
}
