package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// TestOffPlanShortRun judges a short run's elapsed time with a tolerance
// of one request interval: a run of 2 s at 1 rps per node measured to its
// last request (1 s) did run to plan; 5 % alone failed every run of fewer
// than about twenty requests per node. A long run keeps its 5 %.
func TestOffPlanShortRun(t *testing.T) {
	for _, tc := range []struct {
		rate      string
		durMs     int64
		elapsedMs int64
		off       bool
	}{
		{"1", 2000, 1000, false}, // measured to its last request
		{"1", 2000, 3000, false}, // one interval late
		{"1", 2000, 3001, true},
		{"1", 2000, 999, true},
		{"5", 2000, 1800, false},
		{"5", 2000, 1799, true},
		{"9", 150000, 157500, false}, // 5 % of a long run
		{"9", 150000, 157501, true},
		{"9", 150000, 291507, true}, // a frozen node that thawed
	} {
		r, _ := record.ParseDecimal(tc.rate)
		n := uint64(r.Num().Int64()) * uint64(tc.durMs) / 1000
		e := execution(t, "a", tc.rate, tc.durMs, result(addrA, n, tc.elapsedMs, nil), result(addrB, n, tc.durMs, nil))
		v := Grade(input(e))
		got := strings.Contains(strings.Join(v.Targets[0].Reasons, "|"), "ran off plan")
		if got != tc.off {
			t.Errorf("%s rps for %dms, elapsed %dms: off plan %v, want %v (%v)", tc.rate, tc.durMs, tc.elapsedMs, got, tc.off, v.Targets[0].Reasons)
		}
	}
}

// TestLongTextCut cuts a 100 KB error in the text lines, saying how much
// was left out, and keeps it whole in --json.
func TestLongTextCut(t *testing.T) {
	long := "refused: " + strings.Repeat("é", 50000)
	e := execution(t, "a", "9", 150000, result(addrA, 1350, 150000, nil), result(addrB, 1350, 150000, nil))
	e.Error = long
	v := Grade(input(e))
	var text, js bytes.Buffer
	if err := WriteText(&text, v, true); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(text.String(), "\n") {
		if len(line) > 4*MaxTextBytes {
			t.Errorf("a text line of %d bytes: %.80s...", len(line), line)
		}
	}
	if !strings.Contains(text.String(), "bytes more: see --json]") {
		t.Errorf("the text does not say what it cut:\n%.2000s", text.String())
	}
	if err := WriteJSON(&js, v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), long) {
		t.Error("--json does not hold the whole error")
	}
}

// TestRunRefusesWrappingTotals refuses (exit 2) a report whose two nodes
// count 2^63 each: added up they wrap at 2^64 to 0, and a 5xx total of 0
// would read as clean.
func TestRunRefusesWrappingTotals(t *testing.T) {
	e := execution(t, "a", "9", 150000,
		result(addrA, 1350, 150000, map[string]uint64{"benchmark.http_5xx": 1 << 63}),
		result(addrB, 1350, 150000, map[string]uint64{"benchmark.http_5xx": 1 << 63}))
	b, err := json.Marshal(record.Report{Executions: []record.Execution{e.Execution}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	err = Run(context.Background(), []string{"--backends", "2", "--report", path}, &out, &errb)
	if cli.Code(err) != cli.ExitUsage || !strings.Contains(err.Error(), "counter benchmark.http_5xx summed over the backends passes") {
		t.Fatalf("exit %d, %v; want 2 naming the wrapping counter\n%s", cli.Code(err), err, out.String())
	}
}
