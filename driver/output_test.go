package driver

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// goldenReport covers every kind of execution the summary shows.
func goldenReport() *record.Report {
	lat := record.Statistic{Count: 30, Unit: "ns", Mean: 2.1e6, Pstdev: 1e5, Min: 1.2e6, Max: 9.87654e6, P50: 2.04e6, P90: 2.3e6, P99: 3.1e6, P999: 9.8e6}
	return &record.Report{Executions: []record.Execution{
		{
			Label: "mesh/svc-1", Scenario: "mesh", Pool: "nodes", Rate: 10, PerBackend: true, DurationMs: 3000,
			ElapsedMs: 3512, StartedAt: "2026-01-02T03:04:05.000Z", EndedAt: "2026-01-02T03:04:08.512Z", Pass: true,
			DNS: "engines.test:8443", Backends: []string{"10.0.0.1:8443", "10.0.0.2:8443"},
			Thresholds: []record.Threshold{
				{Expr: "counter:benchmark.http_5xx == 0", Scope: "pool", Pass: true, Actual: "0"},
				{Expr: "latency_2xx.p99 < 200ms", Scope: "10.0.0.1:8443", Pass: true, Actual: "3100000"},
			},
			Totals: map[string]uint64{"benchmark.http_2xx": 60},
			Results: []record.BackendResult{
				{Backend: "10.0.0.1:8443", BackendName: "node-a", ElapsedMs: 3001, Planned: 30, Counters: map[string]uint64{"benchmark.http_2xx": 30},
					Statistics: map[string]record.Statistic{"benchmark_http_client.latency_2xx": lat}},
				{Backend: "10.0.0.2:8443", ElapsedMs: 3002, Planned: 30, Counters: map[string]uint64{"benchmark.http_2xx": 30}},
			},
		},
		{
			Label: "mesh/svc-2", Scenario: "mesh", Pool: "nodes", Rate: 20, DurationMs: 3000, RampMs: 1000,
			ElapsedMs: 15012, StartedAt: "2026-01-02T03:04:05.000Z", Backends: []string{"10.0.0.1:8443", "10.0.0.2:8443"},
			Thresholds: []record.Threshold{{Expr: "counter:benchmark.http_5xx == 0", Scope: "pool", Pass: false, Actual: "3"}},
			FailureReasons: []string{
				"backend 10.0.0.2:8443: silent: no answer within 40s of its deadline (2026-01-02T03:06:13.500Z): not in the answer window, nor after the cancel; the engine is silent (frozen or partitioned)",
				"threshold counter:benchmark.http_5xx == 0 failed on the pool: actual 3",
			},
			Results: []record.BackendResult{{Backend: "10.0.0.1:8443", ElapsedMs: 3001, Planned: 20, Unsent: 2, Cancelled: true,
				Counters: map[string]uint64{"benchmark.http_2xx": 15, "benchmark.http_5xx": 3}}},
			BackendErrors: []record.BackendError{{Backend: "10.0.0.2:8443", Error: "silent: no answer within 40s of its deadline (2026-01-02T03:06:13.500Z): not in the answer window, nor after the cancel; the engine is silent (frozen or partitioned)"}},
		},
		{
			Label: "stairs/stage-1", Scenario: "stairs", Pool: "nodes", Rate: 2, PerBackend: true, DurationMs: 1000,
			ElapsedMs: 12, StartedAt: "2026-01-02T03:04:09.000Z", Refused: record.RefusedExecutionCap,
			Error:          "backend 10.0.0.2:8443 refused a start because the engine is at its cap of 1 concurrent executions",
			FailureReasons: []string{"backend 10.0.0.2:8443 refused a start because the engine is at its cap of 1 concurrent executions", "backend 10.0.0.2:8443: refused the start"},
			Backends:       []string{"10.0.0.1:8443", "10.0.0.2:8443"},
			BackendErrors:  []record.BackendError{{Backend: "10.0.0.2:8443", Error: "refused the start", Refused: record.RefusedExecutionCap}},
		},
		{
			Label: "stairs/stage-2", Scenario: "stairs", Pool: "nodes", Rate: 4, PerBackend: true, DurationMs: 1000, NotRun: true,
			Error: "not run: stairs/stage-1 was refused", Backends: []string{"10.0.0.1:8443", "10.0.0.2:8443"},
		},
	}}
}

func TestSummaryGolden(t *testing.T) {
	var b bytes.Buffer
	writeSummary(&b, goldenReport())
	golden(t, "summary.golden", b.Bytes())
}

func TestLinesGolden(t *testing.T) {
	var b bytes.Buffer
	l := &lineWriter{w: &b}
	backends := []string{"10.0.0.1:8443", "10.0.0.2:8443"}
	l.running(&execRun{label: "mesh/svc-1", rate: 10, perBackend: true, duration: 3 * time.Second}, backends)
	l.running(&execRun{label: "ramp", rate: 20, duration: 90 * time.Second, ramp: 30 * time.Second}, backends)
	l.progress("mesh/svc-1", "10.0.0.1:8443", &enginev1.Progress{Elapsed: durationpb.New(1530 * time.Millisecond),
		Counters:     map[string]uint64{"benchmark.http_2xx": 15, "benchmark.http_5xx": 2, "benchmark.pool_overflow": 1, "benchmark.http_inflight_lost": 0},
		LatencyCount: 17, LatencyMeanNs: 2_123_456, LatencyMaxNs: 9_876_543})
	l.progress("mesh/svc-1", "10.0.0.2:8443", &enginev1.Progress{Elapsed: durationpb.New(400 * time.Millisecond)})
	rep := goldenReport()
	for _, e := range rep.Executions {
		l.finished(e)
	}
	l.printf("%s", finalLine(rep))
	golden(t, "lines.golden", b.Bytes())
}

func TestFinalLine(t *testing.T) {
	for _, tc := range []struct {
		rep  record.Report
		want string
	}{
		{record.Report{Pass: true, Executions: []record.Execution{{Pass: true}, {Pass: true}}}, "PASS  2/2 executions passed"},
		{record.Report{Executions: []record.Execution{{Pass: true}, {}, {NotRun: true}}}, "FAIL  1/2 executions passed, 1 not run"},
		{record.Report{Cancelled: true, Executions: []record.Execution{{}, {NotRun: true}}}, "FAIL  0/1 executions passed, 1 not run (run interrupted)"},
		{record.Report{}, "FAIL  0/0 executions passed"},
	} {
		if got := finalLine(&tc.rep); got != tc.want {
			t.Errorf("finalLine = %q, want %q", got, tc.want)
		}
	}
}
