package gate

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sortie-soak/sortie/internal/cli"
)

var update = flag.Bool("update", false, "rewrite the expected.txt golden files of testdata/")

// wantExit is the exit code every fixture must produce. It is kept apart
// from the golden files on purpose: -update rewrites what is printed, never
// what the verdict must be.
var wantExit = map[string]int{
	"clean":                 0,
	"clean-stream":          0,
	"stream-resets":         1,
	"missing-target":        1,
	"overflow-below-floor":  1,
	"saturated-above-floor": 1,
	"lost-nothing":          1,
	"lost-partial":          1,
	"lost-timeline":         1,
	"engine-restarted":      1, // the node fails for its gap, by name; the other node is whole
	"no-backend":            1,
	"slow-node":             0, // latency is printed, not judged
	"slow-node-max-p99":     1,
	"cancelled":             1,
	"frozen-off-plan":       1,
	"inflight-lost":         1,
	"timeout-late":          1,
	"old-format":            2,
	"old-no-results":        2,
	"refused-all":           1,
	"refused-unmarked":      1,
	"staircase-not-run":     1,
	"log-disagrees":         1,
	"floor-edges":           1,
	"floor-edges-planned":   1, // the same counts with planned: exact, no slack
	"accounting-missing":    1,
	"accounting-twice":      1,
	"unsent-cancel":         1,
	"ramp":                  0,
	"stream-torn":           1,
	"stream-fragment":       1,
	"stream-two-runs":       0, // the last run is graded, and it is clean
	"garbage":               2,
	"stream-garbage":        2,
	"pool-short":            1,
	"duplicate-label":       1,
	"no-shares":             0,
	"empty":                 3,
	"extra-label":           1,
	"json":                  1,
	"attrib":                1, // the failures fail their targets wherever they fell
	"attrib-unknown-line":   1, // a live-record line of a type this gate does not know is said, not dropped silently
	"attrib-churn":          1,
	"attrib-no-live":        1,
	"attrib-json":           1,
	"attrib-bad-rolls":      1, // a bad line is a note, not unusable input
	"attrib-report-live":    1, // the report's live_record, found beside it
}

// runCase runs the gate on one fixture directory the way a user would:
// --dir plus the flags in its optional "args" file, one per line. It
// returns what would be printed (stdout, then stderr as cli.Main prints
// it) and the exit code.
func runCase(t *testing.T, dir string, extra ...string) (string, int) {
	t.Helper()
	args := append([]string{"--dir", dir}, extra...)
	if b, err := os.ReadFile(filepath.Join(dir, "args")); err == nil {
		for _, a := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if a = strings.TrimSpace(a); a != "" {
				args = append(args, a)
			}
		}
	}
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), args, &stdout, &stderr)
	// As cli.Main does: an error is printed once, unless it only carries
	// an exit code.
	var ee *cli.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.Err != nil) {
		stderr.WriteString("sortie-gate: " + err.Error() + "\n")
	}
	code := cli.Code(err)
	var out strings.Builder
	out.WriteString(stdout.String())
	if stderr.Len() > 0 {
		out.WriteString("--- stderr\n")
		out.WriteString(stderr.String())
	}
	out.WriteString("--- exit ")
	out.WriteString(strconv.Itoa(code) + "\n")
	return out.String(), code
}

