package record

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func sample() Execution {
	return Execution{
		Label: "mesh/svc-1", Scenario: "mesh", Pool: "nodes", Rate: 9, PerBackend: true,
		DurationMs: 1000, ElapsedMs: 1500, StartedAt: "2026-01-02T03:04:05.006Z", EndedAt: "2026-01-02T03:04:06.506Z",
		Pass: true, Backends: []string{"127.0.0.1:1", "127.0.0.1:2"},
		Thresholds: []Threshold{{Expr: "counter:benchmark.http_5xx == 0", Scope: "pool", Pass: true, Actual: "0"}},
		Totals:     map[string]uint64{"benchmark.http_2xx": 18},
		Results: []BackendResult{{
			Backend: "127.0.0.1:1", BackendName: "node-a", ElapsedMs: 1000, Planned: 9,
			Counters: map[string]uint64{"benchmark.http_2xx": 9},
			Statistics: map[string]Statistic{"benchmark_http_client.latency_2xx": {
				Count: 9, Unit: "ns", Mean: 1.5e6, Pstdev: 2e5, Min: 1e6, Max: 2e6, P50: 1.4e6, P90: 1.9e6, P99: 2e6, P999: 2e6}},
		}},
	}
}

func TestReadFieldReport(t *testing.T) {
	rep, err := ReadFile("testdata/field.json")
	if err != nil {
		t.Fatal(err)
	}
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
}

func TestReadReportRejects(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"array", "[]"},
		{"null", "null"},
		{"no executions", `{"pass": true}`},
		{"no pass", `{"executions": []}`},
		{"null executions", `{"pass": true, "executions": null}`},
		{"truncated", `{"pass": true, "executions": [{"label": "a"`},
		{"wrong type", `{"pass": "yes", "executions": []}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rep, err := ReadReport(strings.NewReader(tc.in)); err == nil {
				t.Errorf("ReadReport(%q) = %+v, want an error", tc.in, rep)
			}
		})
	}
}

func TestWriteFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	want := &Report{Pass: true, Executions: []Execution{sample()}}
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteReport(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	b, _ := os.ReadFile(path)
	if !bytes.HasPrefix(b, []byte("{\n  \"pass\": true,\n  \"executions\": [\n    {\n      \"label\"")) || !bytes.HasSuffix(b, []byte("}\n")) {
		t.Errorf("layout is not two-space indented JSON with a final newline:\n%s", b)
	}
	if !bytes.Contains(b, []byte(`"p99.9": 2000000`)) {
		t.Errorf("p99.9 not written as an integer-looking number:\n%s", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the report (no temporary file left)", len(ents))
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
}

func TestMarshalEmptyRun(t *testing.T) {
	b, err := Marshal(&Report{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"executions": []`)) {
		t.Errorf("empty run written as %s, want an empty executions array", b)
	}
	if _, err := ReadReport(bytes.NewReader(b)); err != nil {
		t.Errorf("empty run does not read back: %v", err)
	}
}

func TestStreamAppendAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stream.jsonl")
	w, err := OpenStream(path)
	if err != nil {
		t.Fatal(err)
	}
	a := sample()
	b := Execution{Label: "mesh/svc-2/stage-2", Scenario: "mesh", NotRun: true, Error: "not run: x", Backends: []string{"127.0.0.1:1"}}
	for _, e := range []Execution{a, b} {
		if err := w.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.Append(a); err == nil {
		t.Error("Append after Close succeeded")
	}
	raw, _ := os.ReadFile(path)
	if n := bytes.Count(raw, []byte("\n")); n != 2 {
		t.Errorf("%d lines, want 2:\n%s", n, raw)
	}
	got, bad, err := ReadStreamFile(path)
	if err != nil || bad != 0 {
		t.Fatalf("ReadStreamFile: bad=%d err=%v", bad, err)
	}
	if d := cmp.Diff([]Execution{a, b}, got); d != "" {
		t.Errorf("stream (-want +got):\n%s", d)
	}
	// Reopening appends; it never truncates.
	w, err = OpenStream(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(b); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, _, _ = ReadStreamFile(path)
	if len(got) != 3 {
		t.Errorf("after reopen %d executions, want 3", len(got))
	}
}

func TestStreamClosesTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stream.jsonl")
	whole, _ := MarshalLine(sample())
	torn := whole[:len(whole)/2]
	if err := os.WriteFile(path, append(append([]byte{}, whole...), torn...), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := OpenStream(path)
	if err != nil {
		t.Fatal(err)
	}
	next := sample()
	next.Label = "mesh/after-crash"
	if err := w.Append(next); err != nil {
		t.Fatal(err)
	}
	w.Close()
	raw, _ := os.ReadFile(path)
	want := string(whole) + string(torn) + "\n" + mustLine(t, next)
	if string(raw) != want {
		t.Errorf("file:\n%s\nwant:\n%s", raw, want)
	}
	got, bad, err := ReadStreamFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 1 || len(got) != 2 || got[1].Label != "mesh/after-crash" {
		t.Errorf("read %d executions (%v), %d bad; want 2 and 1 bad", len(got), labels(got), bad)
	}
}

func mustLine(t *testing.T, e Execution) string {
	t.Helper()
	b, err := MarshalLine(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func labels(es []Execution) []string {
	var s []string
	for _, e := range es {
		s = append(s, e.Label)
	}
	return s
}

func TestReadStreamTolerates(t *testing.T) {
	line := mustLine(t, sample())
	for _, tc := range []struct {
		name      string
		in        string
		n, bad    int
		lastLabel string
	}{
		{"empty", "", 0, 0, ""},
		{"one", line, 1, 0, "mesh/svc-1"},
		{"no final newline", strings.TrimSuffix(line, "\n"), 1, 0, "mesh/svc-1"},
		{"blank lines", "\n\n" + line + "\n  \n", 1, 0, "mesh/svc-1"},
		{"torn tail", line + line[:20], 1, 1, "mesh/svc-1"},
		{"garbage between", line + "}{\n" + line, 2, 1, "mesh/svc-1"},
		{"object without label", `{"pass": true}` + "\n" + line, 1, 1, "mesh/svc-1"},
		{"array", "[1,2]\n", 0, 1, ""},
		{"wrong type", `{"label": 3}` + "\n", 0, 1, ""},
		{"crlf", strings.TrimSuffix(line, "\n") + "\r\n", 1, 0, "mesh/svc-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bad, err := ReadStream(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.n || bad != tc.bad {
				t.Fatalf("got %d executions, %d bad; want %d, %d", len(got), bad, tc.n, tc.bad)
			}
			if tc.n > 0 && got[len(got)-1].Label != tc.lastLabel {
				t.Errorf("last label %q, want %q", got[len(got)-1].Label, tc.lastLabel)
			}
		})
	}
}

func TestReadStreamLongLine(t *testing.T) {
	// Lines carry every statistic of every backend; they outgrow
	// bufio.Scanner's default 64 KiB token without being unusual.
	e := sample()
	for i := 0; i < 2000; i++ {
		e.Results = append(e.Results, e.Results[0])
	}
	line := mustLine(t, e)
	if len(line) < 1<<16 {
		t.Fatalf("line is only %d bytes", len(line))
	}
	got, bad, err := ReadStream(strings.NewReader(line + line))
	if err != nil || bad != 0 || len(got) != 2 {
		t.Fatalf("got %d, bad %d, err %v", len(got), bad, err)
	}
}

func FuzzReadReport(f *testing.F) {
	field, err := os.ReadFile("testdata/field.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(field)
	f.Add([]byte(`{"pass": true, "executions": []}`))
	f.Add([]byte(`{"pass": true, "executions": null}`))
	f.Add([]byte(`{"pass": 1}`))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := ReadReport(bytes.NewReader(b))
		if err != nil {
			return
		}
		if rep.Executions == nil {
			t.Fatalf("accepted a report without executions: %q", b)
		}
		// What was read writes back and reads again to the same value.
		out, err := Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ReadReport(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("re-read: %v\n%s", err, out)
		}
		if d := cmp.Diff(rep, again, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("round trip:\n%s", d)
		}
	})
}

func FuzzReadStream(f *testing.F) {
	line, _ := MarshalLine(sample())
	f.Add(line)
	f.Add(append(append([]byte{}, line...), line[:30]...))
	f.Add([]byte("\n\n{\"label\":\"x\"}\n{"))
	f.Add([]byte(`{"label":"a","results":[{"counters":null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, bad, err := ReadStream(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		nonBlank := 0
		for _, l := range bytes.Split(b, []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				nonBlank++
			}
		}
		if len(got)+bad != nonBlank {
			t.Fatalf("%d executions + %d bad != %d non-blank lines", len(got), bad, nonBlank)
		}
		for _, e := range got {
			if e.Label == "" {
				t.Fatal("execution without a label")
			}
			if _, err := json.Marshal(e); err != nil {
				t.Fatal(err)
			}
		}
	})
}
