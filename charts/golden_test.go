package chart

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
