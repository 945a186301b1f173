package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// The end-to-end test of record: the real soak binary runs `soak local`
// for 20 seconds with each fault, and the gate's lines and the report are
// checked. The runs are light (60 rps per node), so they run in parallel.

var (
	buildOnce sync.Once
	soakBin   string
	buildErr  error
)

func soakBinary(t *testing.T) string {
	t.Helper()
	if os.Getenv("TEST_SRCDIR") != "" {
		// Under Bazel (//e2e/soak:harness_test runs this package's tests)
		// there is no go command and no module checkout to build from.
		t.Skip("under bazel: no go command to build the soak binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "soak-bin-")
		if err != nil {
			buildErr = err
			return
		}
		soakBin = filepath.Join(dir, "soak")
		out, err := exec.Command("go", "build", "-o", soakBin, "../cmd/soak").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return soakBin
}

type localRun struct {
	code   int
	stdout string
	stderr string
	dir    string
	report *record.Report
}

func runSoakLocal(t *testing.T, args ...string) localRun {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end soak runs are skipped under -short")
	}
	out := t.TempDir()
	args = append([]string{"local", "--duration", "20s", "--out", out, "--tag", "run", "--progress", "10s"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, soakBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := localRun{stdout: stdout.String(), stderr: stderr.String(), dir: filepath.Join(out, "run")}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("soak local: %v\n%s", err, stderr.String())
	}
	if src, err := record.ReadReportFile(filepath.Join(r.dir, reportFile)); err == nil {
		r.report = src.Report()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soak %s\nstdout:\n%s\nstderr (tail):\n%s", strings.Join(args, " "), r.stdout, tail(r.stderr, 40))
		}
	})
	return r
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// counts returns a backend's counters by node name for one target.
func (r localRun) counts(t *testing.T, target string) map[string]map[string]uint64 {
	t.Helper()
	if r.report == nil {
		t.Fatal("no report was written")
	}
	for _, e := range r.report.Executions {
		if e.Label != "mesh/"+target {
			continue
		}
		m := map[string]map[string]uint64{}
		for _, res := range e.Results {
			m[res.BackendName] = res.Counters
		}
		return m
	}
	t.Fatalf("no execution mesh/%s in the report", target)
	return nil
}

var planned = map[string]uint64{"svc-1": 180, "svc-2": 180, "svc-3": 180, "svc-4": 180, "svc-5": 180, "svc-6": 180, "echo": 60, "uds-echo": 60}

func TestIntegrationLocalClean(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0", r.code)
	}
	if !strings.Contains(r.stdout, "VERDICT PASS targets=8 passed=8 failed=0 not_run=0 backends=2 lost_backends=0 report_pass=true") {
		t.Errorf("no clean VERDICT line")
	}
	// Every count exact: 9 rps x 20 s = 180 per 9-rps target and node, 60
	// per 3-rps target, and nothing but 2xx.
	for target, want := range planned {
		for _, node := range []string{"node-a", "node-b"} {
			c := r.counts(t, target)[node]
			if c[record.HTTP2xx] != want || record.Sum(c) != want {
				t.Errorf("%s on %s: counters %v, want exactly %d http_2xx", target, node, c, want)
			}
		}
	}
	checkReportHTML(t, r)
	for _, f := range []string{planFile, sharesFile, enginesFile, streamFile, liveFile, driverLog} {
		if _, err := os.Stat(filepath.Join(r.dir, f)); err != nil {
			t.Errorf("run directory lacks %s", f)
		}
	}
	// The live record's timeline sums to the report, class by class.
	if f, err := os.Open(filepath.Join(r.dir, liveFile)); err == nil {
		lv, err := record.ReadLive(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		series := record.BucketsBySeries(lv.Buckets)
		for _, e := range r.report.Executions {
			for _, br := range e.Results {
				if err := record.CheckTimeline(series[record.SeriesKey{Label: e.Label, Backend: br.Backend}], br); err != nil {
					t.Error(err)
				}
			}
		}
	}
	// Each target was judged on its own 2xx floor: 99 % of its share on
	// two nodes.
	for target, floor := range map[string]string{"mesh/svc-1": "17.82", "mesh/echo": "5.94"} {
		var exprs []string
		for _, e := range r.report.Executions {
			for _, th := range e.Thresholds {
				if e.Label == target && strings.HasPrefix(th.Expr, "rate:") {
					exprs = append(exprs, th.Expr)
				}
			}
		}
		if len(exprs) != 1 || exprs[0] != "rate:benchmark.http_2xx >= "+floor {
			t.Errorf("%s judged on rate thresholds %q, want its own floor %s", target, exprs, floor)
		}
	}
	if !strings.Contains(r.stderr, "progress mesh/svc-1") {
		t.Errorf("no progress line on stderr")
	}
	checkRunTLS(t, r, true)
}

// checkRunTLS checks the run's control plane: with mTLS (the default) the
// run's CA files under tls/, keys 0600, and every engine serving mTLS with
// the local targets' allowlist; in plaintext, no tls/ and engines saying so.
func checkRunTLS(t *testing.T, r localRun, mtls bool) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(r.dir, tlsDir))
	if !mtls {
		if err == nil {
			t.Errorf("a plaintext run wrote %s/", tlsDir)
		}
	} else if err != nil || len(entries) != 5 {
		t.Errorf("tls/ holds %d files (%v), want the CA, two certificates and two keys", len(entries), err)
	}
	for _, e := range entries {
		st, err := os.Stat(filepath.Join(r.dir, tlsDir, e.Name()))
		if err == nil && strings.HasSuffix(e.Name(), ".key") && st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", e.Name(), st.Mode().Perm())
		}
	}
	for _, node := range []string{"node-a", "node-b"} {
		log, err := os.ReadFile(filepath.Join(r.dir, "engine-"+node+".log"))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("mtls=%v allow_targets=127.0.0.1", mtls)
		if !strings.Contains(string(log), want) {
			t.Errorf("engine %s log lacks %q:\n%s", node, want, tail(string(log), 10))
		}
	}
}

