package record

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var series = Series{
	Label: "mesh/svc-1", Backend: "10.0.0.5:8443", BackendName: "node-b",
	Start: time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC), Width: time.Second,
}

// bucket is a bucket line of series with the given counters.
func bucket(index uint32, counters map[string]uint64) BucketLine {
	b := series.Bucket(index)
	b.Counters = counters
	b.Latency.Count = counters[HTTP2xx]
	return b
}

func TestSeriesLines(t *testing.T) {
	b := series.Bucket(41)
	b.Counters = map[string]uint64{HTTP2xx: 8, HTTP5xx: 1}
	b.Latency = BucketLatency{Count: 8, P50: 700_000, P99: 3_400_000, Max: 3_400_000}
	got, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"bucket","label":"mesh/svc-1","backend":"10.0.0.5:8443","backend_name":"node-b","index":41,` +
		`"start":"2026-01-02T03:04:46.006Z","offset_ms":41000,"width_ms":1000,` +
		`"counters":{"benchmark.http_2xx":8,"benchmark.http_5xx":1},` +
		`"latency":{"count":8,"p50":700000,"p99":3400000,"max":3400000}}`
	if string(got) != want {
		t.Errorf("bucket line\n got %s\nwant %s", got, want)
	}

	s := series.Sample(41_234_567_891, 41_236_000_000)
	s.Class, s.Reason, s.Phase = StreamResets, StreamResetsPrefix+ReasonConnectionTermination, ResetsBeforeHeaders
	s.Remote, s.ConnAgeMs, s.ConnRequests = "10.1.2.3:8080", 12_000, 7
	got, err = json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"type":"sample","label":"mesh/svc-1","backend":"10.0.0.5:8443","backend_name":"node-b","bucket":41,` +
		`"due":"2026-01-02T03:04:46.240Z","due_offset_ms":41234,"outcome":"2026-01-02T03:04:46.242Z","outcome_offset_ms":41236,` +
		`"latency_ns":1432109,"class":"benchmark.stream_resets","reason":"benchmark.stream_resets_connection_termination",` +
		`"phase":"benchmark.stream_resets_before_headers","remote":"10.1.2.3:8080","conn_age_ms":12000,"conn_requests":7}`
	if string(got) != want {
		t.Errorf("sample line\n got %s\nwant %s", got, want)
	}
	var back SampleLine
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(s, back); d != "" {
		t.Errorf("sample line round trip (-want +got):\n%s", d)
	}
}

func TestSumBuckets(t *testing.T) {
	lines := []BucketLine{
		bucket(0, map[string]uint64{HTTP2xx: 9}),
		bucket(1, map[string]uint64{HTTP2xx: 7, HTTP5xx: 2}),
		bucket(2, map[string]uint64{HTTP2xx: 3}),
	}
	lines[2].Unsent = 6
	lines[1].SamplesDropped = 1
	got := SumBuckets(lines)
	want := TimelineTotals{Counters: map[string]uint64{HTTP2xx: 19, HTTP5xx: 2}, Unsent: 6, SamplesDropped: 1, Buckets: 3}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("SumBuckets (-want +got):\n%s", d)
	}
	over := SumBuckets([]BucketLine{bucket(0, map[string]uint64{HTTP2xx: 1 << 63}), bucket(1, map[string]uint64{HTTP2xx: 1 << 63})})
	if !over.Overflow {
		t.Errorf("a sum past 64 bits is not flagged: %+v", over)
	}
}

