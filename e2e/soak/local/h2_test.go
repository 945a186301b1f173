package local

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/record"
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

// TestIntegrationLocalGRPCTargetDown: a target-down window of a gRPC
// target is answered trailers-only UNAVAILABLE with HTTP 200, in no HTTP
// class: every call of the window is grpc_status.14 and grpc_error, the
// FAIL line names them per node, and each left a failure sample, so the
// gate sets them all against the fault's window (its FAULT line counts
// them, class grpc_status.14) and none is UNATTRIBUTED.
func TestIntegrationLocalGRPCTargetDown(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--protocol", ProtocolGRPC, "--fault", "target-down:svc-1@5s+3s")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	status14 := record.GRPCStatusPrefix + "14"
	var failed uint64
	// 9 rps for 3 s: 27 calls are due in the window on each node, give
	// or take the one whose due time straddles an edge.
	for node, c := range r.counts(t, "svc-1") {
		if n := c[status14]; n < 26 || n > 28 || c[record.GRPCError] != n || c[record.HTTP5xx] != 0 {
			t.Errorf("svc-1 on %s: %v, want 27 ± 1 grpc_status.14, each a grpc_error and none an http_5xx", node, c)
		}
		if record.Sum(c) != 180 {
			t.Errorf("svc-1 on %s: %d outcomes, want 180", node, record.Sum(c))
		}
		failed += c[status14]
	}
	if !regexp.MustCompile(`(?m)^FAIL  svc-1  .*grpc_status\.14=\d+ \[node-a=\d+ node-b=\d+\]`).MatchString(r.stdout) {
		t.Errorf("no FAIL line naming svc-1's grpc_status.14 per node")
	}
	if f := r.fault(t, "target-down", "svc-1"); f.End.Sub(f.Begin) < 3*time.Second {
		t.Errorf("fault line %s: want a window of at least 3s", f)
	}
	m := regexp.MustCompile(`(?m)^FAULT  target-down  svc-1  .*$`).FindString(r.stdout)
	if !strings.Contains(m, fmt.Sprintf("  failures=%d [", failed)) || !strings.Contains(m, "classes=grpc_status.14=") {
		t.Errorf("FAULT line %q: want failures=%d of grpc_status.14", m, failed)
	}
	if strings.Contains(r.stdout, "UNATTRIBUTED") {
		t.Errorf("a failed call of the fault is unattributed")
	}
}
