package render

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

const bashDNS = "soak-sortie-engine-nodes.aether-test.svc.cluster.local:8443"

// The places where the rendered plan deliberately differs from the bash
// renderer's on the same input; each is in the README's list of
// differences. Everything else must be equal as parsed YAML.
var (
	// The bash plan steers Nighthawk's idle strategy through a template;
	// this engine has no template (it blocks between requests by design)
	// and the driver refuses one.
	bashOnlyScenarioKeys = []string{"nighthawk_template"}
	// The bash plan carries two latency thresholds of a minute only so that
	// its report would hold latency at all; this report has a latency
	// statistic per backend, so the carriers are not written.
	bashOnlyThresholds = []string{"latency_2xx.p50 < 60s", "latency_2xx.p99 < 60s"}
	// This engine counts requests a cut connection lost in flight, an
	// outcome Nighthawk had no counter for; the zero set covers it.
	ourOnlyThresholds = []string{"counter:benchmark.http_inflight_lost == 0", "counter:benchmark.request_timeout == 0"}
	// Nighthawk had no per-request response timeout; this plan bounds
	// every response (request_timeout), and the zero set covers it.
	ourOnlyScenarioKeys = []string{"request_timeout"}
)

// TestBashRendererParity renders the inputs of the bash renderer's own
// runs and compares the plan with what that renderer prints (as parsed
// YAML, under testdata/bash), and the share table byte for byte.
func TestBashRendererParity(t *testing.T) {
	soak, thirds := "testdata/bash/targets.txt", "testdata/bash/thirds.txt"
	tests := []struct {
		name   string
		args   []string
		shares string // the bash share table of the same targets, rate and concurrency
	}{
		{"e2e-dns", []string{"--profile", "e2e", "--targets", soak, "--backends", "2", "--dns", bashDNS}, "targets-60"},
		{"soak-statsd", []string{"--profile", "soak", "--targets", soak, "--backends", "5", "--dns", bashDNS,
			"--statsd", "10.96.14.7:8125", "--scenario", "soak_mesh", "--stall-budget", "3"}, "targets-60"},
		{"thirds", []string{"--profile", "e2e", "--targets", thirds, "--backends", "2", "--dns", bashDNS}, "thirds-60"},
		{"concurrency-3", []string{"--profile", "e2e", "--targets", soak, "--backends", "3", "--dns", bashDNS,
			"--rate", "120", "--concurrency", "3", "--max-pending", "0", "--duration", "600s", "--floor-pct", "100"}, "targets-120-c3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := Run(context.Background(), append([]string{"render"}, tc.args...), &out, &errb); err != nil {
				t.Fatalf("render: %v\n%s", err, errb.String())
			}
			got := parsePlan(t, out.Bytes())
			want := parsePlan(t, readFile(t, filepath.Join("testdata", "bash", tc.name+".plan.yaml")))
			for _, s := range scenarios(t, want) {
				for _, k := range bashOnlyScenarioKeys {
					if _, ok := s[k]; !ok {
						t.Fatalf("the bash plan has no %s: the difference list is stale", k)
					}
					delete(s, k)
				}
				s["thresholds"] = without(t, s["thresholds"], bashOnlyThresholds)
			}
			for _, s := range scenarios(t, got) {
				for _, k := range ourOnlyScenarioKeys {
					if _, ok := s[k]; !ok {
						t.Fatalf("our plan has no %s: the difference list is stale", k)
					}
					delete(s, k)
				}
				s["thresholds"] = without(t, s["thresholds"], ourOnlyThresholds)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("plan differs from the bash renderer's (-bash +ours):\n%s", diff)
			}
		})
		t.Run(tc.name+"/shares", func(t *testing.T) {
			// The share table takes the targets, rate and concurrency only.
			args := []string{"shares"}
			for i := 0; i < len(tc.args); i += 2 {
				if f := tc.args[i]; f == "--targets" || f == "--rate" || f == "--concurrency" {
					args = append(args, f, tc.args[i+1])
				}
			}
			var out, errb bytes.Buffer
			if err := Run(context.Background(), args, &out, &errb); err != nil {
				t.Fatalf("shares: %v\n%s", err, errb.String())
			}
			want := readFile(t, filepath.Join("testdata", "bash", tc.shares+".shares.tsv"))
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("share table differs from the bash renderer's:\nbash:\n%s\nours:\n%s", want, out.Bytes())
			}
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parsePlan(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("parse plan: %v\n%s", err, b)
	}
	return m
}

func scenarios(t *testing.T, plan map[string]any) []map[string]any {
	t.Helper()
	list, ok := plan["scenarios"].([]any)
	if !ok || len(list) == 0 {
		t.Fatalf("no scenarios in %v", plan)
	}
	out := make([]map[string]any, len(list))
	for i, s := range list {
		if out[i], ok = s.(map[string]any); !ok {
			t.Fatalf("scenario %d is %T", i, s)
		}
	}
	return out
}

// without removes drop from a threshold list, each of which must be there:
// a documented difference that no longer exists is a stale document.
func without(t *testing.T, list any, drop []string) []any {
	t.Helper()
	l, ok := list.([]any)
	if !ok {
		t.Fatalf("thresholds are %T", list)
	}
	out := slices.Clone(l)
	for _, d := range drop {
		i := slices.Index(out, any(d))
		if i < 0 {
			t.Fatalf("threshold %q is not in %v: the difference list is stale", d, l)
		}
		out = slices.Delete(out, i, i+1)
	}
	return out
}
