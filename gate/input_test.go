package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

func TestReadShares(t *testing.T) {
	got, err := ReadShares(strings.NewReader("# name rps url\nsvc-a\t9\thttp://a/\n\nramp/stage-2  6.5 http://b/\necho 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name+"="+fmtRat(s.rps))
	}
	if diff := cmp.Diff([]string{"svc-a=9", "ramp/stage-2=6.5", "echo=3"}, names); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []struct{ in, err string }{
		{"svc-a\n", "line 1: want"},
		{"svc-a nine http://a/\n", "line 1: rps"},
		{"svc-a -1\n", "negative"},
		{"svc-a 1/3\n", "not a decimal"},
		{"svc-a 9\nsvc-a 9\n", "line 2: target svc-a is already listed on line 1"},
	} {
		if _, err := ReadShares(strings.NewReader(bad.in)); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("ReadShares(%q): error %v, want %q", bad.in, err, bad.err)
		}
	}
}

func TestReadEngines(t *testing.T) {
	got, err := ReadEngines(strings.NewReader("10.9.0.1\tnode-a\tpod-1\n10.9.0.2:8443 node-b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Engine{{"10.9.0.1", "node-a"}, {"10.9.0.2:8443", "node-b"}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []struct{ in, err string }{
		{"10.9.0.1\n", "line 1: want"},
		{"10.9.0.1:8443 a\n10.9.0.1:8443 b\n", "already listed on line 1"},
	} {
		if _, err := ReadEngines(strings.NewReader(bad.in)); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("ReadEngines(%q): error %v, want %q", bad.in, err, bad.err)
		}
	}
}

func TestReadLog(t *testing.T) {
	log := "  running s/a (3 rps per backend for 20s) on x\n" +
		"  SKIP s/b (scenario s): not run\n" +
		"SKIP   s/b  (6 rps per backend for 20s)\n" +
		"  SKIP s/c (scenario s): not run\n" +
		"FAIL  1/3 executions passed, 2 not run\n"
	got, err := ReadLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := &LogSummary{Skipped: []string{"s/b", "s/c"}, SkipLines: 3, Summary: "FAIL  1/3 executions passed, 2 not run", NotRun: 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	got, _ = ReadLog(strings.NewReader("PASS  3/3 executions passed\n"))
	if got.NotRun != 0 || got.Summary == "" || len(got.Skipped) != 0 {
		t.Errorf("clean log read as %+v", got)
	}
}

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3:8443":  "10.1.2.3",
		"10.1.2.3":       "10.1.2.3",
		"[fd00::1]:8443": "fd00::1",
		"fd00::1":        "fd00::1",
		"node:8443":      "node",
		"[broken":        "[broken",
	} {
		if got := hostOf(in); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRunEndlessInput refuses /dev/zero as a report, a results stream and
// a share table with exit 2, each read bounded by its cap.
func TestRunEndlessInput(t *testing.T) {
	for _, args := range [][]string{
		{"--backends", "1", "--report", "/dev/zero"},
		{"--backends", "1", "--shares", "/dev/null", "--stream", "/dev/zero"},
	} {
		var out, errb strings.Builder
		err := Run(context.Background(), args, &out, &errb)
		if cli.Code(err) != cli.ExitUsage || !strings.Contains(fmt.Sprint(err), "/dev/zero") {
			t.Errorf("%v: exit %d, %v; want 2 naming /dev/zero", args, cli.Code(err), err)
		}
	}
	err := readFile(context.Background(), "/dev/zero", "share table", MaxTableBytes, func(io.Reader) error { return nil })
	var tl *record.TooLargeError
	if !errors.As(err, &tl) || tl.What != "share table" {
		t.Errorf("a share table from /dev/zero: %v", err)
	}
}
