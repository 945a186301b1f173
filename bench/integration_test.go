package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runJSON runs the bench with args and --json and decodes its output.
func runJSON(t *testing.T, args ...string) (*Output, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := Run(ctx, append(args, "--json"), &stdout, &stderr)
	if stdout.Len() == 0 {
		t.Fatalf("no output; err %v; stderr:\n%s", err, stderr.String())
	}
	var out Output
	if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
		t.Fatalf("output is not JSON: %v\n%s", jerr, stdout.String())
	}
	if err != nil {
		t.Logf("stderr:\n%s", stderr.String())
	}
	return &out, err
}

func findRow(t *testing.T, out *Output, scenario, tool string) Row {
	t.Helper()
	for _, r := range out.Rows {
		if r.Scenario == scenario && r.Tool == tool {
			return r
		}
	}
	t.Fatalf("no row %s/%s in %+v", scenario, tool, out.Rows)
	return Row{}
}

// TestIntegrationEngine runs the engine scenarios at small rates for 2 s
// against the target, both child processes of this test binary, and
// checks the counts: every planned request sent and answered 2xx. Rates,
// latencies and costs are the machine's: they are measured and must be
// plausible (a p99 not below its p50), never held to a bound here; a
// loaded machine misses the GOAL lines and passes.
func TestIntegrationEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a target and engines for several seconds")
	}
	out, err := runJSON(t, "--scenarios", "soak,low", "--soak-duration", "2s", "--low-rate", "200", "--low-duration", "2s", "--peers", "none")
	if err != nil {
		t.Fatal(err)
	}
	soak := findRow(t, out, scenarioSoak, "engine")
	// 6 executions at 9 rps and 2 at 3 rps for 2 s.
	if soak.Planned != 120 || soak.Sent != 120 || soak.OK != 120 || soak.Errors != 0 {
		t.Errorf("soak: planned %d sent %d ok %d errors %d, want 120 120 120 0", soak.Planned, soak.Sent, soak.OK, soak.Errors)
	}
	low := findRow(t, out, scenarioLow, "engine")
	if low.Planned != 400 || low.Sent != 400 || low.OK != 400 || low.Errors != 0 {
		t.Errorf("low: planned %d sent %d ok %d errors %d, want 400 400 400 0", low.Planned, low.Sent, low.OK, low.Errors)
	}
	for _, r := range []Row{soak, low} {
		if r.CPUSeconds < 0 || r.WallSeconds <= 0 || r.PeakRSSMiB <= 0 || r.P50NS <= 0 || r.P99NS < r.P50NS {
			t.Errorf("%s: implausible measure %+v", r.Scenario, r)
		}
	}
	if n := findRow(t, out, scenarioSoak, "fortio x8"); n.Installed || !strings.Contains(strings.Join(n.Notes, ";"), "not run") {
		t.Errorf("fortio with --peers none: %+v", n)
	}
	// ASSERT lines are counts only, the ones checked above.
	if out.failedAsserts() != 0 {
		t.Errorf("assertions failed: %+v", out.Checks)
	}
	for _, c := range out.Checks {
		if c.Kind == checkAssert && strings.Contains(c.What, "held=") {
			t.Errorf("a held rate asserted: %+v", c)
		}
	}
}

// TestIntegrationPeers runs each installed peer for 1 s at 80 rps (wrk
// closed loop) and checks that its report was read: the counts of a real
// run, not of a captured sample. How many a peer sent in its second
// depends on the machine; that every one it sent was answered does not.
func TestIntegrationPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the peers for several seconds")
	}
	b := &bench{opts: DefaultOptions(os.Getenv("SORTIE_PEERS_BIN"))}
	if b.opts.PeersBin == "" {
		b.opts.PeersBin = "/tmp/peers/bin"
	}
	var open []string
	for _, p := range []string{peerFortio, peerVegeta} {
		if b.findPeer(p) != "" {
			open = append(open, p)
		}
	}
	if len(open) > 0 {
		out, err := runJSON(t, "--scenarios", "low", "--low-rate", "80", "--low-duration", "1s", "--peers", strings.Join(open, ","), "--peers-bin", b.opts.PeersBin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range open {
			r := findRow(t, out, scenarioLow, p)
			if !r.Installed || r.Sent == 0 || r.OK != r.Sent || r.Errors != 0 || r.CPUSeconds <= 0 || r.PeakRSSMiB <= 0 {
				t.Errorf("%s: %+v, want requests sent and every one answered, CPU and RSS measured", p, r)
			}
		}
	}
	if b.findPeer(peerWrk) != "" {
		out, err := runJSON(t, "--scenarios", "high", "--high-rate", "100", "--high-duration", "1s", "--engine-workers", "1", "--step-rates", "none", "--peers", "wrk")
		if err != nil {
			t.Fatal(err)
		}
		if r := findRow(t, out, scenarioHigh, peerWrk); !r.Installed || r.Sent == 0 || r.Errors != 0 || r.OK != r.Sent {
			t.Errorf("wrk: %+v, want requests and no errors", r)
		}
	} else if len(open) == 0 {
		t.Skip("no peer installed")
	}
}

