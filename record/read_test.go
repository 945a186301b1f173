package record

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// streamLine is a minimal valid stream line for label.
func streamLine(label string) string {
	return `{"label":"` + label + `","scenario":"s","rate":3,"per_backend":true,"duration_ms":1000,"elapsed_ms":1001,"started_at":"2026-05-01T08:00:00.000Z","backends":["10.9.0.1:8443"],"results":[{"backend":"10.9.0.1:8443","elapsed_ms":1000,"counters":{"benchmark.http_2xx":3}}]}` + "\n"
}

func TestReadStream(t *testing.T) {
	// Caps small enough to test: a line of 400 bytes, a file of 8000.
	l := limits{file: 8000, line: 400}
	long := strings.Replace(strings.TrimSuffix(streamLine("s/long"), "\n"), `"scenario":"s"`, `"scenario":"`+strings.Repeat("s", 160)+`"`, 1)
	if n := len(streamLine("s/a")); n > l.line || len(long) <= l.line {
		t.Fatalf("a line is %d bytes and the long one %d, around a cap of %d", n, len(long), l.line)
	}
	for _, tc := range []struct {
		name    string
		in      string
		labels  []string // of the graded run
		all     int
		skipped []int
		runs    []StreamRun
		err     string
	}{
		{name: "one run", in: streamLine("s/a") + streamLine("s/b"), labels: []string{"s/a", "s/b"}, all: 2, runs: []StreamRun{{1, 2, 2, ""}}},
		{name: "blank lines are not counted", in: "\n" + streamLine("s/a") + "  \n", labels: []string{"s/a"}, all: 1, runs: []StreamRun{{2, 2, 1, ""}}},
		{name: "crlf", in: strings.TrimSuffix(streamLine("s/a"), "\n") + "\r\n", labels: []string{"s/a"}, all: 1, runs: []StreamRun{{1, 1, 1, ""}}},
		{name: "torn last line", in: streamLine("s/a") + streamLine("s/b")[:40], labels: []string{"s/a"}, all: 1, skipped: []int{2}, runs: []StreamRun{{1, 1, 1, ""}}},
		{name: "complete last line without newline", in: streamLine("s/a") + strings.TrimSuffix(streamLine("s/b"), "\n"), labels: []string{"s/a", "s/b"}, all: 2, runs: []StreamRun{{1, 2, 2, ""}}},
		{name: "fragment closed off", in: streamLine("s/a") + streamLine("s/b")[:60] + "\n" + streamLine("s/c"), labels: []string{"s/a", "s/c"}, all: 2, skipped: []int{2}, runs: []StreamRun{{1, 3, 2, ""}}},
		{name: "two runs: the last is graded", in: streamLine("s/a") + streamLine("s/b") + streamLine("s/a") + streamLine("s/b"), labels: []string{"s/a", "s/b"}, all: 4, runs: []StreamRun{{1, 2, 2, ""}, {3, 4, 2, "s/a"}}},
		{name: "a second run that died early", in: streamLine("s/a") + streamLine("s/b") + streamLine("s/b"), labels: []string{"s/b"}, all: 3, runs: []StreamRun{{1, 2, 2, ""}, {3, 3, 1, "s/b"}}},
		{name: "no label", in: `{"scenario":"s"}` + "\n" + streamLine("s/a"), labels: []string{"s/a"}, all: 1, skipped: []int{1}, runs: []StreamRun{{2, 2, 1, ""}}},
		{name: "wrong type", in: `{"label":"s/x","rate":"fast"}` + "\n" + `{"label": 3}` + "\n" + streamLine("s/a"), labels: []string{"s/a"}, all: 1, skipped: []int{1, 2}, runs: []StreamRun{{3, 3, 1, ""}}},
		{name: "not an object", in: "[1]\n\"s/a\"\nnull\n" + streamLine("s/a"), labels: []string{"s/a"}, all: 1, skipped: []int{1, 2, 3}, runs: []StreamRun{{4, 4, 1, ""}}},
		{name: "failures in either shape", in: strings.Replace(streamLine("s/a"), `"results"`, `"failures":[{"backend":"x","counters":{"benchmark.http_5xx":1}},"x: http_5xx=1"],"results"`, 1), labels: []string{"s/a"}, all: 1, runs: []StreamRun{{1, 1, 1, ""}}},
		{name: "failures of neither shape", in: strings.Replace(streamLine("s/a"), `"results"`, `"failures":[3],"results"`, 1) + streamLine("s/b"), labels: []string{"s/b"}, all: 1, skipped: []int{1}, runs: []StreamRun{{2, 2, 1, ""}}},
		{name: "nothing", in: "", err: "no execution line"},
		{name: "garbage only", in: "garbage\n{\n", err: "no execution line in the results stream (2 line(s) skipped)"},
		{name: "old format", in: `{"label":"s/a","rate":3,"duration_ms":1000,"elapsed_ms":1000,"backends":["x"]}` + "\n", err: "without started_at: s/a; without per-backend results: s/a"},
		{name: "a line over the cap is skipped", in: streamLine("s/a") + long + "\n" + streamLine("s/b"), labels: []string{"s/a", "s/b"}, all: 2, skipped: []int{2}, runs: []StreamRun{{1, 3, 2, ""}}},
		{name: "a last line over the cap", in: streamLine("s/a") + long, labels: []string{"s/a"}, all: 1, skipped: []int{2}, runs: []StreamRun{{1, 1, 1, ""}}},
		{name: "a stream over the cap", in: strings.Repeat(streamLine("s/a"), 40), err: "larger than 8000 bytes, the most a results stream may be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := l.readStream(strings.NewReader(tc.in))
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
			if len(src.All) != tc.all {
				t.Errorf("%d executions in all, want %d", len(src.All), tc.all)
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

func TestReadStreamLongLine(t *testing.T) {
	// Lines carry every statistic of every backend; they outgrow
	// bufio's default 4 KiB buffer and bufio.Scanner's 64 KiB token
	// without being unusual, and must be read whole below the cap.
	e := sample()
	for i := 0; i < 2000; i++ {
		e.Results = append(e.Results, e.Results[0])
	}
	line := mustLine(t, e)
	if len(line) < 1<<16 {
		t.Fatalf("line is only %d bytes", len(line))
	}
	src, err := ReadStream(strings.NewReader(line + line))
	if err != nil || len(src.Skipped) != 0 || len(src.All) != 2 {
		t.Fatalf("got %+v, err %v", src, err)
	}
}

func TestReadReport(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		err  string
	}{
		{name: "empty run", in: `{"pass":true,"executions":[]}`},
		{name: "no pass (a foreign writer)", in: `{"executions":[]}`},
		{name: "failures as objects (an older writer)", in: `{"pass":false,"executions":[{"label":"s/a","rate":9,"started_at":"2026-05-01T08:00:00.000Z","backends":[],"failures":[{"backend":"x","counters":{"benchmark.http_5xx":3}}],"results":[]}]}`},
		{name: "failures as words", in: `{"pass":false,"executions":[{"label":"s/a","rate":9,"started_at":"2026-05-01T08:00:00.000Z","backends":[],"failures":["x: http_5xx=3"],"results":[]}]}`},
		{name: "failures of neither shape", in: `{"pass":false,"executions":[{"label":"s/a","rate":9,"started_at":"2026-05-01T08:00:00.000Z","backends":[],"failures":[3],"results":[]}]}`, err: "executions[0]: failures[]"},
		{name: "unknown statistics", in: `{"pass":true,"executions":[{"label":"s/a","rate":9,"started_at":"2026-05-01T08:00:00.000Z","backends":[],"results":[{"backend":"x","counters":{},"statistics":{"sequencer.callback":{"count":1,"unit":"ns"}}}],"extension":{"any":1}}]}`},
		{name: "empty", in: ``, err: "not a sortie JSON report"},
		{name: "not json", in: `<html>`, err: "not a sortie JSON report"},
		{name: "array", in: `[]`, err: "not a sortie JSON report"},
		{name: "null", in: `null`, err: `no "executions" array`},
		{name: "no executions", in: `{"pass":true}`, err: `no "executions" array`},
		{name: "executions null", in: `{"pass":true,"executions":null}`, err: `no "executions" array`},
		{name: "truncated", in: `{"pass": true, "executions": [{"label": "a"`, err: "not a sortie JSON report"},
		{name: "pass of the wrong type", in: `{"pass": "yes", "executions": []}`, err: "not a sortie JSON report"},
		{name: "trailing garbage", in: `{"pass":true,"executions":[]} x`, err: "not a sortie JSON report"},
		{name: "no label", in: `{"executions":[{"rate":1}]}`, err: "executions[0]: no label"},
		{name: "negative counter", in: `{"executions":[{"label":"a","results":[{"backend":"x","counters":{"benchmark.http_2xx":-1}}]}]}`, err: "results"},
		{name: "negative rate", in: `{"executions":[{"label":"a","rate":-3}]}`, err: "negative"},
		{name: "huge exponent", in: `{"executions":[{"label":"a","rate":1e999999999}]}`, err: "rate"},
		{name: "ramp past the end", in: `{"executions":[{"label":"a","rate":1,"duration_ms":10,"ramp_ms":11}]}`, err: "ramp_ms 11 is longer"},
		{name: "bad time", in: `{"executions":[{"label":"a","rate":1,"started_at":"yesterday"}]}`, err: "started_at"},
		{name: "no started_at", in: `{"executions":[{"label":"a","rate":1,"results":[]}]}`, err: "without started_at: a"},
		{name: "refused needs no started_at", in: `{"executions":[{"label":"a","rate":1,"refused":"execution_cap","error":"cap"}]}`},
		{name: "refused in words needs no started_at", in: `{"executions":[{"label":"a","rate":1,"error":"backend x refused a start because the engine is at its cap"}]}`},
		{name: "not run needs neither", in: `{"executions":[{"label":"a","rate":1,"not_run":true}]}`},
		{name: "no results, lost backends say why", in: `{"executions":[{"label":"a","rate":1,"started_at":"2026-05-01T08:00:00.000Z","backend_errors":[{"backend":"x","error":"lost"}]}]}`},
		{name: "no results, error says why", in: `{"executions":[{"label":"a","rate":1,"started_at":"2026-05-01T08:00:00.000Z","error":"execution cancelled"}]}`},
		{name: "no results, nothing says why", in: `{"executions":[{"label":"a","rate":1,"started_at":"2026-05-01T08:00:00.000Z"}]}`, err: "without per-backend results: a"},
		{name: "over the cap", in: `{"pass":true,"executions":[]}` + strings.Repeat(" ", 8000), err: "not a sortie JSON report: larger than 8000 bytes, the most a report may be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := limits{file: 8000, line: 400}.readReport(strings.NewReader(tc.in))
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

func TestReadFieldReport(t *testing.T) {
	src, err := ReadReportFile("testdata/field.json")
	if err != nil {
		t.Fatal(err)
	}
	if src.Path != "testdata/field.json" || src.Form != FormReport {
		t.Errorf("path %q form %q", src.Path, src.Form)
	}
	rep := src.Report()
	if rep.Pass || len(rep.Executions) != 3 {
		t.Fatalf("pass=%v executions=%d, want false and 3", rep.Pass, len(rep.Executions))
	}
	e := rep.Executions[0]
	st := e.Results[0].Statistics
	if got := st["benchmark_http_client.latency_2xx"].P999; got != 3200000 {
		t.Errorf("p99.9 = %v, want 3200000", got)
	}
	if got := st["benchmark_http_client.response_body_size"].Unit; got != "raw" {
		t.Errorf("response_body_size unit = %q, want raw", got)
	}
	if _, ok := st["sequencer.callback"]; !ok {
		t.Error("sequencer.callback statistic dropped")
	}
	if e.Thresholds[1].Scope != "10.0.0.3:8443" && e.Thresholds[1].Scope != "10.0.0.2:8443" {
		t.Errorf("scope = %q", e.Thresholds[1].Scope)
	}
	if !rep.Executions[1].NotRun || rep.Executions[2].Refused != RefusedExecutionCap ||
		rep.Executions[2].BackendErrors[0].Refused != RefusedExecutionCap {
		t.Errorf("not_run/refused not read: %+v", rep.Executions[1:])
	}
	if r := src.Executions[0].ExactRate; r == nil || r.RatString() != "4" || !src.Executions[0].HasResults {
		t.Errorf("exact rate %v, has results %v", r, src.Executions[0].HasResults)
	}
}

func TestReadFailuresBothShapes(t *testing.T) {
	in := `{"pass":false,"executions":[{"label":"s/a","rate":9,"started_at":"2026-05-01T08:00:00.000Z","backends":["x"],"results":[],` +
		`"failures":[{"backend":"10.10.3.22:8443","counters":{"benchmark.http_5xx":3}},"threshold counter:benchmark.stream_resets == 0 failed on the pool: actual 4"]}]}`
	src, err := ReadReport(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Failure{
		{Backend: "10.10.3.22:8443", Counters: map[string]uint64{HTTP5xx: 3}},
		{Reason: "threshold counter:benchmark.stream_resets == 0 failed on the pool: actual 4"},
	}
	if d := cmp.Diff(want, src.Executions[0].Failures); d != "" {
		t.Errorf("failures (-want +got):\n%s", d)
	}
}

func TestParseDecimal(t *testing.T) {
	for in, want := range map[string]string{"9": "9", "5.94": "297/50", "1e3": "1000", "0.001": "1/1000", "2.50": "5/2", "1e+30": "1000000000000000000000000000000"} {
		r, err := ParseDecimal(in)
		if err != nil || r.RatString() != want {
			t.Errorf("ParseDecimal(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, in := range []string{"", "x", "1/3", "0x10", "1e999999999", "1e-31", "1_000", strings.Repeat("9", 65)} {
		if _, err := ParseDecimal(in); err == nil {
			t.Errorf("ParseDecimal(%q) succeeded", in)
		}
	}
}

func TestListSome(t *testing.T) {
	if got := ListSome([]string{"a", "b"}); got != "a, b" {
		t.Errorf("got %q", got)
	}
	if got := ListSome([]string{"a", "b", "c", "d", "e", "f", "g"}); got != "a, b, c, d, e and 2 more" {
		t.Errorf("got %q", got)
	}
}

func FuzzReadReport(f *testing.F) {
	field, err := os.ReadFile("testdata/field.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(field)
	for _, s := range []string{
		`{"pass": true, "executions": []}`,
		`{"pass": true, "executions": null}`,
		`{"pass": 1}`,
		"",
		`{"pass":false,"executions":[{"label":"s/a","rate":5.94,"started_at":"2026-05-01T08:00:00.000Z","backends":["x"],"failures":[{"backend":"x","counters":{"benchmark.http_5xx":3}},"words"],"results":[{"backend":"x","planned":9,"unsent":1,"counters":{"benchmark.http_2xx":8}}]}]}`,
		`{"executions":[{"label":"a","rate":1e30,"duration_ms":9223372036854775807,"started_at":"2026-05-01T08:00:00Z","error":"x"}]}`,
		`{"executions":[{"label":"s/a","not_run":true},{"label":"s/a","refused":"execution_cap","error":"e","started_at":"2026-05-01T08:00:00Z"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		src, err := ReadReport(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(src.All) != len(src.Executions) || src.Form != FormReport || len(src.Runs) != 0 || len(src.Skipped) != 0 {
			t.Fatalf("a report read as %+v", src)
		}
		for _, e := range src.Executions {
			if e.Label == "" {
				t.Fatal("execution without a label")
			}
			if e.ExactRate != nil && e.ExactRate.Sign() < 0 {
				t.Fatalf("negative rate %v", e.ExactRate)
			}
		}
		// What was read writes back and reads again to the same value
		// (a sentence of failures[] is kept only as a Reason, never
		// written). The writer omits an empty results array, which the
		// reader then takes for the older format unless an error says
		// why there is no result; the driver never writes an execution
		// that ran without a result and without saying why.
		for _, e := range src.Executions {
			if !e.NotRun && len(e.Results) == 0 && len(e.BackendErrors) == 0 && e.Error == "" {
				return
			}
		}
		rep := src.Report()
		out, err := Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ReadReport(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("re-read: %v\n%s", err, out)
		}
		if d := cmp.Diff(rep, again.Report(), cmpopts.EquateEmpty(), cmpopts.IgnoreFields(Failure{}, "Reason")); d != "" {
			t.Fatalf("round trip:\n%s", d)
		}
	})
}

func FuzzReadStream(f *testing.F) {
	line, _ := MarshalLine(sample())
	f.Add(line)
	f.Add(append(append([]byte{}, line...), line[:30]...))
	f.Add([]byte(streamLine("s/a") + streamLine("s/b") + streamLine("s/a")))
	f.Add([]byte("\n\n{\"label\":\"x\"}\n{"))
	f.Add([]byte(`{"label":"a","results":[{"counters":null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		src, err := ReadStream(bytes.NewReader(b))
		if err != nil {
			return
		}
		nonBlank := 0
		for _, l := range bytes.Split(b, []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				nonBlank++
			}
		}
		if len(src.All)+len(src.Skipped) != nonBlank {
			t.Fatalf("%d executions + %d skipped != %d non-blank lines", len(src.All), len(src.Skipped), nonBlank)
		}
		if len(src.Runs) == 0 || len(src.Executions) == 0 {
			t.Fatalf("no error, yet %d runs and %d executions", len(src.Runs), len(src.Executions))
		}
		sum := 0
		for _, r := range src.Runs {
			sum += r.Executions
		}
		if last := src.Runs[len(src.Runs)-1]; last.Executions != len(src.Executions) || sum != len(src.All) {
			t.Fatalf("runs %+v, %d executions graded of %d", src.Runs, len(src.Executions), len(src.All))
		}
		for _, e := range src.All {
			if e.Label == "" || e.Line == 0 {
				t.Fatalf("execution without a label or line: %+v", e)
			}
			if _, err := json.Marshal(e.Execution); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestReadReportLiveRecord: the report's live_record is carried on the
// Source, so a reader finds the live record the run appended to.
func TestReadReportLiveRecord(t *testing.T) {
	for in, want := range map[string]string{
		`{"pass":true,"executions":[],"live_record":"out/run/live.jsonl"}`: "out/run/live.jsonl",
		`{"pass":true,"executions":[]}`:                                    "",
	} {
		src, err := ReadReport(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		if src.LiveRecord != want {
			t.Errorf("%s: LiveRecord %q, want %q", in, src.LiveRecord, want)
		}
	}
}

// TestReadRefusesHostileNumbers refuses, in a report, what no engine
// could have written and a grader would misread: a rate written as a
// string, a counter written twice, a latency statistic outside its domain,
// counters whose sum over the backends wraps at 2^64.
func TestReadRefusesHostileNumbers(t *testing.T) {
	two := sample()
	two.Results = append(two.Results, two.Results[0])
	two.Results[1].Backend = "127.0.0.1:2"
	b, err := json.Marshal(two)
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	for _, tc := range []struct {
		name, from, to, err string
	}{
		{"string rate", `"rate":9,`, `"rate":"9",`, `rate: a JSON string "9", not a number`},
		{"duplicate counter", `"counters":{"benchmark.http_2xx":9}`, `"counters":{"benchmark.http_2xx":9,"benchmark.http_2xx":0}`, `the key "benchmark.http_2xx" appears twice`},
		{"duplicate label", `"scenario":"mesh"`, `"scenario":"mesh","label":"other"`, `the key "label" appears twice`},
		{"negative p99", `"p99":2000000,`, `"p99":-1,`, "p99 -1 ns is outside 0 to 2^63 ns"},
		{"huge p99", `"p99":2000000,`, `"p99":1e308,`, "p99 1e+308 ns is outside"},
		{"wrapping total", `"counters":{"benchmark.http_2xx":9}`, `"counters":{"benchmark.http_2xx":9223372036854775808}`, "counter benchmark.http_2xx summed over the backends passes 18446744073709551615"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.ReplaceAll(good, tc.from, tc.to)
			if bad == good {
				t.Fatalf("%q is not in %s", tc.from, good)
			}
			_, err := ReadReport(strings.NewReader(`{"executions": [` + bad + `]}`))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
	if _, err := ReadReport(strings.NewReader(`{"executions": [` + good + `]}`)); err != nil {
		t.Fatalf("the good report: %v", err)
	}
}

// TestReadRefusesDuplicateTopLevelKeys: a report whose top level writes a
// key twice is refused, where encoding/json would keep the last: a second
// executions array would hide the first from the grader, a second pass
// overrule the first. Keys are matched as encoding/json matches them,
// without regard to case.
func TestReadRefusesDuplicateTopLevelKeys(t *testing.T) {
	b, err := json.Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	for _, tc := range []struct{ name, doc, err string }{
		{"executions", `{"executions": [` + good + `], "executions": []}`, `the key "executions" appears twice at the top level`},
		{"pass", `{"pass": false, "executions": [` + good + `], "pass": true}`, `the key "pass" appears twice at the top level`},
		{"folded", `{"executions": [` + good + `], "Executions": []}`, `the key "Executions" appears twice at the top level`},
		{"trailing", `{"executions": [` + good + `]} {}`, `data after the report's object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadReport(strings.NewReader(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
	src, err := ReadReport(strings.NewReader(`{"pass": true, "made_by": {"x": [1, {"y": 2}]}, "executions": [` + good + `], "live_record": "l.jsonl"}`))
	if err != nil || src.Pass == nil || !*src.Pass || len(src.Executions) != 1 || src.LiveRecord != "l.jsonl" {
		t.Fatalf("the good report: %+v, %v", src, err)
	}
}
