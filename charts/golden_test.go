package chart

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestGolden holds the default release (chart defaults plus
// testdata/plan.yaml, release soak in aether-test) to
// testdata/default.golden.yaml. Refresh it with `go test ./charts -update`
// and review the diff: it is what a cluster would be given.
func TestGolden(t *testing.T) {
	m, err := Render(vals("plan", readPlan(t)), testRelease, testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	got := Join(m)
	path := filepath.Join("testdata", "default.golden.yaml")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s is stale (-want +got); run go test -update and review:\n%s", path, diff)
	}
}
