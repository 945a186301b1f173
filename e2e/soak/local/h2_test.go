package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIntegrationLocalH2Rolls: with --protocol h2 the plan says protocol:
// http2 and the targets speak h2c; rolling restarts of draining targets
// (a GOAWAY, then the answers in flight) pass with zero failures and
// every planned request a 2xx, and the rolls held connections.
func TestIntegrationLocalH2Rolls(t *testing.T) {
	t.Parallel()
	rollsPass(t, ProtocolH2, "    protocol: http2\n")
}

// TestIntegrationLocalH2RollsNoDrainIsCaught: the negative control holds
// for HTTP/2 too: targets that exit at once on SIGTERM fail the run, with
// the failures attributed to a rolled target and a node.
func TestIntegrationLocalH2RollsNoDrainIsCaught(t *testing.T) {
	t.Parallel()
	noDrainCaught(t, ProtocolH2)
}

// TestIntegrationLocalGRPCRolls: with --protocol grpc the plan says grpc:
// {mode: unary} and every request is a unary call to the targets' gRPC
// echo over h2c; rolls of draining targets pass with every planned call
// grpc_status.0 and http_2xx.
func TestIntegrationLocalGRPCRolls(t *testing.T) {
	t.Parallel()
	rollsPass(t, ProtocolGRPC, "    grpc: {mode: unary}\n", "benchmark.grpc_status.0")
}

// TestIntegrationLocalGRPCRollsNoDrainIsCaught: the negative control for
// gRPC: targets that exit at once on SIGTERM fail the run, attributed.
func TestIntegrationLocalGRPCRollsNoDrainIsCaught(t *testing.T) {
	t.Parallel()
	noDrainCaught(t, ProtocolGRPC)
}

// rollsPass runs soak local with --protocol proto and --rolls, finds
// planLine in the plan, a PASS, and every planned request in http_2xx and
// in each of also on every node, and rolls that held connections.
func rollsPass(t *testing.T, proto, planLine string, also ...string) {
	t.Helper()
	r := runSoakLocal(t, "--protocol", proto, "--rolls")
	plan, err := os.ReadFile(filepath.Join(r.dir, planFile))
	if err != nil || !strings.Contains(string(plan), planLine) {
		t.Fatalf("plan.yaml without %q (%v):\n%s", planLine, err, plan)
	}
	if r.code != 0 || !strings.Contains(r.stdout, "VERDICT PASS targets=8 passed=8") {
		t.Fatalf("exit %d: rolls of draining %s targets must pass", r.code, proto)
	}
	for target, want := range planned {
		for node, c := range r.counts(t, target) {
			for _, k := range append([]string{"benchmark.http_2xx"}, also...) {
				if c[k] != want {
					t.Errorf("%s on %s: %v, want %d %s", target, node, c, want, k)
				}
			}
		}
	}
	if n := touched(r.rolls(t)); n == 0 {
		t.Errorf("no roll held a connection at SIGTERM")
	}
}

// noDrainCaught runs soak local with --protocol proto, --rolls and
// --no-drain, and finds the run failed with a reset or connection failure
// attributed to a rolled target and a node, and nothing unattributed.
func noDrainCaught(t *testing.T, proto string) {
	t.Helper()
	r := runSoakLocal(t, "--protocol", proto, "--rolls", "--no-drain")
	checkNoDrainCaught(t, r, `(?m)^FAIL  (svc-\d|echo|uds-echo)  .*(stream_resets|pool_connection_failure)=\d+ \[node-[ab]=\d+`)
}