func TestCheckTimeline(t *testing.T) {
	result := BackendResult{Backend: series.Backend, Planned: 27, Unsent: 6,
		Counters: map[string]uint64{HTTP2xx: 19, HTTP5xx: 2, LateSends: 1}}
	good := func() []BucketLine {
		l := []BucketLine{
			bucket(0, map[string]uint64{HTTP2xx: 9, LateSends: 1}),
			bucket(1, map[string]uint64{HTTP2xx: 7, HTTP5xx: 2}),
			bucket(2, map[string]uint64{HTTP2xx: 3}),
		}
		l[2].Unsent = 6
		return l
	}
	if err := CheckTimeline(good(), result); err != nil {
		t.Fatalf("a timeline that sums to its result: %v", err)
	}
	tests := []struct {
		name  string
		lines func() []BucketLine
		want  TimelineError
	}{
		{"a counter short", func() []BucketLine { l := good(); l[1].Counters[HTTP5xx] = 1; return l },
			TimelineError{Mismatches: []TimelineMismatch{{HTTP5xx, 1, 2}}}},
		{"a counter the result lacks", func() []BucketLine { l := good(); l[0].Counters[StreamResets] = 1; return l },
			TimelineError{Mismatches: []TimelineMismatch{{StreamResets, 1, 0}}}},
		{"late sends are counters too", func() []BucketLine { l := good(); delete(l[0].Counters, LateSends); return l },
			TimelineError{Mismatches: []TimelineMismatch{{LateSends, 0, 1}}}},
		{"unsent", func() []BucketLine { l := good(); l[2].Unsent = 5; return l },
			TimelineError{Mismatches: []TimelineMismatch{{UnsentCounter, 5, 6}}}},
		// The sums hold, and still a bucket recorded twice is caught.
		{"a bucket twice", func() []BucketLine {
			l := good()
			l[2].Counters[HTTP2xx] = 0
			return append(l, bucket(1, map[string]uint64{HTTP2xx: 3}))
		}, TimelineError{Duplicates: []uint32{1}}},
		{"a bucket missing", func() []BucketLine {
			l := good()
			l[0].Counters[HTTP2xx] = 16
			return append(l[:1], l[2:]...)
		}, TimelineError{Mismatches: []TimelineMismatch{{HTTP5xx, 0, 2}}, Gaps: []uint32{1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTimeline(tt.lines(), result)
			var te *TimelineError
			if !errors.As(err, &te) {
				t.Fatalf("CheckTimeline = %v, want a *TimelineError", err)
			}
			tt.want.Label, tt.want.Backend = series.Label, series.Backend
			if d := cmp.Diff(&tt.want, te); d != "" {
				t.Errorf("TimelineError (-want +got):\n%s", d)
			}
			if te.Error() == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestCheckSamples(t *testing.T) {
	buckets := []BucketLine{
		bucket(0, map[string]uint64{HTTP2xx: 9}),
		bucket(1, map[string]uint64{HTTP2xx: 5, HTTP5xx: 2, StreamResets: 1, ResetsBeforeHeaders: 1,
			StreamResetsPrefix + ReasonRemoteReset: 1, PoolOverflow: 1}),
	}
	buckets[1].SamplesDropped = 1
	sample := func(b uint32, class string) SampleLine {
		s := series.Sample(int64(b)*int64(time.Second)+5e8, int64(b)*int64(time.Second)+6e8)
		s.Class = class
		return s
	}
	good := []SampleLine{sample(1, HTTP5xx), sample(1, StreamResets), sample(1, HTTP5xx)}
	if err := CheckSamples(buckets, good); err != nil {
		t.Fatalf("samples that add up: %v", err)
	}
	if got, want := FailureClasses, []string{HTTP4xx, HTTP5xx, StreamResets, PoolConnectionFailure, PoolFailureTimeout, PoolOverflow, InflightLost, RequestTimeout, LateDropped,
		TCPDeferred, TCPUnavailable, UDPLost, UDPSendErrors, UDPDeferred, UDPUnavailable, StreamDeferred, StreamUnavailable,
		GRPCStatusPrefix + "1", GRPCStatusPrefix + "2", GRPCStatusPrefix + "3", GRPCStatusPrefix + "4", GRPCStatusPrefix + "5",
		GRPCStatusPrefix + "6", GRPCStatusPrefix + "7", GRPCStatusPrefix + "8", GRPCStatusPrefix + "9", GRPCStatusPrefix + "10",
		GRPCStatusPrefix + "11", GRPCStatusPrefix + "12", GRPCStatusPrefix + "13", GRPCStatusPrefix + "14", GRPCStatusPrefix + "15",
		GRPCStatusPrefix + "16", GRPCStatusMissing}; !cmp.Equal(got, want) {
		t.Errorf("FailureClasses = %v, want %v", got, want)
	}
	// A gRPC bucket: a call answered 200 with UNAVAILABLE leaves the
	// sample of its status (it is in no HTTP class); a reset call leaves
	// its reset's sample only, not one of its missing status too; so one
	// sample a failed call. grpc_status.0 is no failure.
	grpc := []BucketLine{bucket(0, map[string]uint64{GRPCStatusOK: 3, HTTP2xx: 3, GRPCStatusPrefix + "14": 1, GRPCError: 2,
		GRPCStatusMissing: 1, StreamResets: 1, ResetsBeforeHeaders: 1, StreamResetsPrefix + ReasonRemoteReset: 1})}
	if err := CheckSamples(grpc, []SampleLine{sample(0, GRPCStatusPrefix+"14"), sample(0, StreamResets)}); err != nil {
		t.Errorf("gRPC samples, one a failed call: %v", err)
	}
	if err := CheckSamples(grpc, []SampleLine{sample(0, StreamResets)}); err == nil {
		t.Error("a gRPC bucket without the sample of its call answered 200 with grpc_status.14 passed")
	}
	if err := CheckSamples(grpc, []SampleLine{sample(0, GRPCStatusPrefix+"14"), sample(0, GRPCStatusMissing), sample(0, StreamResets), sample(0, StreamResets)}); err == nil {
		t.Error("more samples than failed calls passed")
	}
	if err := CheckSamples(grpc, []SampleLine{sample(0, GRPCStatusPrefix+"14"), sample(0, GRPCStatusOK), sample(0, StreamResets)}); err == nil {
		t.Error("a sample of grpc_status.0 passed")
	}
	tests := []struct {
		name    string
		samples []SampleLine
		want    []SampleMismatch
	}{
		{"one short", good[:2], []SampleMismatch{{Bucket: 1, Samples: 2, Dropped: 1, Failures: 4}}},
		{"more of a class than counted", []SampleLine{sample(1, HTTP5xx), sample(1, StreamResets), sample(1, StreamResets)},
			[]SampleMismatch{{Bucket: 1, Samples: 3, Dropped: 1, Failures: 4, OverClasses: []string{StreamResets}}}},
		{"a class that is no failure", []SampleLine{sample(1, HTTP5xx), sample(1, StreamResets), sample(1, HTTP2xx)},
			[]SampleMismatch{{Bucket: 1, Samples: 3, Dropped: 1, Failures: 4, OverClasses: []string{HTTP2xx}}}},
		{"a sample in a clean bucket", append([]SampleLine{sample(0, HTTP5xx)}, good...),
			[]SampleMismatch{{Bucket: 0, Samples: 1, Failures: 0, OverClasses: []string{HTTP5xx}}}},
		{"a sample without its bucket", append([]SampleLine{sample(7, HTTP5xx)}, good...),
			[]SampleMismatch{{Bucket: 7, Samples: 1, Missing: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSamples(buckets, tt.samples)
			var se *SampleError
			if !errors.As(err, &se) {
				t.Fatalf("CheckSamples = %v, want a *SampleError", err)
			}
			if d := cmp.Diff(tt.want, se.Buckets); d != "" {
				t.Errorf("mismatches (-want +got):\n%s", d)
			}
			if se.Label != series.Label || se.Backend != series.Backend || se.Error() == "" {
				t.Errorf("error %q names %q on %q", se.Error(), se.Label, se.Backend)
			}
		})
	}
}

// TestConservesHostileClasses: request_timeout and late_dropped are
// outcome classes, so a result that counts its requests in them conserves,
// and one that leaves them out does not; connection_protocol_error is of
// a connection, not a request, and in no outcome class, but all three are
// in the zero-failure set.
func TestConservesHostileClasses(t *testing.T) {
	r := BackendResult{Backend: "b", Planned: 10, Unsent: 1, Counters: map[string]uint64{
		HTTP2xx: 5, RequestTimeout: 2, LateDropped: 2, ConnectionProtocolError: 3,
	}}
	if err := r.Conserves(); err != nil {
		t.Errorf("conserving result: %v", err)
	}
	delete(r.Counters, LateDropped)
	var ae *AccountingError
	if err := r.Conserves(); !errors.As(err, &ae) || ae.Diff() != -2 {
		t.Errorf("without late_dropped: %v, want 2 missing", err)
	}
	for _, k := range []string{RequestTimeout, LateDropped, ConnectionProtocolError} {
		if !InZeroFailureSet(k) {
			t.Errorf("%s is not in the zero-failure set", k)
		}
	}
	if slices.Contains(Outcomes, ConnectionProtocolError) {
		t.Errorf("%s is an outcome class", ConnectionProtocolError)
	}
}
