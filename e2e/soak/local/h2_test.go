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
	r := runSoakLocal(t, "--protocol", "h2", "--rolls")
	plan, err := os.ReadFile(filepath.Join(r.dir, planFile))
	if err != nil || !strings.Contains(string(plan), "    protocol: http2\n") {
		t.Fatalf("plan.yaml without protocol: http2 (%v):\n%s", err, plan)
	}
	if r.code != 0 || !strings.Contains(r.stdout, "VERDICT PASS targets=8 passed=8") {
		t.Fatalf("exit %d: rolls of draining h2c targets must pass", r.code)
	}
	for target, want := range planned {
		for node, c := range r.counts(t, target) {
			if c["benchmark.http_2xx"] != want {
				t.Errorf("%s on %s: %v, want %d http_2xx", target, node, c, want)
			}
		}
	}
	if n := touched(r.rolls(t)); n == 0 {
		t.Errorf("no roll held a connection at SIGTERM")
	}
}

// TestIntegrationLocalH2RollsNoDrainIsCaught: the negative control holds
// for HTTP/2 too: targets that exit at once on SIGTERM fail the run, with
// the failures attributed to a rolled target and a node.
func TestIntegrationLocalH2RollsNoDrainIsCaught(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--protocol", "h2", "--rolls", "--no-drain")
	checkNoDrainCaught(t, r, `(?m)^FAIL  (svc-\d|echo|uds-echo)  .*(stream_resets|pool_connection_failure)=\d+ \[node-[ab]=\d+`)
}
