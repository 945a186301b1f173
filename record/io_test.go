package record

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
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
	src, err := ReadReportFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, src.Report()); d != "" {
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
	src, err := ReadStreamFile(path)
	if err != nil || len(src.Skipped) != 0 {
		t.Fatalf("ReadStreamFile: %+v, %v", src, err)
	}
	if d := cmp.Diff([]Execution{a, b}, Plain(src.All)); d != "" {
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
	src, _ = ReadStreamFile(path)
	if len(src.All) != 3 {
		t.Errorf("after reopen %d executions, want 3", len(src.All))
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
	src, err := ReadStreamFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := Plain(src.All)
	if len(src.Skipped) != 1 || len(got) != 2 || got[1].Label != "mesh/after-crash" {
		t.Errorf("read %d executions (%v), skipped lines %v; want 2 and 1 skipped", len(got), labels(got), src.Skipped)
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
