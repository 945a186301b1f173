package plan

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/driver/threshold"
)

// TestCompileTargetThresholds checks that every execution carries its
// target's thresholds with the scenario's they do not replace, stage by
// stage, and that a target without any carries the scenario's alone.
func TestCompileTargetThresholds(t *testing.T) {
	p, err := Load(filepath.Join("testdata", "plans", "valid-target-thresholds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(p.Placeholders())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, cs := range c.Scenarios {
		for _, st := range cs.Stages {
			for _, ex := range st.Executions {
				for _, th := range ex.Thresholds {
					got[ex.Label] = append(got[ex.Label], th.Expr)
				}
			}
		}
	}
	want := map[string][]string{
		"mesh/svc-1": {
			"counter:benchmark.http_5xx == 0", "counter:benchmark.stream_resets == 0", "latency_2xx.p99 <= 200ms", "counter:benchmark.http_4xx == 0",
			"rate:benchmark.http_2xx >= 17.82",
		},
		"mesh/svc-2": {
			"rate:benchmark.http_2xx >= 5.94", "counter:benchmark.http_4xx == 0",
			"latency_2xx.p99 < 500ms", "counter:benchmark.http_5xx == 0", "counter:benchmark.stream_resets <= 3", "rate:benchmark.http_2xx <= 6.06",
		},
		"mesh/uds-echo": {
			"counter:benchmark.http_5xx == 0", "counter:benchmark.stream_resets == 0", "rate:benchmark.http_2xx >= 5.94", "latency_2xx.p99 <= 200ms",
			"counter:benchmark.http_4xx == 0",
		},
		"steps/a/stage-1": {"counter:benchmark.http_4xx == 0", "rate:benchmark.http_2xx > 1"},
		"steps/a/stage-2": {"counter:benchmark.http_4xx == 0", "rate:benchmark.http_2xx > 1"},
		"steps/b/stage-1": {"counter:benchmark.http_4xx == 0"},
		"steps/b/stage-2": {"counter:benchmark.http_4xx == 0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("thresholds by execution (-want +got):\n%s", diff)
	}
}

// TestThresholdsFor holds the replacement rule: the same value, bounded
// from a side the target's threshold bounds too.
func TestThresholdsFor(t *testing.T) {
	parse := func(exprs ...string) []threshold.Threshold {
		var out []threshold.Threshold
		for _, e := range exprs {
			th, err := threshold.Parse(e)
			if err != nil {
				t.Fatalf("%s: %v", e, err)
			}
			out = append(out, th)
		}
		return out
	}
	tests := []struct {
		scenario, target string
		replaced         bool
	}{
		{"rate:benchmark.http_2xx >= 5.94", "rate:benchmark.http_2xx >= 17.82", true},
		{"rate:benchmark.http_2xx > 5", "rate:benchmark.http_2xx >= 17.82", true},
		{"rate:benchmark.http_2xx >= 5.94", "rate:benchmark.http_2xx <= 20", false},
		{"rate:benchmark.http_2xx >= 5.94", "counter:benchmark.http_2xx >= 100", false},
		{"rate:benchmark.http_2xx >= 5.94", "rate:benchmark.http_5xx >= 5.94", false},
		{"counter:benchmark.stream_resets == 0", "counter:benchmark.stream_resets <= 3", true},
		{"counter:benchmark.stream_resets <= 3", "counter:benchmark.stream_resets == 0", true},
		{"counter:benchmark.stream_resets == 0", "counter:benchmark.stream_resets != 1", false},
		{"counter:benchmark.stream_resets != 1", "counter:benchmark.stream_resets != 2", true},
		{"latency_2xx.p99 < 200ms", "benchmark_http_client.latency_2xx.p99 <= 500ms", true},
		{"latency_2xx.p99 < 200ms", "latency_2xx.p90 < 500ms", false},
		{"latency_2xx.p99 < 200ms", "latency_2xx.max < 1s", false},
	}
	for _, tc := range tests {
		s := &Scenario{Thresholds: parse("counter:benchmark.http_4xx == 0", tc.scenario)}
		got := s.ThresholdsFor(Target{Thresholds: parse(tc.target)})
		var exprs []string
		for _, th := range got {
			exprs = append(exprs, th.Expr)
		}
		want := []string{"counter:benchmark.http_4xx == 0", tc.scenario, tc.target}
		if tc.replaced {
			want = []string{"counter:benchmark.http_4xx == 0", tc.target}
		}
		if diff := cmp.Diff(want, exprs); diff != "" {
			t.Errorf("scenario %q, target %q (-want +got):\n%s", tc.scenario, tc.target, diff)
		}
	}
	// No thresholds of its own: the scenario's, as they are.
	s := &Scenario{Thresholds: parse("counter:benchmark.http_4xx == 0")}
	if got := s.ThresholdsFor(Target{}); len(got) != 1 || got[0].Expr != "counter:benchmark.http_4xx == 0" {
		t.Errorf("ThresholdsFor(no own) = %v", got)
	}
}
