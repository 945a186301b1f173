package render

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/internal/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

const (
	soakTargets = "testdata/targets/soak.txt"
	kubeDNS     = "soak-sortie-engine-nodes.aether-test.svc.cluster.local:8443"
)

// runCase is one sortie-plan command line and its golden output.
type runCase struct {
	name string
	args []string
	code int
}

// runCases drive TestRunGolden; the plans among them also drive
// TestGoldenPlansDecode.
var runCases = []runCase{
	// Plans.
	{"render-e2e-dns", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS}, 0},
	{"render-soak-dns-statsd", []string{"render", "--profile", "soak", "--targets", soakTargets, "--backends", "5", "--dns", kubeDNS, "--statsd", "10.96.14.7:8125"}, 0},
	{"render-local-services", []string{"render", "--profile", "local", "--targets", soakTargets, "--services", "127.0.0.11:8443,127.0.0.12:8443"}, 0},
	{"render-e2e-services-duration", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--services", "127.0.0.11:8443,127.0.0.12:8443,127.0.0.13:8443", "--backends", "3", "--duration", "15m"}, 0},
	{"render-soak-statsd-ipv6", []string{"render", "--profile", "soak", "--targets", soakTargets, "--backends", "1", "--dns", "engines.example:8443", "--statsd", "[fd00::7]:8125"}, 0},
	{"render-max-pending-off", []string{"render", "--profile", "local", "--targets", soakTargets, "--services", "127.0.0.11:8443", "--max-pending", "0"}, 0},
	{"render-max-pending-explicit", []string{"render", "--profile", "local", "--targets", soakTargets, "--services", "127.0.0.11:8443", "--max-pending", "7"}, 0},
	{"render-concurrency-3", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS, "--rate", "120", "--concurrency", "3", "--stall-budget", "1500ms", "--floor-pct", "99.5"}, 0},
	{"render-yaml-names", []string{"render", "--profile", "local", "--targets", "testdata/targets/yaml-names.txt", "--services", "127.0.0.11:8443", "--rate", "4"}, 0},
	{"render-per-target-floors", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS, "--per-target-floors"}, 0},
	{"render-per-target-floors-local", []string{"render", "--profile", "local", "--targets", soakTargets, "--services", "127.0.0.11:8443,127.0.0.12:8443,127.0.0.13:8443", "--rate", "120", "--concurrency", "3", "--floor-pct", "99.5", "--per-target-floors"}, 0},
	{"render-sixteen", []string{"render", "--profile", "local", "--targets", "testdata/targets/sixteen.txt", "--services", "127.0.0.11:8443,127.0.0.12:8443", "--rate", "32", "--floor-pct", "100"}, 0},
	{"render-user-agent-scenario", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS, "--user-agent", "team-soak/2", "--scenario", "canary_1", "--stall-budget", "3", "--duration", "1200"}, 0},
	// Share tables.
	{"shares-default", []string{"shares", "--targets", soakTargets}, 0},
	{"shares-rate-120", []string{"shares", "--targets", soakTargets, "--rate", "120"}, 0},
	// Refusals.
	{"refuse-bad-name", []string{"shares", "--targets", "testdata/targets/bad-name.txt"}, 2},
	{"refuse-dup-name", []string{"render", "--profile", "e2e", "--targets", "testdata/targets/dup-name.txt", "--backends", "2", "--dns", kubeDNS}, 2},
	{"refuse-too-many", []string{"shares", "--targets", "testdata/targets/too-many.txt", "--rate", "17"}, 2},
	{"refuse-not-whole", []string{"shares", "--targets", soakTargets, "--rate", "50"}, 2},
	{"render-thirds-of-60", []string{"render", "--profile", "e2e", "--targets", "testdata/targets/thirds.txt", "--backends", "2", "--dns", kubeDNS}, 0},
	{"refuse-thirds-of-100", []string{"render", "--profile", "e2e", "--targets", "testdata/targets/thirds.txt", "--backends", "2", "--dns", kubeDNS, "--rate", "100"}, 2},
	{"refuse-concurrency", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS, "--concurrency", "2"}, 2},
	{"refuse-bad-url", []string{"shares", "--targets", "testdata/targets/bad-url.txt"}, 2},
	{"refuse-bad-weight", []string{"shares", "--targets", "testdata/targets/bad-weight.txt"}, 2},
	{"refuse-bad-fields", []string{"shares", "--targets", "testdata/targets/bad-fields.txt"}, 2},
	{"refuse-empty", []string{"shares", "--targets", "testdata/targets/empty.txt"}, 2},
	{"refuse-missing-file", []string{"shares", "--targets", "testdata/targets/absent.txt"}, 2},
	{"refuse-missing-flags", []string{"render"}, 2},
	{"refuse-missing-pool", []string{"render", "--profile", "soak", "--targets", soakTargets, "--backends", "2"}, 2},
	{"refuse-dns-and-services", []string{"render", "--profile", "soak", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS, "--services", "127.0.0.11:8443,127.0.0.12:8443"}, 2},
	{"refuse-backends-mismatch", []string{"render", "--profile", "soak", "--targets", soakTargets, "--backends", "3", "--services", "127.0.0.11:8443,127.0.0.12:8443"}, 2},
	{"refuse-bad-values", []string{"render", "--profile", "weekend", "--targets", soakTargets, "--dns", "engines", "--statsd", "statsd.local:8125", "--duration", "90.5s", "--stall-budget", "0s", "--floor-pct", "101", "--rate", "0"}, 2},
	{"refuse-bad-scenario-agent", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS, "--scenario", "Mesh-1", "--user-agent", `a"b`}, 2},
	{"refuse-bad-stall-budget", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS, "--stall-budget", "3x"}, 2},
	{"refuse-bad-scenario-agent-2", []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS, "--scenario", "", "--user-agent", ""}, 2},
	{"refuse-bad-services", []string{"render", "--profile", "local", "--targets", soakTargets, "--services", "127.0.0.11:8443,127.0.0.11:8443,nohost,:80,a:0"}, 2},
	{"refuse-unknown-flag", []string{"shares", "--targets", soakTargets, "--weights", "1"}, 2},
	{"refuse-positional", []string{"shares", "--targets", soakTargets, "extra"}, 2},
	{"refuse-unknown-command", []string{"plan"}, 2},
	{"refuse-no-command", nil, 2},
}

