package engine

import (
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/clock"
)

// An execution outlives its driver: it runs to its planned end whatever
// became of the stream that started it, and the engine then keeps its
// Result and timeline for a retention window, so that a driver started
// again (sortie run --resume) follows it with Attach and loses nothing.
// What is kept is bounded: by time (Options.Retention after the end) and
// by memory (Options.RetainBytes, the oldest let go first).

// Defaults of the retention.
const (
	DefaultRetention   = time.Hour
	DefaultRetainBytes = 64 << 20
	// retainOverhead is what a kept execution holds besides its timeline
	// and Result: its spec, request bytes and bookkeeping, roughly.
	retainOverhead = 4 << 10
	// attachDefaultProgress is Attach's progress interval when neither
	// the request nor the execution names one.
	attachDefaultProgress = time.Second
)

// retire moves an ended execution from the running list to the retained
// ones, in one step, so that Attach finds it in one or the other, and lets
// the oldest go while the retained hold more than RetainBytes. It returns
// the estimate of what x holds.
func (e *Engine) retire(x *execution) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unregisterLocked(x)
	x.endedAt = e.opts.Clock.Now()
	x.expires = x.endedAt.Add(e.opts.Retention)
	x.bytes = x.tl.keep() + int64(proto.Size(x.res)) + int64(len(x.spec.request)) + retainOverhead
	e.retained = append(e.retained, x)
	e.retainedBytes += x.bytes
	for e.retainedBytes > e.opts.RetainBytes && len(e.retained) > 1 {
		old := e.retained[0]
		e.dropLocked(0)
		e.log.Warn("retained execution let go early: the retained executions hold more than the bound",
			"execution_id", old.spec.id, "bytes", old.bytes, "retain_bytes", e.opts.RetainBytes)
	}
	select {
	case e.retainChanged <- struct{}{}:
	default:
	}
	return x.bytes
}

// dropLocked lets retained execution i go; e.mu is held.
func (e *Engine) dropLocked(i int) {
	e.retainedBytes -= e.retained[i].bytes
	e.retained = slices.Delete(e.retained, i, i+1)
}

// janitor lets each retained execution go when its retention ends, timed
// by the engine's clock, until the engine stops.
func (e *Engine) janitor() {
	clk := e.opts.Clock
	for {
		e.mu.Lock()
		var next time.Time
		if len(e.retained) > 0 {
			// They end in order and keep the same retention: the first
			// expires first.
			next = e.retained[0].expires
		}
		e.mu.Unlock()
		var fired <-chan time.Time
		var t clock.Timer
		if !next.IsZero() {
			t = clk.NewTimer(next.Sub(clk.Now()))
			fired = t.C()
		}
		select {
		case now := <-fired:
			e.expire(now)
		case <-e.retainChanged:
		case <-e.ctx.Done():
			if t != nil {
				t.Stop()
			}
			return
		}
		if t != nil {
			t.Stop()
		}
	}
}

// expire lets go of the retained executions whose retention ended by now.
func (e *Engine) expire(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.retained) > 0 && !e.retained[0].expires.After(now) {
		x := e.retained[0]
		e.dropLocked(0)
		e.log.Info("retained execution let go", "execution_id", x.spec.id, "ended", x.endedAt, "bytes", x.bytes)
	}
}

// retainedCount is how many ended executions the engine holds, and their
// estimated bytes.
func (e *Engine) retainedCount() (int, int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.retained), e.retainedBytes
}

// lookup finds a running or retained execution of that id (and run id,
// when one is given), or says why not as a gRPC status.
func (e *Engine) lookup(id, runID string) (*execution, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var found *execution
	for _, x := range e.running {
		if x.spec.id == id {
			found = x
		}
	}
	for _, x := range e.retained {
		if found == nil && x.spec.id == id {
			found = x
		}
	}
	switch {
	case found == nil:
		return nil, status.Errorf(codes.NotFound, "engine %sholds no execution %q: never started here, or its retention (%v after its end) is over",
			nameForMsg(e.opts.BackendName), id, e.opts.Retention)
	case runID != "" && found.spec.runID != runID:
		return nil, status.Errorf(codes.NotFound, "engine %sholds execution %q of run %q, not of run %q",
			nameForMsg(e.opts.BackendName), id, found.spec.runID, runID)
	case found.started == nil:
		// Admitted, its Started not yet sent: a moment from running.
		return nil, status.Errorf(codes.Unavailable, "execution %q is starting; attach again", id)
	}
	return found, nil
}

// Attach follows an execution again: its Started, its timeline from the
// positions the driver names, Progress while it runs, its Result.
func (s *service) Attach(req *enginev1.AttachRequest, stream grpc.ServerStreamingServer[enginev1.ExecuteEvent]) error {
	e := s.e
	x, err := e.lookup(req.GetExecutionId(), req.GetRunId())
	if err != nil {
		e.log.Warn("attach refused", "execution_id", req.GetExecutionId(), "run_id", req.GetRunId(), "error", err)
		return err
	}
	cur := cursor{b: int(req.GetFromBucket()), s: int(req.GetFromSample())}
	if !x.tl.has(cur) {
		return status.Errorf(codes.OutOfRange, "execution %q: from_bucket %d, from_sample %d are past what it has sent (%d buckets of %d final)",
			x.spec.id, cur.b, cur.s, x.tl.finalCount(), x.spec.buckets)
	}
	every := req.GetProgressInterval().AsDuration()
	if every <= 0 {
		every = x.spec.progress
	}
	if every <= 0 {
		every = attachDefaultProgress
	}
	every = max(every, minProgressInterval)
	log := e.log.With("execution_id", x.spec.id, "label", x.spec.label)
	log.Info("execution attached", "from_bucket", cur.b, "from_sample", cur.s)
	if err := stream.Send(&enginev1.ExecuteEvent{Event: &enginev1.ExecuteEvent_Started{Started: x.started}}); err != nil {
		return err
	}
	return e.follow(stream, x, &cur, every, log)
}
