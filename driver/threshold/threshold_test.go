package threshold

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/record"
)

func TestParse(t *testing.T) {
	tests := []struct {
		expr    string
		want    Threshold
		wantErr string // substring; "" means no error
	}{
		{expr: "counter:benchmark.http_5xx == 0", want: Threshold{Kind: Counter, Name: "benchmark.http_5xx", Op: Eq, Value: 0}},
		{expr: "rate:benchmark.http_2xx >= 5.94", want: Threshold{Kind: Rate, Name: "benchmark.http_2xx", Op: Ge, Value: 5.94}},
		{expr: "counter: benchmark.pool_overflow<=3", want: Threshold{Kind: Counter, Name: "benchmark.pool_overflow", Op: Le, Value: 3}},
		{expr: "counter:benchmark.stream_resets_connection_termination != 1", want: Threshold{Kind: Counter, Name: "benchmark.stream_resets_connection_termination", Op: Ne, Value: 1}},
		{expr: "counter:benchmark.late_sends < 10", want: Threshold{Kind: Counter, Name: "benchmark.late_sends", Op: Lt, Value: 10}},
		{expr: "latency_2xx.p99 < 200ms", want: Threshold{Kind: Statistic, Name: "benchmark_http_client.latency_2xx", Field: "p99", Op: Lt, Value: 200e6, Duration: true}},
		{expr: "latency_2xx.p99.9 < 1.5s", want: Threshold{Kind: Statistic, Name: "benchmark_http_client.latency_2xx", Field: "p99.9", Op: Lt, Value: 1.5e9, Duration: true}},
		{expr: "benchmark_http_client.latency_2xx.mean<=250us", want: Threshold{Kind: Statistic, Name: "benchmark_http_client.latency_2xx", Field: "mean", Op: Le, Value: 250e3, Duration: true}},
		{expr: "latency_2xx.max > 1000", want: Threshold{Kind: Statistic, Name: "benchmark_http_client.latency_2xx", Field: "max", Op: Gt, Value: 1000}},
		{expr: "latency_2xx.count >= 2700", want: Threshold{Kind: Statistic, Name: "benchmark_http_client.latency_2xx", Field: "count", Op: Ge, Value: 2700}},
		{expr: "sequencer.callback.p50 < 60s", want: Threshold{Kind: Statistic, Name: "sequencer.callback", Field: "p50", Op: Lt, Value: 60e9, Duration: true}},
		{expr: "queue_to_connect.pstdev < 1ms", want: Threshold{Kind: Statistic, Name: "benchmark_http_client.queue_to_connect", Field: "pstdev", Op: Lt, Value: 1e6, Duration: true}},

		{expr: "counter:benchmark.http_5xx = 0", wantErr: `operator "="`},
		{expr: "counter:benchmark.http_5xx", wantErr: "no comparison operator"},
		{expr: "counter:benchmark.http_5xx ==", wantErr: "no value after =="},
		{expr: "== 0", wantErr: "nothing before =="},
		{expr: "counter:benchmark.http_5xx == 0 == 1", wantErr: "more than one comparison operator"},
		{expr: "counter:benchmark.http_5xxx == 0", wantErr: "unknown counter benchmark.http_5xxx"},
		{expr: "counter:http_5xx == 0", wantErr: `"http_5xx" is not a counter name`},
		{expr: "counter:benchmark.http_5xx == lots", wantErr: `"lots" is not a number`},
		{expr: "rate:benchmark.http_2xx >= -1", wantErr: "negative"},
		{expr: "rate:benchmark.http_2xx >= NaN", wantErr: "not a number"},
		{expr: "rate:benchmark.http_2xx >= +Inf", wantErr: "not a number"},
		{expr: "gauge:benchmark.http_2xx >= 1", wantErr: `unknown threshold kind "gauge"`},
		{expr: "latency_2xx.p95 < 200ms", wantErr: "field one of"},
		{expr: "latency_2xx.count < 1s", wantErr: "count takes a plain number"},
		{expr: "latency_2xx.p99 < fast", wantErr: "neither a duration"},
		{expr: "latency_2xx.p99 < -5ms", wantErr: "negative"},
		{expr: "latency_2xx.p99 < -5", wantErr: "negative"},
		{expr: "bad id!.p99 < 1", wantErr: `operator "!"`},
		{expr: "bad id.p99 < 1", wantErr: "is not a statistic id"},
		{expr: ".p99 < 1", wantErr: "is not a statistic id"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := Parse(tt.expr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want one containing %q", tt.expr, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.expr, err)
			}
			tt.want.Expr = tt.expr
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tt.expr, diff)
			}
		})
	}
}