// TestIntegrationLocalPlaintext: --insecure-plaintext opts out of the
// run's mTLS, and the run passes the same.
func TestIntegrationLocalPlaintext(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--insecure-plaintext")
	if r.code != 0 || !strings.Contains(r.stdout, "VERDICT PASS targets=8 passed=8") {
		t.Fatalf("exit %d, want a PASS", r.code)
	}
	checkRunTLS(t, r, false)
}

// rolls reads the run's rolls.log with the gate's reader: one ROLLED line
// per target, each from its begin through its SIGTERM to its end, and
// saying what the old replica held.
func (r localRun) rolls(t *testing.T) []record.Roll {
	t.Helper()
	log, err := record.ReadRollsFile(filepath.Join(r.dir, rollsLog))
	if err != nil {
		t.Fatalf("rolls.log: %v", err)
	}
	seen := map[string]bool{}
	for _, roll := range log.Rolls {
		if roll.Failed || roll.Held == nil || roll.Term.Before(roll.Begin) || roll.End.Before(roll.Term) {
			t.Errorf("rolls.log line %d: %s", roll.Line, roll)
		}
		seen[roll.Ref] = true
	}
	if len(log.Rolls) != len(planned) || len(seen) != len(planned) {
		t.Errorf("%d rolls of %d targets in rolls.log, want each of the %d once", len(log.Rolls), len(seen), len(planned))
	}
	if got := strings.Count(r.stderr, "ROLLED "); got != len(planned) {
		t.Errorf("%d ROLLED lines on stderr, want %d", got, len(planned))
	}
	return log.Rolls
}

func touched(rolls []record.Roll) int {
	n := 0
	for _, r := range rolls {
		if r.Touched() {
			n++
		}
	}
	return n
}

