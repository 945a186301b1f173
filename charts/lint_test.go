package chart

import (
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestLint runs Helm's linter (what `helm lint --strict` runs) on the chart
// directory over the value sets a release is installed with: no errors and
// no warnings; information messages are allowed.
func TestLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(RenderKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	plan := readPlan(t)
	tests := []struct {
		name   string
		values map[string]any
	}{
		{"defaults with a plan", vals("plan", plan)},
		{"engines alone", vals("job.enabled", false)},
		{"Deployment, existing claim, no NetworkPolicy", vals("plan", plan, "engine.kind", "Deployment",
			"report.volume", "soak-report", "networkPolicy.enabled", false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = testNamespace
			l.KubeVersion = kv
			res := l.Run([]string{ChartName}, tt.values)
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
		})
	}
}

// TestLintCatchesSchemaViolation shows the lint test can fail: values the
// schema refuses are a lint error.
func TestLintCatchesSchemaViolation(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(RenderKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	l := action.NewLint()
	l.Namespace = testNamespace
	l.KubeVersion = kv
	res := l.Run([]string{ChartName}, vals("plan", readPlan(t), "engine.kind", "ReplicaSet"))
	if len(res.Errors) == 0 {
		t.Error("lint passed values with engine.kind ReplicaSet")
	}
}