func TestPool(t *testing.T) {
	for expr, want := range map[string]bool{
		"counter:benchmark.http_5xx == 0": true,
		"rate:benchmark.http_2xx >= 1":    true,
		"latency_2xx.p99 < 1s":            false,
	} {
		if got := mustParse(t, expr).Pool(); got != want {
			t.Errorf("%q.Pool() = %v, want %v", expr, got, want)
		}
	}
}

func mustParse(t *testing.T, expr string) Threshold {
	t.Helper()
	th, err := Parse(expr)
	if err != nil {
		t.Fatalf("Parse(%q): %v", expr, err)
	}
	return th
}

func TestEvalPool(t *testing.T) {
	totals := map[string]uint64{
		"benchmark.http_2xx": 5400,
		"benchmark.http_5xx": 3,
	}
	// 5400 requests over the elapsed time of the report in the field.
	elapsed := time.Duration(300.001996 * float64(time.Second))
	tests := []struct {
		expr       string
		totals     map[string]uint64
		elapsed    time.Duration
		wantPass   bool
		wantActual string
	}{
		{"counter:benchmark.http_5xx == 0", totals, elapsed, false, "3"},
		{"counter:benchmark.http_5xx <= 3", totals, elapsed, true, "3"},
		{"counter:benchmark.http_4xx == 0", totals, elapsed, true, "0"}, // missing reads 0
		{"counter:benchmark.http_4xx == 0", nil, elapsed, true, "0"},
		{"counter:benchmark.http_2xx > 5400", totals, elapsed, false, "5400"},
		{"counter:benchmark.http_2xx != 5400", totals, elapsed, false, "5400"},
		{"rate:benchmark.http_2xx >= 18", totals, 300 * time.Second, true, "18"},
		{"rate:benchmark.http_2xx >= 18", totals, elapsed, false, "17.999880240796795"},
		{"rate:benchmark.http_2xx >= 5.94", totals, elapsed, true, "17.999880240796795"},
		{"rate:benchmark.http_2xx < 18", totals, elapsed, true, "17.999880240796795"},
		{"rate:benchmark.http_4xx == 0", totals, elapsed, true, "0"},
		{"rate:benchmark.http_2xx >= 0", totals, 0, false, "no elapsed time to divide by"},
		{"latency_2xx.p99 < 1s", totals, elapsed, false, "statistic threshold is judged per backend, not on the pool"},
	}
	for _, tt := range tests {
		pass, actual := mustParse(t, tt.expr).EvalPool(tt.totals, tt.elapsed)
		if pass != tt.wantPass || actual != tt.wantActual {
			t.Errorf("%q.EvalPool(%v, %v) = %v, %q; want %v, %q", tt.expr, tt.totals, tt.elapsed, pass, actual, tt.wantPass, tt.wantActual)
		}
	}
}

