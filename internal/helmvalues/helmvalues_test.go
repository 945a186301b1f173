package helmvalues

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chartutil"
)

func TestSetMakesMapsAndLookupFindsThem(t *testing.T) {
	m := map[string]any{"job": "not a map"}
	Set(m, "job.enabled", true)
	Set(m, "engine.image.digest", "sha256:e")
	want := map[string]any{
		"job":    map[string]any{"enabled": true},
		"engine": map[string]any{"image": map[string]any{"digest": "sha256:e"}},
	}
	if d := cmp.Diff(want, m); d != "" {
		t.Fatalf("after Set (-want +got):\n%s", d)
	}
	if got := Lookup(m, "engine.image.digest"); got != "sha256:e" {
		t.Errorf("Lookup engine.image.digest = %v", got)
	}
	for _, p := range []string{"engine.image.tag", "job.enabled.x", "nothing"} {
		if got := Lookup(m, p); got != nil {
			t.Errorf("Lookup %s = %v, want nil", p, got)
		}
	}
}

func TestLookupSeesThroughChartutilValues(t *testing.T) {
	m := map[string]any{"tls": chartutil.Values{"secretName": "s"}}
	if got := Lookup(m, "tls.secretName"); got != "s" {
		t.Errorf("Lookup through chartutil.Values = %v", got)
	}
}

func TestCloneDoesNotAlias(t *testing.T) {
	base := map[string]any{
		"engine": chartutil.Values{"allowTargets": []any{"a"}},
		"job":    map[string]any{"enabled": false},
	}
	c := Clone(base)
	Set(c, "job.enabled", true)
	c["engine"].(map[string]any)["allowTargets"].([]any)[0] = "b"
	if Lookup(base, "job.enabled") != false {
		t.Error("Set on the clone changed the base's job.enabled")
	}
	if got := base["engine"].(chartutil.Values)["allowTargets"].([]any)[0]; got != "a" {
		t.Errorf("the base's list changed with the clone's: %v", got)
	}
}
