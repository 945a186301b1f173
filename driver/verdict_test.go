package driver

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sortie-soak/sortie/driver/threshold"
	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// verdictStage is a finished stage of one execution on five backends: one
// answered with failure classes, one answered late with an overflow, one
// lost and one silent, neither of which has a result, and one whose result
// is a request short.
func verdictStage(t *testing.T) (*scenarioRun, *execRun, *stageOutcome) {
	t.Helper()
	th, err := threshold.Parse("counter:benchmark.http_5xx == 0")
	if err != nil {
		t.Fatal(err)
	}
	backends := []string{"10.10.3.21:8443", "10.10.3.22:8443", "10.10.3.23:8443", "10.10.3.24:8443", "10.10.3.25:8443"}
	ex := &execRun{label: "mesh/svc-1", rate: 10, perBackend: true, duration: 3 * time.Second, timeout: time.Second,
		thresholds: []threshold.Threshold{th}, planned: map[string]uint64{}}
	sc := &scenarioRun{name: "mesh", pool: "nodes", backends: backends}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	deadline := at.Add(2*time.Minute + 9500*time.Millisecond)
	result := func(counters map[string]uint64) *enginev1.Result {
		return &enginev1.Result{Counters: counters, Planned: 30, Elapsed: durationpb.New(3 * time.Second)}
	}
	calls := []*call{
		{backend: backends[0], backendName: "node-a", state: answered, endedAt: at.Add(3500 * time.Millisecond), deadline: deadline,
			result: result(map[string]uint64{record.HTTP2xx: 25, record.HTTP5xx: 3, record.StreamResets: 2,
				record.ResetsBeforeHeaders: 2, record.StreamResetsPrefix + record.ReasonRemoteReset: 2})},
		{backend: backends[1], backendName: "node-b", state: answered, endedAt: deadline.Add(10 * time.Second), deadline: deadline,
			cancelWhy: cancelDeadline, result: result(map[string]uint64{record.HTTP2xx: 29, record.PoolOverflow: 1})},
		{backend: backends[2], state: lost, endedAt: at.Add(time.Second), deadline: deadline,
			err: status.Error(codes.Unavailable, "connection refused")},
		{backend: backends[3], state: silent, endedAt: deadline.Add(40 * time.Second), deadline: deadline, cancelWhy: cancelDeadline},
		{backend: backends[4], backendName: "node-e", state: answered, endedAt: at.Add(3500 * time.Millisecond), deadline: deadline,
			result: result(map[string]uint64{record.HTTP2xx: 29})},
	}
	for _, c := range calls {
		c.ex = ex
	}
	return sc, ex, &stageOutcome{dispatched: at, calls: map[*execRun][]*call{ex: calls}}
}

// TestVerdictGolden holds the shape of one judged execution: failures[]
// in the compatibility shape, one {backend, counters} object per backend
// with a non-zero failure class; the sentences in failure_reasons, where a
// lost or silent backend, which has no counters, is named too; a kind on
// every backend error.
func TestVerdictGolden(t *testing.T) {
	sc, ex, out := verdictStage(t)
	r := &runner{opts: scriptOptions()}
	r.opts.AnswerWindow, r.opts.CancelWait, r.opts.Drain = 10*time.Second, 30*time.Second, 5*time.Second
	e := r.verdict(sc, ex, out, nil)
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "verdict.golden", append(b, '\n'))

	// What older readers of failures[] read: backend and counters.
	var raw struct {
		Failures []map[string]json.RawMessage `json:"failures"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, f := range raw.Failures {
		var backend string
		var counters map[string]uint64
		if json.Unmarshal(f["backend"], &backend) != nil || json.Unmarshal(f["counters"], &counters) != nil || len(f) != 2 {
			t.Errorf("failures[] entry %v is not {backend, counters}", f)
		}
		for k, v := range counters {
			if v == 0 || !record.InZeroFailureSet(k) {
				t.Errorf("failures[] of %s holds %s=%d", backend, k, v)
			}
		}
		named = append(named, backend)
	}
	if want := sc.backends[:2]; !slices.Equal(named, want) {
		t.Errorf("failures[] names %v, want %v", named, want)
	}
	for _, b := range sc.backends[2:] {
		if !slices.ContainsFunc(e.FailureReasons, func(s string) bool { return strings.HasPrefix(s, "backend "+b+": ") }) {
			t.Errorf("failure_reasons %q do not name %s, which has no result", e.FailureReasons, b)
		}
	}
	for _, be := range e.BackendErrors {
		if be.Kind == "" || record.KindOf(record.BackendError{Error: be.Error}) != be.Kind {
			t.Errorf("backend error %+v: its words do not begin with its kind", be)
		}
	}
	// Read back by the record's reader, either shape.
	got, err := record.ReadReport(strings.NewReader(`{"pass": false, "executions": [` + string(b) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if f := got.Executions[0].Failures; len(f) != 2 || f[0].Counters[record.HTTP5xx] != 3 || f[0].Reason != "" {
		t.Errorf("read back: %+v", f)
	}
}
