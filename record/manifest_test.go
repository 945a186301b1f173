package record

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestManifestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := ManifestPath(filepath.Join(dir, "report.json"))
	if _, err := ReadManifestFile(path); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("missing manifest: %v, want ErrNoManifest", err)
	}
	m := &Manifest{RunID: "r1", Plan: "plan.yaml", PlanSHA256: "ab", Backends: map[string][]string{"nodes": {"127.0.0.1:1"}},
		Stages: []ManifestStage{{Name: "mesh", Dispatched: "2026-01-01T00:00:00.000Z", StartTime: "2026-01-01T00:00:02.000Z",
			Executions: []ManifestExecution{{Label: "mesh/a", Backend: "127.0.0.1:1", ExecutionID: "r1/mesh/a@127.0.0.1:1"}}}}}
	if err := WriteManifest(path, m); err != nil {
		t.Fatal(err)
	}
	got, err := ReadManifestFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A rejoin is read back whole: the next driver trusts nothing else
	// of an engine that is gone.
	m.Stages[0].Executions[0].Rejoins = []ManifestRejoin{{Addr: "127.0.0.1:2", ExecutionID: "r1/mesh/a@127.0.0.1:1~rejoin1", OffsetMs: 14000,
		Before: Counted{Planned: 240, Unsent: 3, Counters: map[string]uint64{HTTP2xx: 237}},
		Gap:    Gap{From: "2026-01-01T00:00:10.000Z", To: "2026-01-01T00:00:16.000Z", Count: 180, Why: GapRestarted, Backend: "127.0.0.1:2"}}}
	if err := WriteManifest(path, m); err != nil {
		t.Fatal(err)
	}
	if back, err := ReadManifestFile(path); err != nil || !reflect.DeepEqual(back.Stages[0].Executions[0].Rejoins, m.Stages[0].Executions[0].Rejoins) {
		t.Errorf("rejoins read back %+v, %v; want %+v", back, err, m.Stages[0].Executions[0].Rejoins)
	}
	if got.Version != ManifestVersion || got.RunID != "r1" || got.Stage("mesh") == nil || got.Stage("mesh").Executions[0].ExecutionID != "r1/mesh/a@127.0.0.1:1" {
		t.Errorf("read back %+v", got)
	}
}

func TestReadManifestRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"unknown field": `{"version":1,"run_id":"r","backends":{},"stages":[],"extra":1}`,
		"version":       `{"version":2,"run_id":"r","backends":{},"stages":[]}`,
		"no run id":     `{"version":1,"backends":{},"stages":[]}`,
		"bad time":      `{"version":1,"run_id":"r","backends":{},"stages":[{"name":"s","dispatched":"x","start_time":"y","executions":[]}]}`,
		"no id":         `{"version":1,"run_id":"r","backends":{},"stages":[{"name":"s","dispatched":"2026-01-01T00:00:00.000Z","start_time":"2026-01-01T00:00:00.000Z","executions":[{"label":"a"}]}]}`,
		"two values":    `{"version":1,"run_id":"r","backends":{},"stages":[]} {}`,
		"rejoin without an id": `{"version":1,"run_id":"r","backends":{},"stages":[{"name":"s","dispatched":"2026-01-01T00:00:00.000Z","start_time":"2026-01-01T00:00:00.000Z",` +
			`"executions":[{"label":"a","backend":"a:1","execution_id":"r/a@a:1","rejoins":[{"addr":"a:1","offset_ms":1000,"before":{"planned":1,"unsent":0,"counters":{}},"gap":{"from":"2026-01-01T00:00:00.000Z","to":"2026-01-01T00:00:01.000Z","count":1}}]}]}]}`,
		"rejoins out of order": `{"version":1,"run_id":"r","backends":{},"stages":[{"name":"s","dispatched":"2026-01-01T00:00:00.000Z","start_time":"2026-01-01T00:00:00.000Z",` +
			`"executions":[{"label":"a","backend":"a:1","execution_id":"r/a@a:1","rejoins":[` +
			`{"addr":"a:1","execution_id":"x2","offset_ms":9000,"before":{"planned":1,"unsent":0,"counters":{}},"gap":{"from":"2026-01-01T00:00:08.000Z","to":"2026-01-01T00:00:09.000Z","count":1}},` +
			`{"addr":"a:1","execution_id":"x1","offset_ms":5000,"before":{"planned":1,"unsent":0,"counters":{}},"gap":{"from":"2026-01-01T00:00:04.000Z","to":"2026-01-01T00:00:05.000Z","count":1}}]}]}]}`,
		"rejoin gap not a time": `{"version":1,"run_id":"r","backends":{},"stages":[{"name":"s","dispatched":"2026-01-01T00:00:00.000Z","start_time":"2026-01-01T00:00:00.000Z",` +
			`"executions":[{"label":"a","backend":"a:1","execution_id":"r/a@a:1","rejoins":[{"addr":"a:1","execution_id":"x1","offset_ms":1000,"before":{"planned":1,"unsent":0,"counters":{}},"gap":{"from":"then","to":"now","count":1}}]}]}]}`,
	} {
		if _, err := ReadManifest(strings.NewReader(in)); err == nil {
			t.Errorf("%s: read without error", name)
		}
	}
	big := bytes.Repeat([]byte(" "), maxManifestBytes+1)
	if _, err := ReadManifest(bytes.NewReader(big)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a manifest over the cap: %v", err)
	}
}

func FuzzReadManifest(f *testing.F) {
	f.Add([]byte(`{"version":1,"run_id":"r","backends":{"p":["a:1"]},"stages":[{"name":"s","dispatched":"2026-01-01T00:00:00.000Z","start_time":"2026-01-01T00:00:00.000Z","executions":[{"label":"a","backend":"a:1","execution_id":"r/a@a:1"}]}]}`))
	f.Add([]byte(`{"version":1,"run_id":"r","backends":{},"stages":[{"name":"s","dispatched":"2026-01-01T00:00:00.000Z","start_time":"2026-01-01T00:00:00.000Z",` +
		`"executions":[{"label":"a","backend":"a:1","execution_id":"r/a@a:1","rejoins":[{"addr":"a:1","execution_id":"x1","offset_ms":1000,"before":{"planned":1,"unsent":0,"counters":{"http_2xx":1}},"gap":{"from":"2026-01-01T00:00:00.000Z","to":"2026-01-01T00:00:01.000Z","count":1}}]}]}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`nope`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ReadManifest(bytes.NewReader(data))
		if err == nil && (m.RunID == "" || m.Version != ManifestVersion) {
			t.Fatalf("accepted %q as %+v", data, m)
		}
	})
}
