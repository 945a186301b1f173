package local

import (
	"os"
	"path/filepath"
	"regexp"
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

// TestIntegrationLocalTCPRolls: a raw TCP client never reconnects, so a
// graceful tcp replica told to stop keeps echoing on the connections it
// holds until the engines close them at the end of the load: rolls of
// draining replicas pass with every planned message echoed, and the
// rolled replicas held the engines' connections at SIGTERM.
func TestIntegrationLocalTCPRolls(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--protocol", "tcp", "--rolls")
	checkRawClean(t, r, ProtocolTCP)
	rolls := r.rolls(t)
	if n := touched(rolls); n == 0 {
		t.Errorf("no roll held a connection at SIGTERM")
	}
	var after int64
	for _, roll := range rolls {
		after += roll.Held.AnsweredAfterTerm
	}
	if after == 0 {
		t.Errorf("no rolled replica echoed a message after its SIGTERM: the drain served nothing")
	}
}

// TestIntegrationLocalTCPRollsNoDrainIsCaught: the negative control for
// tcp: replicas that exit at once on SIGTERM close the engines'
// connections, which fails the run with the closes attributed to a rolled
// target and a node.
func TestIntegrationLocalTCPRollsNoDrainIsCaught(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--protocol", "tcp", "--rolls", "--no-drain")
	checkNoDrainCaught(t, r,
		`(?m)^FAIL  (svc-\d|echo|uds-echo)  .*tcp_connection_closed=\d+ \[node-[ab]=\d+`,
		`(?m)^ROLL  (svc-\d|echo|uds-echo)  .* failures=\d+ \[node-[ab]=\d+.* classes=tcp_unavailable=\d+`)
}

// TestIntegrationLocalUDPRollsNoDrain: UDP has no connection to drain, but
// a replica that exits at once on SIGTERM while the endpoints still send
// it datagrams (the propagation lag) loses them: the run fails with
// udp_lost attributed to the rolled targets and nodes.
func TestIntegrationLocalUDPRollsNoDrain(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--protocol", "udp", "--rolls", "--no-drain")
	checkNoDrainCaught(t, r,
		`(?m)^ROLL  (svc-\d|echo|uds-echo)  .* failures=\d+ \[node-[ab]=\d+.* classes=udp_lost=\d+`)
}

// checkNoDrainCaught holds a negative control of the rolls: the run FAILs
// (exit 1), each pattern matches a line of the gate's that names a rolled
// target and a node, and no failure is UNATTRIBUTED.
func checkNoDrainCaught(t *testing.T, r localRun, patterns ...string) {
	t.Helper()
	if r.code != 1 || !strings.Contains(r.stdout, "VERDICT FAIL") {
		t.Fatalf("exit %d: the negative control must FAIL", r.code)
	}
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(r.stdout) {
			t.Errorf("no line of the gate's matches %s", p)
		}
	}
	if strings.Contains(r.stdout, "UNATTRIBUTED") {
		t.Errorf("a failure of a roll is unattributed")
	}
}

// TestIntegrationLocalUDPRollsUnobserved: draining udp rolls lose nothing
// (the Service stand-in sends a removed replica's flows elsewhere before
// its SIGTERM, as kube-proxy clears their conntrack entries), so the gate
// passes them with exact counts; but a UDP replica holds no connection at
// SIGTERM, so the rolls proved nothing about draining: UNOBSERVED, exit 3.
func TestIntegrationLocalUDPRollsUnobserved(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--protocol", "udp", "--rolls")
	if r.code != 3 || !strings.Contains(r.stdout, "\nUNOBSERVED rolls=8 touched=0") {
		t.Fatalf("exit %d: draining udp rolls touch no connection and must be UNOBSERVED", r.code)
	}
	r.code = 0 // the gate's own verdict is checked next
	checkRawClean(t, r, ProtocolUDP)
}