func TestEvalBackend(t *testing.T) {
	stats := map[string]record.Statistic{
		"benchmark_http_client.latency_2xx": {
			Count: 2700, Unit: "ns", Mean: 2024726.5, Pstdev: 1543048, Min: 671936, Max: 79745023,
			P50: 2045439, P90: 2230015, P99: 2555135, P999: 9028607,
		},
		"benchmark_http_client.latency_5xx":        {Count: 0, Unit: "ns"},
		"benchmark_http_client.response_body_size": {Count: 2700, Unit: "raw", Mean: 19, Min: 19, Max: 19},
	}
	tests := []struct {
		expr       string
		wantPass   bool
		wantActual string
	}{
		{"latency_2xx.p99 < 200ms", true, "2555135"},
		{"latency_2xx.p99 < 2555135", false, "2555135"},
		{"latency_2xx.p99 <= 2555135", true, "2555135"},
		{"latency_2xx.p99.9 < 9ms", false, "9028607"},
		{"latency_2xx.p50 < 60s", true, "2045439"},
		{"latency_2xx.p90 > 2ms", true, "2230015"},
		{"latency_2xx.max < 50ms", false, "79745023"},
		{"latency_2xx.min >= 671936", true, "671936"},
		{"latency_2xx.mean < 3ms", true, "2024726.5"},
		{"latency_2xx.pstdev < 1ms", false, "1543048"},
		{"latency_2xx.count >= 2700", true, "2700"},
		{"benchmark_http_client.latency_2xx.count == 2701", false, "2700"},
		{"latency_4xx.p99 < 1s", false, "missing statistic benchmark_http_client.latency_4xx"},
		{"latency_5xx.p99 < 1s", false, "no samples in statistic benchmark_http_client.latency_5xx"},
		{"latency_5xx.count == 0", true, "0"},
		{"response_body_size.max < 20", true, "19"},
		{"response_body_size.max < 20ms", false, "statistic benchmark_http_client.response_body_size is in unit raw, not a duration"},
		{"counter:benchmark.http_5xx == 0", false, "counter threshold is judged on the pool, not per backend"},
	}
	for _, tt := range tests {
		pass, actual := mustParse(t, tt.expr).EvalBackend(stats)
		if pass != tt.wantPass || actual != tt.wantActual {
			t.Errorf("%q.EvalBackend = %v, %q; want %v, %q", tt.expr, pass, actual, tt.wantPass, tt.wantActual)
		}
	}
	if pass, actual := mustParse(t, "latency_2xx.p99 < 1s").EvalBackend(nil); pass || actual != "missing statistic benchmark_http_client.latency_2xx" {
		t.Errorf("EvalBackend(nil) = %v, %q", pass, actual)
	}
}

func TestOp(t *testing.T) {
	tests := []struct {
		op   Op
		a, b float64
		want bool
	}{
		{Eq, 1, 1, true}, {Eq, 1, 2, false},
		{Ne, 1, 2, true}, {Ne, 1, 1, false},
		{Lt, 1, 2, true}, {Lt, 2, 2, false},
		{Le, 2, 2, true}, {Le, 3, 2, false},
		{Gt, 3, 2, true}, {Gt, 2, 2, false},
		{Ge, 2, 2, true}, {Ge, 1, 2, false},
		{Op(0), 1, 1, false},
		{Eq, math.NaN(), math.NaN(), false},
	}
	for _, tt := range tests {
		if got := tt.op.Holds(tt.a, tt.b); got != tt.want {
			t.Errorf("%v %s %v = %v, want %v", tt.a, tt.op, tt.b, got, tt.want)
		}
	}
}

// FuzzParse checks that any expression parses or fails without a panic, and
// that what parses is judged without one.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"counter:benchmark.http_5xx == 0",
		"rate:benchmark.http_2xx >= 5.94",
		"latency_2xx.p99 < 200ms",
		"latency_2xx.p99.9<=1.5s",
		"benchmark_http_client.latency_2xx.count > 1",
		"x.p99.9.p99 != 1e3",
		"counter:benchmark.stream_resets_remote_reset >= 0",
		"",
		"<",
		"a:b:c == 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		th, err := Parse(expr)
		if err != nil {
			return
		}
		if th.Expr != expr || th.Kind < Counter || th.Kind > Statistic || th.Op < Eq || th.Op > Ge {
			t.Fatalf("Parse(%q) = %+v", expr, th)
		}
		if math.IsNaN(th.Value) || th.Value < 0 {
			t.Fatalf("Parse(%q) value %v", expr, th.Value)
		}
		th.EvalPool(map[string]uint64{th.Name: 7}, time.Second)
		th.EvalBackend(map[string]record.Statistic{th.Name: {Count: 1, Unit: "ns"}})
	})
}