func TestIntegrationLocalRollsDrained(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--rolls")
	if r.code != 0 || !strings.Contains(r.stdout, "VERDICT PASS targets=8 passed=8") || strings.Contains(r.stdout, "UNOBSERVED") {
		t.Fatalf("exit %d: rolling restarts of draining targets must pass with zero failures", r.code)
	}
	// The rolls were evidence: the old replicas held the engines'
	// keep-alive connections when SIGTERM landed, and drained them.
	rolls := r.rolls(t)
	if n := touched(rolls); n == 0 {
		t.Errorf("no roll held a connection at SIGTERM: %v", rolls)
	}
	var answered int64
	for _, roll := range rolls {
		answered += roll.Held.AnsweredAfterTerm
	}
	if answered == 0 {
		t.Errorf("no old replica answered a request after its SIGTERM: the drain was never exercised")
	}
}

// TestIntegrationLocalRollsIdleIsUnobserved: rolls of replicas that no
// endpoint routes to held nothing at SIGTERM. The gate passes the run (no
// failures), and soak local says UNOBSERVED after it, exit 3.
func TestIntegrationLocalRollsIdleIsUnobserved(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--rolls", "--roll-idle")
	if r.code != 3 {
		t.Fatalf("exit %d, want 3 (UNOBSERVED)", r.code)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := "UNOBSERVED rolls=8 touched=0: no rolled replica held a connection or a request at SIGTERM; the rolls prove nothing about draining"
	if len(lines) < 2 || lines[len(lines)-1] != want || !strings.HasPrefix(lines[len(lines)-2], "VERDICT PASS targets=8 passed=8") {
		t.Errorf("want the gate's VERDICT PASS, then\n%s", want)
	}
	for _, roll := range r.rolls(t) {
		if *roll.Held != (record.Held{}) {
			t.Errorf("an idle replica held %+v: %s", *roll.Held, roll)
		}
	}
}

func TestIntegrationLocalRollsNoDrainIsCaught(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--rolls", "--no-drain")
	if r.code != 1 || !strings.Contains(r.stdout, "VERDICT FAIL") || strings.Contains(r.stdout, "UNOBSERVED") {
		t.Fatalf("exit %d: the negative control must FAIL", r.code)
	}
	if n := touched(r.rolls(t)); n == 0 {
		t.Errorf("no naive replica held a connection at SIGTERM")
	}
	// The failures are attributed: a FAIL line names a rolled target and a
	// failure class with its node.
	re := regexp.MustCompile(`(?m)^FAIL  (svc-\d|echo|uds-echo)  .*(stream_resets|pool_connection_failure)=\d+ \[node-[ab]=\d+`)
	if !re.MatchString(r.stdout) {
		t.Errorf("no FAIL line attributes a reset or connection failure to a rolled target and node")
	}
	// And in time: every failure falls in the roll of its own target, so
	// none is unattributed, and each roll that failed requests prints its
	// error window; the failures the ROLL lines count are those of the
	// FAIL lines, target by target.
	if strings.Contains(r.stdout, "UNATTRIBUTED") {
		t.Errorf("a failure of a roll is unattributed")
	}
	keepScreenshot(t, checkInBrowser(t, checkReportHTML(t, r)))
	rolls := r.rollLines(t)
	if len(rolls) != len(planned) {
		t.Fatalf("%d ROLL lines, want one per target (%d)", len(rolls), len(planned))
	}
	windows := 0
	for target := range planned {
		var fails uint64
		for _, c := range r.counts(t, target) {
			for k, v := range c {
				if k == record.StreamResets || k == record.PoolConnectionFailure || k == record.HTTP5xx || k == record.PoolFailureTimeout {
					fails += v
				}
			}
		}
		l, ok := rolls[target]
		switch {
		case !ok:
			t.Errorf("no ROLL line of %s", target)
		case fails == 0 && !strings.Contains(l, "  failures=none"):
			t.Errorf("%s failed nothing, its ROLL line says otherwise: %s", target, l)
		case fails > 0 && !strings.Contains(l, fmt.Sprintf("  failures=%d [", fails)):
			t.Errorf("%s failed %d requests, its ROLL line: %s", target, fails, l)
		case fails > 0:
			if !regexp.MustCompile(` window=\S+\.\.\S+ recovery=[0-9.]+s  replicas=127\.0\.0\.1:\d+`).MatchString(l) {
				t.Errorf("ROLL line of %s without its error window, recovery and replica: %s", target, l)
			}
			windows++
		}
	}
	if windows == 0 {
		t.Errorf("no ROLL line printed an error window")
	}
	if !strings.HasPrefix(r.stdout, "FAIL  ") && !strings.HasPrefix(r.stdout, "PASS  ") {
		t.Errorf("stdout does not start with the gate's target lines")
	}
}

// rollLines returns the gate's ROLL lines by the target they rolled.
func (r localRun) rollLines(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ROLL  (\S+)  .*$`).FindAllStringSubmatch(r.stdout, -1) {
		if _, dup := out[m[1]]; dup {
			t.Errorf("two ROLL lines of %s", m[1])
		}
		out[m[1]] = m[0]
	}
	return out
}

// window reads the error window of a ROLL or FAULT line.
func window(t *testing.T, line string) (first, last time.Time) {
	t.Helper()
	m := regexp.MustCompile(` window=(\S+)\.\.(\S+) `).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no window in %q", line)
	}
	var err error
	if first, err = time.Parse(time.RFC3339, m[1]); err == nil {
		last, err = time.Parse(time.RFC3339, m[2])
	}
	if err != nil {
		t.Fatalf("window of %q: %v", line, err)
	}
	return first, last
}

func TestIntegrationLocalTargetDown(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--fault", "target-down:svc-2@5s+5s")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	// 9 rps for 5 s: 45 requests are due in the window on each node, give
	// or take the one whose due time straddles an edge.
	for node, c := range r.counts(t, "svc-2") {
		if n := c[record.HTTP5xx]; n < 44 || n > 46 {
			t.Errorf("svc-2 on %s: http_5xx=%d, want 45 ± 1", node, n)
		}
		if record.Sum(c) != 180 {
			t.Errorf("svc-2 on %s: %d outcomes, want 180", node, record.Sum(c))
		}
	}
	if !regexp.MustCompile(`(?m)^FAIL  svc-2  .*http_5xx=\d+ \[node-a=\d+ node-b=\d+\]`).MatchString(r.stdout) {
		t.Errorf("no FAIL line naming svc-2's 5xx per node")
	}
	if !strings.Contains(r.stdout, "PASS  svc-1") {
		t.Errorf("the targets left alone must pass")
	}
	// faults.log bounds the window as the target kept it, and counts the
	// 503s it answered: those the engines counted.
	f := r.fault(t, "target-down", "svc-2")
	var fivexx uint64
	for _, c := range r.counts(t, "svc-2") {
		fivexx += c[record.HTTP5xx]
	}
	if got, _ := f.Field("failed"); got != strconv.FormatUint(fivexx, 10) || f.End.Sub(f.Begin) < 5*time.Second {
		t.Errorf("fault line %s: want failed=%d and a window of at least 5s", f, fivexx)
	}
	// The gate sets the 503s against the fault: its FAULT line counts them
	// all, and its error window is the fault's, within one bucket (1 s)
	// at either edge.
	m := regexp.MustCompile(`(?m)^FAULT  target-down  svc-2  .*$`).FindString(r.stdout)
	if !strings.Contains(m, fmt.Sprintf("  failures=%d [", fivexx)) || !strings.Contains(m, "classes=http_5xx=") {
		t.Fatalf("FAULT line %q: want failures=%d of http_5xx", m, fivexx)
	}
	first, last := window(t, m)
	if d := first.Sub(f.Begin); d < -time.Second || d > time.Second {
		t.Errorf("5xx window begins %s, the fault %s: %s apart, want within 1s", first, f.Begin, d)
	}
	if d := last.Sub(f.End); d < -time.Second || d > time.Second {
		t.Errorf("5xx window ends %s, the fault %s: %s apart, want within 1s", last, f.End, d)
	}
	if strings.Contains(r.stdout, "UNATTRIBUTED") {
		t.Errorf("a 503 of the fault is unattributed")
	}
}

// fault returns the one FAULT line of kind and subject in faults.log.
func (r localRun) fault(t *testing.T, kind, subject string) record.Fault {
	t.Helper()
	log, err := record.ReadRollsFile(filepath.Join(r.dir, faultsLog))
	if err != nil {
		t.Fatalf("faults.log: %v", err)
	}
	var found []record.Fault
	for _, f := range log.Faults {
		if f.Kind == kind && f.Subject == subject {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d FAULT %s %s lines in faults.log, want 1: %+v", len(found), kind, subject, log.Faults)
	}
	return found[0]
}

// TestIntegrationLocalTargetFail: a target made to reset a few requests
// outside any roll. The count form fails exactly that many, spread over
// both nodes; the window form every request of the window on each node.
// Both are stream resets the target sent (remote_reset), and both are in
// faults.log with their ends.
func TestIntegrationLocalTargetFail(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--fault", "target-fail:svc-3@6s+6", "--fault", "target-fail:svc-4@10s+1s")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	resets := func(target string) map[string]uint64 {
		m := map[string]uint64{}
		for node, c := range r.counts(t, target) {
			if c[record.StreamResets] != c[record.StreamResetsPrefix+record.ReasonRemoteReset] || record.Sum(c) != 180 {
				t.Errorf("%s on %s: %v, want every failure a remote reset and 180 outcomes", target, node, c)
			}
			for k, v := range c {
				if record.InZeroFailureSet(k) && !strings.HasPrefix(k, record.StreamResets) && v > 0 {
					t.Errorf("%s on %s: %s=%d, want stream resets only", target, node, k, v)
				}
			}
			m[node] = c[record.StreamResets]
		}
		return m
	}
	svc3 := resets("svc-3")
	if svc3["node-a"]+svc3["node-b"] != 6 || svc3["node-a"] == 0 || svc3["node-b"] == 0 {
		t.Errorf("svc-3 resets %v, want 6 in all, on both nodes", svc3)
	}
	// 9 rps for 1 s: 9 requests due in the window per node, ± 1 at its edges.
	for node, n := range resets("svc-4") {
		if n < 8 || n > 10 {
			t.Errorf("svc-4 on %s: %d resets, want 9 ± 1", node, n)
		}
	}
	for _, target := range []string{"svc-3", "svc-4"} {
		if !regexp.MustCompile(`(?m)^FAIL  ` + target + `  .*stream_resets=\d+ \[node-a=\d+ node-b=\d+\]`).MatchString(r.stdout) {
			t.Errorf("no FAIL line naming %s's resets on both nodes", target)
		}
	}
	f3 := r.fault(t, "target-fail", "svc-3")
	if got, _ := f3.Field("failed"); got != "6" || f3.End.Before(f3.Begin) {
		t.Errorf("fault line %s: want failed=6, from its begin to its end", f3)
	}
	f4 := r.fault(t, "target-fail", "svc-4")
	svc4 := resets("svc-4")
	if got, _ := f4.Field("failed"); got != strconv.FormatUint(svc4["node-a"]+svc4["node-b"], 10) || f4.End.Sub(f4.Begin) < time.Second {
		t.Errorf("fault line %s: want failed=%d and a window of at least 1s", f4, svc4["node-a"]+svc4["node-b"])
	}
	if !strings.Contains(r.stdout, "PASS  svc-1") {
		t.Errorf("the targets left alone must pass")
	}
	// No roll or fault explains them: the gate lists svc-3's six resets
	// (and svc-4's) as UNATTRIBUTED, each with its time and replica, and
	// the planted FAULT lines count them without excusing them.
	if !strings.Contains(r.stdout, "UNATTRIBUTED  svc-3  failures=6 [node-a=") {
		t.Errorf("svc-3's 6 resets are not listed as UNATTRIBUTED")
	}
	each := regexp.MustCompile(`(?m)^UNATTRIBUTED  svc-3  node-[ab]  at=\S+ due=\S+ class=stream_resets reason=remote_reset remote=127\.0\.0\.1:\d+$`)
	if n := len(each.FindAllString(r.stdout, -1)); n != 6 {
		t.Errorf("%d UNATTRIBUTED lines of svc-3's resets, want 6", n)
	}
	for _, target := range []string{"svc-3", "svc-4"} {
		if !regexp.MustCompile(`(?m)^FAULT  target-fail  ` + target + `  .*  planted: its failures stay UNATTRIBUTED$`).MatchString(r.stdout) {
			t.Errorf("no planted FAULT line of %s", target)
		}
	}
	if regexp.MustCompile(`(?m)^UNATTRIBUTED  svc-(1|2|5|6)  `).MatchString(r.stdout) {
		t.Errorf("a target left alone has unattributed failures")
	}
}

func TestIntegrationLocalEngineKill(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--fault", "engine-kill:node-b@8s")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	if !strings.Contains(r.stdout, "LOST BACKEND node-b") || !regexp.MustCompile(`(?m)^LOST  node-b `).MatchString(r.stdout) {
		t.Errorf("node-b is not named lost")
	}
	if f := r.fault(t, "engine-kill", "node-b"); !f.End.Equal(f.Begin) {
		t.Errorf("fault line %s: a kill is an instant", f)
	}
	for target, want := range planned {
		c := r.counts(t, target)["node-a"]
		if c[record.HTTP2xx] != want {
			t.Errorf("%s on the surviving node-a: %v, want %d http_2xx", target, c, want)
		}
	}
	// node-b keeps what it had counted, up to at most 2 s before the kill
	// some 8 s in (the fault's own timing is the driver's start estimate,
	// so a second of slack above).
	if !regexp.MustCompile(`LOST BACKEND node-b \([^)]*\) at \+[0-9.]+s, [0-9]+ answered 2xx before`).MatchString(r.stdout) {
		t.Errorf("the gate does not say when node-b went away and what it had counted")
	}
	for _, e := range r.report.Executions {
		var partial *record.BackendResult
		for i, br := range e.Results {
			if br.BackendName == "node-b" {
				partial = &e.Results[i]
			}
		}
		if partial == nil || !partial.Partial {
			t.Errorf("%s: node-b's result %+v, want a partial one", e.Label, partial)
			continue
		}
		from, _ := time.Parse(time.RFC3339Nano, partial.StartedAt)
		until, _ := time.Parse(time.RFC3339Nano, partial.CountedUntil)
		if at := until.Sub(from); at < 6*time.Second || at > 9*time.Second {
			t.Errorf("%s: node-b counted until +%v, want within 2 s before the kill at +8s", e.Label, at)
		}
		if err := partial.Conserves(); err != nil || partial.Planned == 0 {
			t.Errorf("%s: node-b's partial result planned %d: %v", e.Label, partial.Planned, err)
		}
	}
}

func TestIntegrationLocalEngineFreeze(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--fault", "engine-freeze:node-b@5s+3m",
		"--deadline-grace", "1s", "--answer-window", "1s", "--cancel-wait", "2s")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	if r.report == nil {
		t.Fatal("the report was not written while node-b was frozen")
	}
	for _, e := range r.report.Executions {
		var silent bool
		for _, be := range e.BackendErrors {
			silent = silent || strings.Contains(be.Error, "silent")
		}
		if !silent {
			t.Errorf("%s: node-b not named silent in backend_errors %v", e.Label, e.BackendErrors)
		}
	}
	if c := r.counts(t, "svc-1")["node-a"]; c[record.HTTP2xx] != 180 {
		t.Errorf("node-a not whole: %v", c)
	}
}

func TestIntegrationLocalDriverFreeze(t *testing.T) {
	t.Parallel()
	// The driver sleeps through every deadline; on resume it takes the
	// answers waiting for it and calls no engine silent.
	r := runSoakLocal(t, "--fault", "driver-freeze:@5s+50s",
		"--deadline-grace", "1s", "--answer-window", "1s", "--cancel-wait", "2s")
	if r.code != 0 || !strings.Contains(r.stdout, "VERDICT PASS targets=8 passed=8") {
		t.Fatalf("exit %d: a frozen driver must take the waiting answers", r.code)
	}
}

// checkDriverResumed: a run whose driver a fault stopped and the harness
// started again with --resume passes whole, each request counted once on
// every node, and the gate names the driver's gap.
func checkDriverResumed(t *testing.T, r localRun, kind, why string) {
	t.Helper()
	if r.code != 0 || !strings.Contains(r.stdout, "VERDICT PASS targets=8 passed=8") {
		t.Fatalf("exit %d: the resumed run must PASS", r.code)
	}
	for target, want := range planned {
		for _, node := range []string{"node-a", "node-b"} {
			c := r.counts(t, target)[node]
			var failures uint64
			for _, k := range record.FailureClasses {
				failures += c[k]
			}
			if c[record.HTTP2xx] != want || failures != 0 {
				t.Errorf("%s on %s: %v, want exactly %d http_2xx", target, node, c, want)
			}
		}
	}
	if !regexp.MustCompile(`(?m)^DRIVER  gap from=\S+ to=\S+  -- ` + regexp.QuoteMeta(why) + `$`).MatchString(r.stdout) {
		t.Errorf("the gate does not name the driver's gap (%s)", why)
	}
	if len(r.report.DriverGaps) != 1 {
		t.Errorf("report driver_gaps %+v, want one", r.report.DriverGaps)
	}
	r.fault(t, kind, "driver")
	if !strings.Contains(r.stderr, "starting the driver again with --resume") {
		t.Errorf("the harness did not start the driver again")
	}
}

func TestIntegrationLocalDriverKill(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--fault", "driver-kill:@6s+2s")
	checkDriverResumed(t, r, "driver-kill", "the driver stopped without detaching (killed)")
}

func TestIntegrationLocalDriverTerm(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--fault", "driver-term:@6s+2s")
	checkDriverResumed(t, r, "driver-term", "detached (SIGTERM)")
	if !strings.Contains(r.stderr, "DETACHED run ") {
		t.Errorf("the driver did not say it detached")
	}
}

// The negative control: the same kill, and no driver started again. No
// report, and never a PASS.
func TestIntegrationLocalDriverKillNoResume(t *testing.T) {
	t.Parallel()
	r := runSoakLocal(t, "--fault", "driver-kill:@6s", "--no-resume")
	if r.code == 0 || strings.Contains(r.stdout, "VERDICT PASS") || r.report != nil {
		t.Fatalf("exit %d, report %v: a killed driver never resumed must not PASS", r.code, r.report != nil)
	}
}

// TestIntegrationLocalInterrupted: Ctrl-C during the load. The driver is
// stopped, writes the report of the cancelled run, and soak local grades
// it: the gate's lines on stdout and its exit code, never 0.
func TestIntegrationLocalInterrupted(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end soak runs are skipped under -short")
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, soakBinary(t), "local", "--duration", "20s", "--out", out, "--tag", "run", "--progress", "10s")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		said.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "progress mesh/") {
			// The load runs: interrupt it, as Ctrl-C does.
			cmd.Process.Signal(os.Interrupt)
			break
		}
	}
	io.Copy(&said, stderr)
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("soak local: %v\n%s", err, said.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr (tail):\n%s", stdout.String(), tail(said.String(), 40))
		}
	})
	if code != 1 {
		t.Errorf("exit %d, want 1 (the gate's FAIL of a cancelled run)", code)
	}
	if !strings.Contains(stdout.String(), "VERDICT FAIL") || !strings.Contains(stdout.String(), "cancelled") {
		t.Errorf("the interrupted run was not graded")
	}
	src, err := record.ReadReportFile(filepath.Join(out, "run", reportFile))
	if err != nil {
		t.Fatalf("the driver wrote no report on the interrupt: %v", err)
	}
	if !src.Report().Cancelled {
		t.Errorf("the report does not say the run was cancelled")
	}
}
