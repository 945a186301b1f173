//go:build lab

// The tests of record of the cluster path, on the lab's real cluster.
//
// They sit behind the build tag lab rather than behind a skip: they need
// root and a running lab (a cold build of its binaries takes 15 to 30
// minutes), so the default `go test ./...` cannot run them, and a skip
// there would read as a pass. With the tag, `go test ./...` does not even
// build them, and whoever asks for them with -tags lab asked for the lab:
// a lab that is not there is a failure that says how to start it. .ci/lab
// starts the lab, runs them with -tags lab and stops the lab.
package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/e2e/soak"
	"github.com/sortie-soak/sortie/e2e/soak/lab"
	"github.com/sortie-soak/sortie/record"
)

// labEnv is the variable that points the tests at the lab's kubeconfig.
const labEnv = "SORTIE_LAB_KUBECONFIG"

// theLab returns the manifest of the running lab, or fails the test with
// how to start one.
func theLab(t *testing.T) lab.Manifest {
	t.Helper()
	kc := os.Getenv(labEnv)
	if kc == "" {
		t.Fatalf("%s is not set: these tests need the lab. As root: go run ./e2e/soak/cmd/soak lab up, then %s=/var/lib/sortie-lab/kubeconfig go test -tags lab ./e2e/soak/lab/ (or run .ci/lab, which does both and stops the lab after)", labEnv, labEnv)
	}
	m, err := lab.ReadManifest(filepath.Dir(kc))
	if err != nil {
		t.Fatalf("%s=%s: no running lab there (%v); start it with soak lab up", labEnv, kc, err)
	}
	if m.Values == "" {
		t.Fatalf("the lab at %s was started with --images=false: the chart has no images to pull", filepath.Dir(kc))
	}
	return m
}

// runArgs are the flags of `soak run e2e` against the lab.
func runArgs(m lab.Manifest) []string {
	return []string{"run", "e2e", "--kubeconfig", m.Kubeconfig, "--context", m.Context, "--namespace", m.Namespace,
		"--targets", m.Targets, "--values", m.Values, "--statsd", "off"}
}

