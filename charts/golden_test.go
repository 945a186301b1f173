package chart

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/render"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// Stand-in digests for the golden release. The chart's default digests are
// pinned from the image lock file and change with every image build; the
// golden file is about the templates, so it does not follow them.
var (
	goldenEngineDigest = "sha256:" + strings.Repeat("e", 64)
	goldenDriverDigest = "sha256:" + strings.Repeat("d", 64)
)

// TestGolden holds the default release (chart defaults plus
// testdata/plan.yaml, release soak in aether-test, stand-in digests) to
// testdata/default.golden.yaml. Refresh it with `go test ./charts -update`
// and review the diff: it is what a cluster would be given.
func TestGolden(t *testing.T) {
	m, err := Render(vals("plan", readPlan(t),
		"images.engine.digest", goldenEngineDigest,
		"images.driver.digest", goldenDriverDigest), testRelease, testNamespace)
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

// TestPlanUserAgent: the chart's test plan sends the User-Agent the plan
// renderer writes by default (the bash harness's, which the soak's
// access-log queries select on), so the golden shows what a run ships.
func TestPlanUserAgent(t *testing.T) {
	want := `headers: ["User-Agent: ` + render.UserAgent + `"]`
	if plan := readPlan(t); !strings.Contains(plan, want) {
		t.Errorf("testdata/plan.yaml lacks %s:\n%s", want, plan)
	}
}