// TestStartPinned pins a child to one core and leaves the bench's own
// threads as they were.
func TestStartPinned(t *testing.T) {
	if !cpuAllowed(0) || !cpuAllowed(1) {
		t.Skip("needs cores 0 and 1")
	}
	before := threadMasks(t)
	cmd := exec.Command("sleep", "30")
	if err := startPinned(cmd, 1, 5); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	if err := checkPinned(cmd.Process.Pid, 1); err != nil {
		t.Error(err)
	}
	st, err := readStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Nice != 5 {
		t.Errorf("child nice %d, want 5", st.Nice)
	}
	for tid, mask := range threadMasks(t) {
		if old, ok := before[tid]; ok && old != mask {
			t.Errorf("thread %d: cpus %q, was %q", tid, mask, old)
		}
		if mask != before[pidKey] {
			t.Errorf("thread %d: cpus %q, process had %q", tid, mask, before[pidKey])
		}
	}
}

const pidKey = -1

// threadMasks describes every thread's allowed cores and nice value; the
// process's main thread under pidKey too.
func threadMasks(t *testing.T) map[int]string {
	t.Helper()
	m := map[int]string{}
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip("no /proc")
	}
	read := func(dir string) string {
		b, err := os.ReadFile(dir + "/status")
		if err != nil {
			return ""
		}
		st, err := parseStatus(b)
		if err != nil {
			t.Fatal(err)
		}
		s, err := os.ReadFile(dir + "/stat")
		if err != nil {
			return ""
		}
		ps, err := parseStat(s)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("cpus %v nice %d", st.CPUs, ps.Nice)
	}
	m[pidKey] = read("/proc/self")
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s := read("/proc/self/task/" + e.Name()); s != "" {
			m[tid] = s
		}
	}
	return m
}

// TestIntegrationBaselineTogether runs the soak shape with a baseline
// engine (this test binary's own, standing in for another commit's) at
// the same time as the engine: both rows are measured, each of its own
// process, each with every planned request answered, and both carry the
// note that they ran together; the ratio goal line is there.
func TestIntegrationBaselineTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a target and two engines for several seconds")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := runJSON(t, "--scenarios", "soak", "--soak-duration", "2s", "--peers", "none",
		"--engine-progress", "1s", "--baseline-engine", self, "--baseline-together")
	if err != nil {
		t.Fatal(err)
	}
	eng, base := findRow(t, out, scenarioSoak, toolEngine), findRow(t, out, scenarioSoak, toolBaseline)
	for _, r := range []Row{eng, base} {
		if r.Planned != 120 || r.Sent != 120 || r.OK != 120 || r.Errors != 0 {
			t.Errorf("%s: planned %d sent %d ok %d errors %d, want 120 120 120 0", r.Tool, r.Planned, r.Sent, r.OK, r.Errors)
		}
		if r.WallSeconds <= 0 || r.PeakRSSMiB <= 0 || !strings.Contains(strings.Join(r.Notes, ";"), "at the same time") {
			t.Errorf("%s: %+v", r.Tool, r)
		}
	}
	found := false
	for _, c := range out.Checks {
		found = found || strings.Contains(c.What, "cpu_ratio=")
	}
	if !found {
		t.Errorf("no cpu_ratio goal line in %+v", out.Checks)
	}
}
