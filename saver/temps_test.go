package saver

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRemoveStaleTempsKeepsOthers: a saver killed mid-copy leaves its
// temporary files, and the next one removes them; but the kickoff writes
// run.env (LOAD_START) into the same directory while the saver starts, and
// its temporary file must survive.
func TestRemoveStaleTempsKeepsOthers(t *testing.T) {
	dir := t.TempDir()
	names := []string{
		".report.json.tmp-1", ".results.jsonl.tmp-2", ".engine-sortie-engine-4fz9q.log.tmp-3",
		".sortie-sortie-run-7xk2p.log.tmp-4", ".SAVED.tmp-5", ".engine-x.previous.log.tmp-6",
		".run.env.tmp-7", ".plan.yaml.tmp-8", "report.json", "run.env",
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleTemps(dir)
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	sort.Strings(left)
	want := []string{".plan.yaml.tmp-8", ".run.env.tmp-7", "report.json", "run.env"}
	if d := cmp.Diff(want, left); d != "" {
		t.Errorf("left (-want +got):\n%s", d)
	}
}
