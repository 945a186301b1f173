package engine

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sortie-soak/sortie/record"
)

// An execution with a start_offset takes up a schedule that began at
// start_time, long enough ago that start_time alone would be refused: it
// sends, counts and plans only the requests due from the offset on, at
// their original due times, and its timeline before the offset is empty.
func TestStartOffset(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	// 20/s per worker, two workers, a schedule of 20 s that began 15 s ago;
	// the execution takes it up at 15.5 s: requests 310..399 of each worker.
	start := time.Now().Add(-15 * time.Second)
	r := req("offset", srv.URL, 20, 20*time.Second)
	r.Workers = 2
	r.StartTime = timestamppb.New(start)
	r.StartOffset = durationpb.New(15500 * time.Millisecond)
	r.BucketWidth = durationpb.New(500 * time.Millisecond)
	r.ProgressInterval = durationpb.New(100 * time.Millisecond)
	got := te.execute(t, r)
	res := got.mustResult(t)
	if res.GetPlanned() != 2*90 || res.GetCounters()[record.HTTP2xx] != 2*90 || res.GetUnsent() != 0 {
		t.Fatalf("planned %d, 2xx %d, unsent %d; want 180, 180, 0", res.GetPlanned(), res.GetCounters()[record.HTTP2xx], res.GetUnsent())
	}
	if !res.GetStartedAt().AsTime().Equal(start) {
		t.Errorf("started_at %v, want the schedule's start %v", res.GetStartedAt().AsTime(), start)
	}
	buckets, _ := checkTimeline(t, got, "")
	for _, b := range buckets {
		n := b.Counters[record.HTTP2xx]
		switch {
		case b.Index < 31 && (n != 0 || b.Unsent != 0):
			t.Errorf("bucket %d before the offset: %d 2xx, %d unsent", b.Index, n, b.Unsent)
		case b.Index >= 31 && n != 20:
			t.Errorf("bucket %d: %d 2xx, want 20 (10 due per worker)", b.Index, n)
		}
	}
}

// A start_offset is refused when negative or past the last request, and
// the start-time window applies to start_time + start_offset.
func TestStartOffsetRefused(t *testing.T) {
	t.Parallel()
	te := startEngine(t, Options{})
	now := time.Now()
	tests := []struct {
		name   string
		start  time.Time
		offset time.Duration
		want   string
	}{
		{"negative", now, -time.Second, "start_offset: -1s must not be negative"},
		{"past the last request", now, 10 * time.Second, "is past the last request's due time 9.9s"},
		{"window on the sum", now.Add(-40 * time.Second), 5 * time.Second, "in the past"},
	}
	for _, tt := range tests {
		r := req("refused-"+strings.ReplaceAll(tt.name, " ", "-"), "http://127.0.0.1:9/", 10, 10*time.Second)
		r.StartTime = timestamppb.New(tt.start)
		r.StartOffset = durationpb.New(tt.offset)
		got := te.execute(t, r)
		if status.Code(got.err) != codes.InvalidArgument || !strings.Contains(got.err.Error(), tt.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT with %q", tt.name, got.err, tt.want)
		}
	}
}
