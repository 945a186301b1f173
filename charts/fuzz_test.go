package chart

import (
	"strings"
	"testing"
)

// FuzzRenderPlan: the plan is outside input that the chart carries into a
// ConfigMap. Whatever its bytes, the release either is refused (a blank
// plan) or holds exactly those bytes under the name of their digest, and
// nothing else of the release changes shape (no document injected).
func FuzzRenderPlan(f *testing.F) {
	f.Add(readPlan(f))
	for _, seed := range []string{
		"",
		" \n",
		"version: v1\n",
		"version: v1", // no final newline
		"\n\n  leading space and blank lines\n\n\n",
		"---\napiVersion: v1\nkind: Secret\nmetadata: {name: injected}\n",
		"{{ .Release.Name }} {{ fail \"no\" }}",
		"line\u0085next\u2028sep\ttab\x00nul\x7fdel",
		"\xff\xfe not UTF-8",
		"\ufeffversion: v1\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, plan string) {
		m, err := Render(vals("plan", plan), testRelease, testNamespace)
		if strings.TrimSpace(plan) == "" {
			if err == nil {
				t.Fatal("a blank plan was rendered")
			}
			return
		}
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		r, err := decode(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.all) != 7 {
			t.Fatalf("%d objects (%q), want 7", len(r.all), r.kinds)
		}
		if r.configMap == nil || r.job == nil {
			t.Fatal("no ConfigMap or Job")
		}
		if got := string(r.configMap.BinaryData["plan.yaml"]); got != plan {
			t.Errorf("ConfigMap holds %q, want %q", got, plan)
		}
		if want := PlanConfigMapName(testRelease, plan); r.configMap.Name != want {
			t.Errorf("ConfigMap %q, want %q", r.configMap.Name, want)
		}
	})
}
