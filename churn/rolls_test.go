package churn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/record"
)

// TestOutputReadsAsRolls: the churn driver's ROLLED and FAILED lines, as
// its golden transcripts hold them, are read by the record's one reader of
// rolls (the gate's), every one of them, with the other lines skipped.
func TestOutputReadsAsRolls(t *testing.T) {
	goldens, err := filepath.Glob("testdata/*.golden")
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no golden transcripts: %v", err)
	}
	total := 0
	for _, g := range goldens {
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		stdout, _, _ := strings.Cut(string(b), "== actions\n")
		want := 0
		for _, line := range strings.Split(stdout, "\n") {
			if strings.HasPrefix(line, "ROLLED ") || strings.HasPrefix(line, "FAILED ") {
				want++
			}
		}
		log, err := record.ParseRolls(strings.NewReader(stdout))
		if err != nil {
			t.Errorf("%s: %v", g, err)
		}
		if len(log.Rolls) != want || len(log.Faults) != 0 {
			t.Errorf("%s: read %d rolls and %d faults, want the %d ROLLED/FAILED lines", g, len(log.Rolls), len(log.Faults), want)
		}
		for _, r := range log.Rolls {
			if r.End.Before(r.Begin) || strings.Count(r.Ref, "/") != 2 {
				t.Errorf("%s:%d: %+v", g, r.Line, r)
			}
		}
		total += want
	}
	if total == 0 {
		t.Error("no golden transcript holds a ROLLED or FAILED line")
	}
}