func TestGolden(t *testing.T) {
	dirs, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		if !d.IsDir() || strings.HasPrefix(d.Name(), "fuzz") {
			continue
		}
		name := d.Name()
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			want, ok := wantExit[name]
			if !ok {
				t.Fatalf("testdata/%s has no expected exit code in wantExit", name)
			}
			dir := filepath.Join("testdata", name)
			got, code := runCase(t, dir)
			if code != want {
				t.Errorf("exit %d, want %d\n%s", code, want, got)
			}
			golden := filepath.Join(dir, "expected.txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			exp, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(exp), got); diff != "" {
				t.Errorf("output differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
	for name := range wantExit {
		if !seen[name] {
			t.Errorf("wantExit names %s, which is not under testdata/", name)
		}
	}
}

// TestGoldenWording holds the fixtures to the phrases the harness greps
// for, so a golden refreshed with -update cannot quietly lose them.
func TestGoldenWording(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"clean", []string{"PASS  svc-a  rate=18/18rps http_2xx=2700/2700 backends=2/2  failures=none  lat p50<=", "NODE  svc-a  node-a  ok  ", "VERDICT PASS targets=3 passed=3 failed=0 not_run=0 backends=2 lost_backends=0 report_pass=true\n"}},
		{"stream-resets", []string{"FAIL  svc-b  ", "-- failures stream_resets=2 [node-b=2] stream_resets_before_headers=2 [node-b=2]"}},
		{"overflow-below-floor", []string{"driver saturated: 271 request(s) not sent [node-a=130 node-b=141] (pool_overflow: ", "http_2xx below 99% of the planned 1350 on [node-a=1220 node-b=1209]", "NODE  svc-a  node-a  FAIL  ", "driver saturated: 130 request(s) not sent [node-a=130]"}},
		{"saturated-above-floor", []string{"-- driver saturated: 3 request(s) not sent [node-b=3] (pool_overflow: "}},
		{"inflight-lost", []string{"in flight at the end: 2 request(s) with no outcome [node-b=2]"}},
		{"lost-nothing", []string{"LOST BACKEND node-a (10.0.1.5:8443) [returned nothing] | survivors node-b=ok", "LOST  node-a (10.0.1.5:8443)  targets=3  error: ", "lost_backends=1"}},
		{"lost-partial", []string{"LOST BACKEND node-a (10.0.1.5:8443) [counters reported] | survivors node-b=ok"}},
		{"lost-timeline", []string{"LOST BACKEND node-a (10.0.1.5:8443) at +41s, 369 answered 2xx before | survivors node-b=ok"}},
		{"no-backend", []string{"no backend survived", "lost_backends=2"}},
		{"frozen-off-plan", []string{"ran off plan (150s) on [node-a=291.507s]"}},
		{"refused-all", []string{"REFUSED AT THE EXECUTION CAP", "[refused by: node-a node-b]", "lost_backends=0"}},
		{"refused-unmarked", []string{"REFUSED AT THE EXECUTION CAP", "lost_backends=0"}},
		{"staircase-not-run", []string{"FAIL  ramp/stage-2  -- NOT RUN", "not_run=2"}},
		{"missing-target", []string{"FAIL  grpc-echo  -- missing from the report (never driven)"}},
		{"floor-edges", []string{"FAIL  edge-1336", "PASS  edge-1337", "PASS  edge-1349", "PASS  edge-1350", "PASS  edge-1363", "FAIL  edge-1364", "FAIL  edge-1400", "http_2xx above 101% of the planned 1350 on [node-b=1400]"}},
		{"floor-edges-planned", []string{"FAIL  edge-1337  ", "-- accounting: 1337 outcomes for 1350 planned on node-b (13 missing)  ", "FAIL  edge-1349", "PASS  edge-1350", "FAIL  edge-1363", "(13 counted twice)"}},
		{"accounting-missing", []string{"FAIL  svc-b  ", "-- accounting: 1349 outcomes for 1350 planned on node-b (1 missing)  ", "NODE  svc-b  node-b  FAIL  "}},
		{"accounting-twice", []string{"FAIL  svc-a  ", "-- accounting: 1351 outcomes for 1350 planned on node-b (1 counted twice)  "}},
		{"unsent-cancel", []string{"FAIL  svc-a  ", " | not clean: http_2xx 1349 != 1350 planned on node-b (unsent=1)  ", "PASS  svc-b  "}},
		{"slow-node", []string{"PASS  svc-a", "p99<=912ms"}},
		{"slow-node-max-p99", []string{"FAIL  svc-a", "p99 above 200ms on [node-b=912ms]"}},
		{"stream-torn", []string{"skipped_lines=1", "FAIL  echo  -- missing from the results stream"}},
		{"stream-two-runs", []string{"runs=2", "graded the last run, lines 5..7", "VERDICT PASS"}},
		{"duplicate-label", []string{"FAIL  echo  -- listed 2 times"}},
		{"pool-short", []string{"backends 1/2 dispatched (not dispatched: node-b)"}},
		{"empty", []string{"VERDICT UNOBSERVED "}},
		{"old-format", []string{"without started_at: soak/svc-a", "without per-backend results"}},
		{"cancelled", []string{"error: execution cancelled", `FAIL  run  -- the report says the run was cancelled`}},
		{"attrib", []string{
			"ROLL  svc-1  at=2026-03-02T10:00:10.000Z end=2026-03-02T10:00:12.000Z settle=10s  failures=4 [node-a=1 node-b=3] classes=stream_resets=4  window=2026-03-02T10:00:10.900Z..2026-03-02T10:00:20.400Z recovery=10.4s  replicas=10.0.5.1:8080\n",
			"FAULT  target-down  svc-2  at=2026-03-02T10:00:30.000Z end=2026-03-02T10:00:35.000Z settle=10s  failures=8 [node-a=3 node-b=5] classes=http_5xx=3 dropped=5  window=2026-03-02T10:00:30.500Z..2026-03-02T10:00:35.300Z recovery=5.3s",
			"planted: its failures stay UNATTRIBUTED",
			"UNATTRIBUTED  svc-1  failures=1 [node-a=1] classes=stream_resets=1\n",
			"UNATTRIBUTED  svc-1  node-a  at=2026-03-02T10:00:40.400Z due=2026-03-02T10:00:40.390Z class=stream_resets reason=remote_reset remote=10.0.5.2:8080\n",
			"UNATTRIBUTED  svc-3  node-a  at=2026-03-02T10:00:11.400Z ",
			"UNATTRIBUTED  svc-3  node-a  at=2026-03-02T10:00:50.400Z dropped=2 (counted in the bucket from at=, not sampled)",
		}},
		{"attrib-no-live", []string{"ROLL  svc-1  at=2026-03-02T10:00:10.000Z end=2026-03-02T10:00:12.000Z settle=10s  failures=? (no live record)\n", "NOTE  the report names the live record /var/run/sortie/live.jsonl, which is not there"}},
		{"attrib-json", []string{`"attribution": {`, `"settle_ms": 2000,`, `"recovery_ms": 2500`, `"unattributed": [`}},
		{"attrib-bad-rolls", []string{"NOTE  rolls: testdata/attrib-bad-rolls/rolls.log:1: ROLLED line: at=\"yesterday\": ", "ROLL  svc-1  at=2026-03-02T10:00:10.000Z end=2026-03-02T10:00:12.000Z settle=10s  failures=4 "}},
		{"attrib-report-live", []string{"ROLL  svc-1  at=2026-03-02T10:00:10.000Z end=2026-03-02T10:00:12.000Z settle=10s  failures=4 [node-a=1 node-b=3] ", "UNATTRIBUTED  svc-2  failures=8 "}},
		{"attrib-churn", []string{
			"ROLL  soak/deployment/svc-1  at=2026-03-02T10:00:20.000Z end=2026-03-02T10:00:23.000Z settle=10s  failures=2 [node-b=2] classes=stream_resets=1,pool_connection_failure=1  window=2026-03-02T10:00:20.700Z..2026-03-02T10:00:21.700Z recovery=1.7s  replicas=10.0.5.1:8080\n",
			"ROLL  soak/deployment/svc-2  at=2026-03-02T10:00:25.000Z end=2026-03-02T10:00:27.000Z settle=10s  failures=none\n",
			"-- the roll FAILED: rollout not done within 30s",
			"UNATTRIBUTED  svc-2  node-a  at=2026-03-02T10:00:41.500Z ",
		}},
		{"log-disagrees", []string{"FAIL  testdata/log-disagrees/sortie.log  -- the driver's log shows 2 execution(s) not run"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := runCase(t, filepath.Join("testdata", tc.name))
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
		})
	}
}
