package engine

import (
	"context"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/clock"
)

// readUntilBuckets reads a stream's Started and Progress events until at
// least n buckets came, then breaks the stream, as a dying driver does.
func readUntilBuckets(t *testing.T, te *testEngine, r *enginev1.ExecuteRequest, n int) run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := te.client.Execute(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	var got run
	buckets := 0
	for buckets < n {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d buckets: %v", buckets, err)
		}
		switch e := ev.Event.(type) {
		case *enginev1.ExecuteEvent_Started:
			got.started = e.Started
		case *enginev1.ExecuteEvent_Progress:
			if err := e.Progress.DecodeCounters(); err != nil {
				t.Fatal(err)
			}
			got.progress = append(got.progress, e.Progress)
			buckets += len(e.Progress.GetBuckets())
		case *enginev1.ExecuteEvent_Result:
			t.Fatalf("the execution ended before %d buckets", n)
		}
	}
	return got
}

// held counts what a partial run holds: buckets and samples.
func held(r run) (buckets, samples uint32) {
	for _, p := range r.progress {
		buckets += uint32(len(p.GetBuckets()))
		samples += uint32(len(p.GetFailureSamples()))
	}
	return buckets, samples
}

// An execution whose driver went away runs to its planned end; a driver
// that attaches again by its id gets the rest of its timeline, each bucket
// and sample once, then its Result: together with what the first stream
// brought, the whole execution, exact.
func TestDetachedExecutionRunsOnAndAttaches(t *testing.T) {
	t.Parallel()
	srv := newFaultServer(t, 7, [numActs]int{actOK: 8, act503: 1}, false)
	te := startEngine(t, Options{BackendName: "node-a"})
	r := req("run-1/mesh/svc@a", srv.url(), 100, 1500*time.Millisecond)
	r.RunId = "run-1"
	r.BucketWidth = durationpb.New(100 * time.Millisecond)
	r.ProgressInterval = durationpb.New(50 * time.Millisecond)
	first := readUntilBuckets(t, te, r, 3)
	nb, ns := held(first)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	again := collect(te.client.Attach(ctx, &enginev1.AttachRequest{
		ExecutionId: r.ExecutionId, RunId: "run-1", FromBucket: nb, FromSample: ns,
		ProgressInterval: durationpb.New(50 * time.Millisecond),
	}))
	if again.err != nil {
		t.Fatalf("Attach: %v", again.err)
	}
	if !proto.Equal(again.started, first.started) {
		t.Errorf("Attach's Started %v, Execute's %v", again.started, first.started)
	}
	whole := run{started: first.started, progress: append(first.progress, again.progress...), result: again.result}
	checkTimeline(t, whole, srv.addr)
	res := again.result
	if res.GetCancelled() || res.GetUnsent() != 0 || res.GetPlanned() != 150 {
		t.Errorf("the detached execution: cancelled %v unsent %d planned %d, want it run whole (150)", res.GetCancelled(), res.GetUnsent(), res.GetPlanned())
	}

	// After its end it is still held: a second attach from the start gets
	// the whole timeline again and the same Result.
	waitRunning(t, te, 0)
	all := collect(te.client.Attach(ctx, &enginev1.AttachRequest{ExecutionId: r.ExecutionId}))
	checkTimeline(t, all, srv.addr)
	if !proto.Equal(all.result, res) {
		t.Errorf("the kept Result %v, the live one %v", all.result, res)
	}
	info, err := te.client.Info(ctx, &enginev1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetRetainedExecutions() != 1 || info.GetRetainedBytes() == 0 {
		t.Errorf("Info retained %d executions, %d bytes; want 1 and its size", info.GetRetainedExecutions(), info.GetRetainedBytes())
	}
}

// Attach names what it cannot follow: an unknown id, another run's
// execution, a position past what was sent.
func TestAttachRefusals(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	r := req("run-2/x@a", srv.URL, 20, 200*time.Millisecond)
	r.RunId = "run-2"
	te.execute(t, r).mustResult(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		req  *enginev1.AttachRequest
		want codes.Code
	}{
		{"unknown id", &enginev1.AttachRequest{ExecutionId: "run-2/y@a"}, codes.NotFound},
		{"another run", &enginev1.AttachRequest{ExecutionId: r.ExecutionId, RunId: "run-3"}, codes.NotFound},
		{"past the end", &enginev1.AttachRequest{ExecutionId: r.ExecutionId, FromBucket: 2}, codes.OutOfRange},
	} {
		got := collect(te.client.Attach(ctx, tc.req))
		if status.Code(got.err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got.err, tc.want)
		}
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// waitRetained polls until the engine holds n ended executions.
func waitRetained(t *testing.T, e *Engine, n int) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, bytes := e.retainedCount()
		if got == n {
			return bytes
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d executions retained, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A kept execution is let go when its retention ends, by the engine's
// clock, and the memory it held is returned. The execution is planned
// long and cancelled at once, so its timeline (100,000 buckets, each
// final with its unsent count) is megabytes. Not parallel: it reads the
// heap.
func TestRetentionExpiryFreesMemory(t *testing.T) {
	srv := okServer(t)
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	te := startEngine(t, Options{Retention: time.Hour, Clock: clk})
	r := req("long", srv.URL, 1, 100_000*time.Second)
	before := heapInUse()
	ch := startStream(t, te, r)
	waitRunning(t, te, 1)
	if _, err := te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: "long"}); err != nil {
		t.Fatal(err)
	}
	res := (<-ch).mustResult(t)
	if res.GetUnsent() == 0 {
		t.Fatalf("not cancelled: %v", res)
	}
	bytes := waitRetained(t, te.e, 1)
	if bytes < 2<<20 {
		t.Fatalf("retained %d bytes, want the timeline's megabytes", bytes)
	}
	kept := heapInUse()
	if kept < before+uint64(bytes)/2 {
		t.Fatalf("heap %d before, %d with the execution kept (estimate %d)", before, kept, bytes)
	}

	// A minute short of the hour it is still there.
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.WaitForSleepers(wctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Minute)
	if n, _ := te.e.retainedCount(); n != 1 {
		t.Fatalf("let go after 59 min of a 1 h retention")
	}
	if err := clk.WaitForSleepers(wctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	waitRetained(t, te.e, 0)
	freed := heapInUse()
	if kept-min(kept, freed) < uint64(bytes)/2 {
		t.Errorf("heap %d with the execution kept, %d after its retention (estimate %d): not returned", kept, freed, bytes)
	}
	t.Logf("heap: %d before, %d kept (estimate %d), %d after the retention", before, kept, bytes, freed)
	got := collect(te.client.Attach(context.Background(), &enginev1.AttachRequest{ExecutionId: "long"}))
	if status.Code(got.err) != codes.NotFound {
		t.Errorf("Attach after the retention: %v, want NotFound", got.err)
	}
}

// The kept executions stay within RetainBytes: the oldest go first.
func TestRetainBytesBound(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{RetainBytes: 1})
	for _, id := range []string{"first", "second"} {
		te.execute(t, req(id, srv.URL, 20, 100*time.Millisecond)).mustResult(t)
		waitRunning(t, te, 0)
	}
	waitRetained(t, te.e, 1)
	ctx := context.Background()
	if got := collect(te.client.Attach(ctx, &enginev1.AttachRequest{ExecutionId: "first"})); status.Code(got.err) != codes.NotFound {
		t.Errorf("the oldest kept past the bound: %v", got.err)
	}
	if got := collect(te.client.Attach(ctx, &enginev1.AttachRequest{ExecutionId: "second"})); got.err != nil {
		t.Errorf("the newest let go: %v", got.err)
	}
}