// soakRun runs the soak command in this process, its output kept in
// DIR/out.txt as well, and returns its stdout.
func soakRun(t *testing.T, ctx context.Context, logFile string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t0 := time.Now()
	runErr := soak.Run(ctx, args, io.MultiWriter(&out, f), io.MultiWriter(&errb, f))
	t.Logf("soak %s: %v after %s", strings.Join(args[:2], " "), runErr, time.Since(t0).Round(time.Second))
	if runErr != nil {
		t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	return out.String(), runErr
}

// verdictLines are the lines a test logs as its verdict.
var verdictLines = regexp.MustCompile(`(?m)^(SOAK |VERDICT |SORTIE_SAVED |SUMMARY restart-watch |STEP preflight |PREFLIGHT FAIL|ABORT ).*$`)

func logVerdicts(t *testing.T, out string) {
	t.Helper()
	for _, l := range verdictLines.FindAllString(out, -1) {
		t.Log(l)
	}
}

// TestIntegrationLabE2E is the e2e profile on the real cluster: the
// pre-flight passes and changes nothing, then a 60 s run passes with every
// planned request answered 2xx on every node, the saver's SAVED and the
// watchdog's PASS.
func TestIntegrationLabE2E(t *testing.T) {
	m := theLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()

	t.Run("preflight", func(t *testing.T) {
		out, err := soakRun(t, ctx, filepath.Join(dir, "preflight.txt"), append(runArgs(m), "--preflight")...)
		logVerdicts(t, out)
		if err != nil {
			t.Fatalf("preflight: %v", err)
		}
		if !regexp.MustCompile(`(?m)^STEP preflight ok$`).MatchString(out) || strings.Contains(out, "PREFLIGHT FAIL") {
			t.Fatalf("preflight did not pass:\n%s", out)
		}
	})
	if t.Failed() {
		return
	}

	run := filepath.Join(dir, "run")
	t.Cleanup(func() { teardown(t, run) })
	t.Run("e2e 60s", func(t *testing.T) {
		args := append(runArgs(m), "--duration", "60s", "--settle", "5s", "--watch-interval", "20s", "--dir", run)
		out, err := soakRun(t, ctx, filepath.Join(dir, "e2e.txt"), args...)
		logVerdicts(t, out)
		if err != nil {
			t.Fatalf("soak run e2e: %v", err)
		}
		checkE2E(t, out, run, m.Nodes)
	})
}

// checkE2E holds a passed e2e run to its lines and its report.
func checkE2E(t *testing.T, out, run string, nodes []string) {
	t.Helper()
	want := []string{
		`(?m)^SOAK PASS gate=0 watchdog=PASS churn=none saver=saved dir=` + regexp.QuoteMeta(run) + `$`,
		fmt.Sprintf(`(?m)^VERDICT PASS targets=%d passed=%d failed=0 not_run=0 backends=%d lost_backends=0 report_pass=true$`, len(lab.Targets), len(lab.Targets), len(nodes)),
		`(?m)^SORTIE_SAVED dir=` + regexp.QuoteMeta(run) + ` job=complete .* pass=true not_run=0 `,
		`(?m)^SUMMARY restart-watch verdict=PASS new_restarts=0 `,
	}
	for _, re := range want {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matches %s", re)
		}
	}
	if _, err := os.Stat(filepath.Join(run, "SAVED")); err != nil {
		t.Errorf("the saver wrote no SAVED: %v", err)
	}
	r, err := record.ReadFile(filepath.Join(run, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, r, nodes)
}

// checkCounts: one execution per target, one result per node, and every
// planned request (rate x duration, exactly) answered 2xx.
func checkCounts(t *testing.T, r *record.Report, nodes []string) {
	t.Helper()
	if len(r.Executions) != len(lab.Targets) {
		t.Fatalf("%d executions, want one per target (%d)", len(r.Executions), len(lab.Targets))
	}
	for _, e := range r.Executions {
		planned := uint64(e.Rate * float64(e.DurationMs) / 1000)
		var got []string
		for _, res := range e.Results {
			got = append(got, res.BackendName)
			if res.Planned != planned || res.Counters["benchmark.http_2xx"] != planned {
				t.Errorf("%s on %s: planned %d, http_2xx %d; want %d of %d", e.Label, res.BackendName, res.Planned, res.Counters["benchmark.http_2xx"], planned, planned)
			}
			if res.Unsent != 0 {
				t.Errorf("%s on %s: %d planned requests unsent", e.Label, res.BackendName, res.Unsent)
			}
			if err := res.Conserves(); err != nil {
				t.Errorf("%s: %v", e.Label, err)
			}
			for k, v := range res.Counters {
				if v != 0 && record.InZeroFailureSet(k) {
					t.Errorf("%s on %s: %s=%d", e.Label, res.BackendName, k, v)
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, nodes) {
			t.Errorf("%s: results from %v, want one from each node %v", e.Label, got, nodes)
		}
		t.Logf("COUNTS %s rate=%g/s per node x %ds: http_2xx=%d per node on %d nodes", e.Label, e.Rate, e.DurationMs/1000, planned, len(e.Results))
	}
}

// teardown uninstalls the run's release, so that the lab is as it was for
// the next test; a run that saved nothing is given up (--force).
func teardown(t *testing.T, run string) {
	if _, err := os.Stat(filepath.Join(run, "run.env")); err != nil {
		return
	}
	args := []string{"teardown", "--dir", run}
	if _, err := os.Stat(filepath.Join(run, "SAVED")); err != nil {
		args = append(args, "--force")
	}
	var out bytes.Buffer
	if err := soak.Run(context.Background(), args, &out, &out); err != nil {
		t.Errorf("soak teardown: %v\n%s", err, out.String())
	}
}
