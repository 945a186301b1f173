package gate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// line is a minimal valid stream line for label.
func line(label string) string {
	return `{"label":"` + label + `","scenario":"s","rate":3,"per_backend":true,"duration_ms":1000,"elapsed_ms":1001,"started_at":"2026-05-01T08:00:00.000Z","backends":["10.9.0.1:8443"],"results":[{"backend":"10.9.0.1:8443","elapsed_ms":1000,"counters":{"benchmark.http_2xx":3}}]}` + "\n"
}

func TestReadStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		labels  []string // of the graded run
		skipped []int
		runs    []StreamRun
		err     string
	}{
		{name: "one run", in: line("s/a") + line("s/b"), labels: []string{"s/a", "s/b"}, runs: []StreamRun{{1, 2, 2, ""}}},
		{name: "blank lines are not counted", in: "\n" + line("s/a") + "  \n", labels: []string{"s/a"}, runs: []StreamRun{{2, 2, 1, ""}}},
		{name: "torn last line", in: line("s/a") + line("s/b")[:40], labels: []string{"s/a"}, skipped: []int{2}, runs: []StreamRun{{1, 1, 1, ""}}},
		{name: "complete last line without newline", in: line("s/a") + strings.TrimSuffix(line("s/b"), "\n"), labels: []string{"s/a", "s/b"}, runs: []StreamRun{{1, 2, 2, ""}}},
		{name: "fragment closed off", in: line("s/a") + line("s/b")[:60] + "\n" + line("s/c"), labels: []string{"s/a", "s/c"}, skipped: []int{2}, runs: []StreamRun{{1, 3, 2, ""}}},
		{name: "two runs: the last is graded", in: line("s/a") + line("s/b") + line("s/a") + line("s/b"), labels: []string{"s/a", "s/b"}, runs: []StreamRun{{1, 2, 2, ""}, {3, 4, 2, "s/a"}}},
		{name: "a second run that died early", in: line("s/a") + line("s/b") + line("s/b"), labels: []string{"s/b"}, runs: []StreamRun{{1, 2, 2, ""}, {3, 3, 1, "s/b"}}},
		{name: "no label", in: `{"scenario":"s"}` + "\n" + line("s/a"), labels: []string{"s/a"}, skipped: []int{1}, runs: []StreamRun{{2, 2, 1, ""}}},
		{name: "wrong type", in: `{"label":"s/x","rate":"fast"}` + "\n" + line("s/a"), labels: []string{"s/a"}, skipped: []int{1}, runs: []StreamRun{{2, 2, 1, ""}}},
		{name: "not an object", in: "[1]\n\"s/a\"\nnull\n" + line("s/a"), labels: []string{"s/a"}, skipped: []int{1, 2, 3}, runs: []StreamRun{{4, 4, 1, ""}}},
		{name: "nothing", in: "", err: "no execution line"},
		{name: "garbage only", in: "garbage\n{\n", err: "no execution line in the results stream (2 line(s) skipped)"},
		{name: "old format", in: `{"label":"s/a","rate":3,"duration_ms":1000,"elapsed_ms":1000,"backends":["x"]}` + "\n", err: "without started_at: s/a; without per-backend results: s/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := ReadStream(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var labels []string
			for _, e := range src.Executions {
				labels = append(labels, e.Label)
			}
			if diff := cmp.Diff(tc.labels, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skipped, src.Skipped); diff != "" {
				t.Errorf("skipped lines (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.runs, src.Runs); diff != "" {
				t.Errorf("runs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadReport(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		err  string
	}{
		{name: "empty run", in: `{"pass":true,"executions":[]}`},
		{name: "failures as objects (an older writer)", in: `{"pass":false,"executions":[{"label":"s/a","rate":9,"started_at":"2026-05-01T08:00:00.000Z","backends":[],"failures":[{"backend":"x","counters":{"benchmark.http_5xx":3}}],"results":[]}]}`},
		{name: "failures as words", in: `{"pass":false,"executions":[{"label":"s/a","rate":9,"started_at":"2026-05-01T08:00:00.000Z","backends":[],"failures":["x: http_5xx=3"],"results":[]}]}`},
		{name: "unknown statistics", in: `{"pass":true,"executions":[{"label":"s/a","rate":9,"started_at":"2026-05-01T08:00:00.000Z","backends":[],"results":[{"backend":"x","counters":{},"statistics":{"sequencer.callback":{"count":1,"unit":"ns"}}}],"extension":{"any":1}}]}`},
		{name: "not json", in: `<html>`, err: "not a sortie JSON report"},
		{name: "array", in: `[]`, err: "not a sortie JSON report"},
		{name: "null", in: `null`, err: `no "executions" array`},
		{name: "no executions", in: `{"pass":true}`, err: `no "executions" array`},
		{name: "executions null", in: `{"pass":true,"executions":null}`, err: `no "executions" array`},
		{name: "trailing garbage", in: `{"pass":true,"executions":[]} x`, err: "not a sortie JSON report"},
		{name: "no label", in: `{"executions":[{"rate":1}]}`, err: "executions[0]: no label"},
		{name: "negative counter", in: `{"executions":[{"label":"a","results":[{"backend":"x","counters":{"benchmark.http_2xx":-1}}]}]}`, err: "results"},
		{name: "negative rate", in: `{"executions":[{"label":"a","rate":-3}]}`, err: "negative"},
		{name: "huge exponent", in: `{"executions":[{"label":"a","rate":1e999999999}]}`, err: "rate"},
		{name: "ramp past the end", in: `{"executions":[{"label":"a","rate":1,"duration_ms":10,"ramp_ms":11}]}`, err: "ramp_ms 11 is longer"},
		{name: "bad time", in: `{"executions":[{"label":"a","rate":1,"started_at":"yesterday"}]}`, err: "started_at"},
		{name: "no started_at", in: `{"executions":[{"label":"a","rate":1,"results":[]}]}`, err: "without started_at: a"},
		{name: "refused needs no started_at", in: `{"executions":[{"label":"a","rate":1,"refused":"execution_cap","error":"cap"}]}`},
		{name: "not run needs neither", in: `{"executions":[{"label":"a","rate":1,"not_run":true}]}`},
		{name: "no results, lost backends say why", in: `{"executions":[{"label":"a","rate":1,"started_at":"2026-05-01T08:00:00.000Z","backend_errors":[{"backend":"x","error":"lost"}]}]}`},
		{name: "no results, error says why", in: `{"executions":[{"label":"a","rate":1,"started_at":"2026-05-01T08:00:00.000Z","error":"execution cancelled"}]}`},
		{name: "no results, nothing says why", in: `{"executions":[{"label":"a","rate":1,"started_at":"2026-05-01T08:00:00.000Z"}]}`, err: "without per-backend results: a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadReport([]byte(tc.in))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

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

func TestParseDecimal(t *testing.T) {
	for in, want := range map[string]string{"9": "9", "5.94": "5.94", "1e3": "1000", "0.001": "0.001", "2.50": "2.5"} {
		r, err := parseDecimal(in)
		if err != nil || fmtRat(r) != want {
			t.Errorf("parseDecimal(%q) = %v, %v; want %s", in, fmtRat(r), err, want)
		}
	}
	for _, in := range []string{"", "x", "1/3", "0x10", "1e999999999", "1e-31", "1_000", strings.Repeat("9", 65)} {
		if _, err := parseDecimal(in); err == nil {
			t.Errorf("parseDecimal(%q) succeeded", in)
		}
	}
}
