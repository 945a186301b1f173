package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// engineExec is one execution the bench asks of an engine.
type engineExec struct {
	ID          string
	Rate        uint32 // per worker
	Workers     uint32
	Duration    time.Duration
	Connections uint32 // per worker; 0: the engine's default
	MaxPending  uint32 // per worker
	Progress    time.Duration
}

// engineOutcome sums the Results of the executions of one row.
type engineOutcome struct {
	Planned uint64
	// Sent counts the requests that were written: every outcome but
	// pool_overflow and the connection failures.
	Sent uint64
	// OK counts 2xx answers; Errors every other outcome (overflow
	// included).
	OK, Errors uint64
	Overflow   uint64
	Unsent     uint64
	LateSends  uint64
	// Elapsed is the longest execution's, from the due time of request 0
	// to its last outcome.
	Elapsed time.Duration
	// P50 and P99 of latency_2xx (from the intended send), P50R and P99R
	// of request_to_response (from the write), LateP99 of send_lateness:
	// the highest among the executions, since percentiles are never
	// averaged.
	P50, P99, P50R, P99R, LateP99 time.Duration
	Counters                      map[string]uint64
	// Buckets counts the timeline buckets streamed, each checked to sum
	// to its Result; 0 for an engine without a timeline. ProgressEvents
	// counts the Progress events.
	Buckets, ProgressEvents int
}

// driveEngine runs execs on the engine at addr against url, all due from
// one start time a moment from now, and waits for every Result.
func driveEngine(ctx context.Context, addr, url string, execs []engineExec) (engineOutcome, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return engineOutcome{}, fmt.Errorf("engine client: %w", err)
	}
	defer func() { _ = cc.Close() }()
	client := enginev1.NewEngineClient(cc)
	longest := time.Duration(0)
	for _, x := range execs {
		longest = max(longest, x.Duration)
	}
	ctx, cancel := context.WithTimeout(ctx, longest+2*time.Minute)
	defer cancel()
	// One start time for all, as the driver gives a stage; far enough
	// ahead that every Execute is accepted before it.
	start := time.Now().Add(300 * time.Millisecond)
	results := make([]streamed, len(execs))
	errs := make([]error, len(execs))
	var wg sync.WaitGroup
	for i, x := range execs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = execute(ctx, client, url, x, start)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return engineOutcome{}, err
	}
	out := engineOutcome{Counters: map[string]uint64{}}
	for _, s := range results {
		r := s.result
		out.Buckets += s.buckets
		out.ProgressEvents += s.progress
		c := r.GetCounters()
		for k, v := range c {
			out.Counters[k] += v
		}
		out.Planned += r.GetPlanned()
		out.Unsent += r.GetUnsent()
		out.Elapsed = max(out.Elapsed, r.GetElapsed().AsDuration())
		for _, st := range r.GetStatistics() {
			switch st.GetId() {
			case record.Latency2xx:
				out.P50 = max(out.P50, time.Duration(st.GetP50()))
				out.P99 = max(out.P99, time.Duration(st.GetP99()))
			case record.RequestToResponse:
				out.P50R = max(out.P50R, time.Duration(st.GetP50()))
				out.P99R = max(out.P99R, time.Duration(st.GetP99()))
			case record.SendLateness:
				out.LateP99 = max(out.LateP99, time.Duration(st.GetP99()))
			}
		}
	}
	c := out.Counters
	all := record.Sum(c)
	out.OK = c[record.HTTP2xx]
	out.Errors = all - out.OK
	out.Overflow = c[record.PoolOverflow]
	out.Sent = all - out.Overflow - c[record.PoolConnectionFailure] - c[record.PoolFailureTimeout]
	out.LateSends = c[record.LateSends]
	if all+out.Unsent != out.Planned {
		return out, fmt.Errorf("engine accounted for %d of %d planned requests (%d unsent)", all, out.Planned, out.Unsent)
	}
	return out, nil
}

// streamed is what one Execute stream brought: its Result, and how many
// timeline buckets and Progress events came before it.
type streamed struct {
	result            *enginev1.Result
	buckets, progress int
}

// execute runs one execution, checks that its streamed timeline (if the
// engine has one) sums to its Result, and returns them.
func execute(ctx context.Context, client enginev1.EngineClient, url string, x engineExec, start time.Time) (streamed, error) {
	req := &enginev1.ExecuteRequest{
		ExecutionId:        x.ID,
		Label:              "bench/" + x.ID,
		Url:                url,
		Headers:            []*enginev1.Header{{Name: "User-Agent", Value: "sortie-bench"}},
		Rate:               x.Rate,
		Workers:            x.Workers,
		Duration:           durationpb.New(x.Duration),
		StartTime:          timestamppb.New(start),
		OpenLoop:           true,
		Connections:        x.Connections,
		MaxPendingRequests: x.MaxPending,
	}
	if x.Progress > 0 {
		req.ProgressInterval = durationpb.New(x.Progress)
	}
	stream, err := client.Execute(ctx, req)
	if err != nil {
		return streamed{}, fmt.Errorf("execute %s: %w", x.ID, err)
	}
	var out streamed
	var buckets []record.BucketLine
	var want uint32
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return out, fmt.Errorf("execute %s: stream ended without a result", x.ID)
		}
		if err != nil {
			return out, fmt.Errorf("execute %s: %w", x.ID, err)
		}
		switch e := ev.GetEvent().(type) {
		case *enginev1.ExecuteEvent_Started:
			want = e.Started.GetBuckets()
		case *enginev1.ExecuteEvent_Progress:
			out.progress++
			if err := e.Progress.DecodeCounters(); err != nil {
				return out, fmt.Errorf("execute %s: %w", x.ID, err)
			}
			for _, b := range e.Progress.GetBuckets() {
				buckets = append(buckets, record.BucketLine{Index: b.GetIndex(), Counters: b.GetCounters(), Unsent: b.GetUnsent()})
			}
		case *enginev1.ExecuteEvent_Result:
			out.result, out.buckets = e.Result, len(buckets)
			if want == 0 || x.Progress == 0 {
				return out, nil
			}
			r := record.BackendResult{Backend: x.ID, Counters: e.Result.GetCounters(), Unsent: e.Result.GetUnsent()}
			if err := record.CheckTimeline(buckets, r); err != nil || len(buckets) != int(want) {
				return out, fmt.Errorf("execute %s: %d of %d buckets streamed: %v", x.ID, len(buckets), want, err)
			}
			return out, nil
		}
	}
}