func runGolden(t *testing.T, args []string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), args, &stdout, &stderr)
	code := cli.Code(err)
	if code != 0 {
		if stdout.Len() > 0 {
			t.Errorf("stdout is not empty on exit %d:\n%s", code, stdout.String())
		}
		return fmt.Sprintf("exit %d\n%v\n", code, err), code
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr is not empty on success:\n%s", stderr.String())
	}
	return stdout.String(), code
}

func TestRunGolden(t *testing.T) {
	for _, tc := range runCases {
		t.Run(tc.name, func(t *testing.T) {
			got, code := runGolden(t, tc.args)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, got)
			}
			golden(t, filepath.Join("testdata", "golden", tc.name+".golden"), got)
		})
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", path, diff)
	}
}

func TestRunHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"render", "--help"}, {"shares", "-h"}} {
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
			t.Errorf("%v: %v", args, err)
		}
		help := stdout.String() + stderr.String()
		if !strings.Contains(help, "Usage") {
			t.Errorf("%v: no usage in %q", args, help)
		}
		if args[0] == "render" {
			// Every flag is documented.
			for _, f := range []string{"profile", "targets", "backends", "dns", "services", "duration", "rate",
				"concurrency", "statsd", "max-pending", "stall-budget", "floor-pct", "per-target-floors", "o FILE"} {
				if !strings.Contains(help, "-"+f) {
					t.Errorf("render --help does not list -%s", f)
				}
			}
		}
	}
}

func TestRunWritesFile(t *testing.T) {
	args := []string{"render", "--profile", "e2e", "--targets", soakTargets, "--backends", "2", "--dns", kubeDNS}
	want, _ := runGolden(t, args)
	out := filepath.Join(t.TempDir(), "plan.yaml")
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), append(args, "-o", out), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout with -o: %q", stdout.String())
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("-o file differs from stdout (-stdout +file):\n%s", diff)
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 1 {
		t.Errorf("temporary files left beside the plan: %v", entries)
	}
}
