package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// execution is one running ExecuteRequest: its workers, and what cancels
// and aborts them.
type execution struct {
	spec    *spec
	base    time.Time // spec.start with a monotonic reading
	workers []*worker
	tl      *timeline // built with the workers

	ctx    context.Context // cancelled: the pacers stop
	cancel context.CancelFunc

	abortOnce sync.Once
	abort     chan struct{} // closed: in-flight requests are cut short

	done chan struct{} // closed when every worker finished

	// started is the Started event of Execute, sent again by Attach.
	started *enginev1.Started

	// Once the execution ended, the engine keeps its result and timeline
	// (for Attach) and lets go of its workers: mu guards workers, res and
	// final, which hold the cumulative counters a Progress carries once
	// the workers are gone. finished is closed once res is set and the
	// engine has moved the execution from its running list to the
	// retained ones (launch), so no call sees a Result out and the
	// execution still running.
	mu       sync.Mutex
	res      *enginev1.Result
	final    *progressSummary
	finished chan struct{}
	// Retention, set when the execution ends (the engine's mu): when it
	// ended and will be let go, by the engine's clock, and what it holds.
	endedAt, expires time.Time
	bytes            int64
}

// newExecution is an execution of s without its workers: cheap, so that
// the engine can refuse it (at the cap, a duplicate, while stopping) before
// anything costly exists. build makes the workers.
func newExecution(s *spec, parent context.Context) *execution {
	now := time.Now()
	x := &execution{
		spec:     s,
		base:     now.Add(s.start.Sub(now)),
		abort:    make(chan struct{}),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	x.ctx, x.cancel = context.WithCancel(parent)
	return x
}

// build makes the workers, each with a timer from newSleeper (a
// descriptor on Linux), a pool and its histograms. When one fails, those
// already made are released and none is kept.
func (x *execution) build(newSleeper func() (*sleeper, error)) error {
	s := x.spec
	tl := newTimeline(s.bucketWidth, s.buckets, s.workers, s.sampleBudget)
	workers := make([]*worker, 0, s.workers)
	for i := range s.workers {
		sl, err := newSleeper()
		if err != nil {
			for _, w := range workers {
				w.release()
			}
			return fmt.Errorf("worker %d of %d: %w", i, s.workers, err)
		}
		workers = append(workers, newWorker(s, i, x.base, x.ctx, s.stats != nil, sl, tl))
	}
	x.workers, x.tl = workers, tl
	return nil
}

// release frees what the workers hold outside the heap (the timers'
// descriptors) at once rather than at some later garbage collection, and
// cancels x. Called on every way out of Execute: never while workers run
// (a worker that ran closed its own timer already; closing twice is safe).
func (x *execution) release() {
	x.cancel()
	for _, w := range x.workers {
		w.release()
	}
}

// start runs the workers; done closes when all have drained.
func (x *execution) start() {
	var wg sync.WaitGroup
	for _, w := range x.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(x.abort)
		}()
	}
	go func() {
		wg.Wait()
		close(x.done)
	}()
}

// abortNow cancels and cuts in-flight requests short.
func (x *execution) abortNow() {
	x.cancel()
	x.abortOnce.Do(func() { close(x.abort) })
}

// counters sums the counters of workers ws.
func counters(ws []*worker) counterSet {
	var total, one counterSet
	for _, w := range ws {
		w.stats.snapshot(&one)
		total.add(&one)
	}
	return total
}

// progress builds in m the next Progress of a stream at cur: a cumulative
// snapshot (counters and the latency_2xx summary) with up to
// maxPerProgress of the final buckets and of the samples past cur; more
// says others wait. The event is m's, valid until m builds the next. The
// timeline is taken before the counters, so they include every failure
// in its samples and buckets.
func (x *execution) progress(cur *cursor, m *progressStream) (ev *enginev1.ExecuteEvent, more bool) {
	m.reset()
	more = x.tl.take(cur, maxPerProgress, m)
	x.mu.Lock()
	final := x.final
	x.mu.Unlock()
	var sum progressSummary
	if final != nil {
		// Ended: the snapshot taken at the end, the workers being gone.
		sum = *final
	} else {
		x.snapshot(&sum)
	}
	m.setCounters(&sum.c)
	m.setElapsed(sum.elapsed)
	m.p.LatencyCount, m.p.LatencyMeanNs, m.p.LatencyMaxNs = sum.latCount, sum.latMean, sum.latMax
	return &m.ev, more
}

// progressSummary is the cumulative part of a Progress.
type progressSummary struct {
	c        counterSet
	elapsed  time.Duration
	latCount uint64
	latMean  float64
	latMax   int64
}

// snapshot reads the cumulative part of a Progress from the running
// workers into sum.
func (x *execution) snapshot(sum *progressSummary) {
	x.mu.Lock()
	ws := x.workers
	x.mu.Unlock()
	sum.c = counters(ws)
	sum.elapsed = max(time.Since(x.base), 0)
	var total int64
	for _, w := range ws {
		total += w.stats.lat2xxSum.Load()
		sum.latMax = max(sum.latMax, w.stats.lat2xxMax.Load())
	}
	// The count is the 2xx counter, read before the sums: the mean may
	// include a response or two more than the count, never fewer.
	sum.latCount = sum.c[cHTTP2xx]
	if sum.latCount > 0 {
		sum.latMean = float64(total) / float64(sum.latCount)
	}
}

// end keeps the execution's Result and last snapshot and lets go of its
// workers (their pools, connections and histograms): what an ended
// execution holds is its timeline, its Result and its spec. Called once,
// after done; the caller closes finished.
func (x *execution) end(backendName string) *enginev1.Result {
	res := x.result(backendName)
	final := new(progressSummary)
	x.snapshot(final)
	x.release()
	x.mu.Lock()
	x.res, x.final, x.workers = res, final, nil
	x.mu.Unlock()
	return res
}

// result assembles the Result once every worker finished.
func (x *execution) result(backendName string) *enginev1.Result {
	c := counters(x.workers)
	r := &enginev1.Result{
		ExecutionId: x.spec.id,
		BackendName: backendName,
		Counters:    c.toMap(),
		StartedAt:   timestamppb.New(x.spec.start),
		Planned:     (x.spec.pacer.Planned() - x.spec.first) * uint64(len(x.workers)),
	}
	last := int64(0)
	for _, w := range x.workers {
		r.Unsent += w.unsent
		if l := w.stats.last.Load(); l > last {
			last = l
		}
	}
	r.Cancelled = r.Unsent > 0
	r.Elapsed = durationpb.New(time.Duration(last))

	// Per-worker histograms are merged, never their percentiles averaged,
	// into a new histogram of the same geometry: the workers' own stay as
	// they are, so result may be called again and says the same. A lone
	// histogram is read as it is: a fresh copy would cost 200 KB for
	// latency and 40 KB for each other statistic, allocated by every
	// execution of a stage at the same moment, when they end together.
	merge := func(fresh func() *hdrhistogram.Histogram, pick func(*workerStats) *hdrhistogram.Histogram) *hdrhistogram.Histogram {
		var out, only *hdrhistogram.Histogram
		for _, w := range x.workers {
			h := pick(w.stats)
			switch {
			case h == nil:
				continue
			case only == nil && out == nil:
				only = h
				continue
			case out == nil:
				out = fresh()
				out.Merge(only)
			}
			out.Merge(h)
		}
		if out == nil {
			return only
		}
		return out
	}
	if x.spec.mode != modeHTTP {
		id := record.TCPMessageLatency
		switch x.spec.mode {
		case modeUDP:
			id = record.UDPMessageLatency
		case modeWS:
			id = record.StreamMessageLatency
		}
		h := merge(newLatencyHist, func(s *workerStats) *hdrhistogram.Histogram { return s.message })
		if h == nil {
			h = newLatencyHist()
		}
		r.Statistics = append(r.Statistics, statistic(id, h),
			statistic(record.SendLateness, merge(newHist, func(s *workerStats) *hdrhistogram.Histogram { return s.lateness })))
		return r
	}
	for class := 0; class < numClasses; class++ {
		h := merge(newLatencyHist, func(s *workerStats) *hdrhistogram.Histogram { return s.latency[class] })
		if h == nil || (class != 1 && h.TotalCount() == 0) {
			continue
		}
		id := record.LatencyPrefix + string(rune('1'+class)) + "xx"
		r.Statistics = append(r.Statistics, statistic(id, h))
	}
	if x.spec.h2 != nil && x.spec.h2.grpc {
		h := merge(newLatencyHist, func(s *workerStats) *hdrhistogram.Histogram { return s.message })
		if h == nil {
			h = newLatencyHist()
		}
		r.Statistics = append(r.Statistics, statistic(record.LatencyGRPCOK, h))
	}
	r.Statistics = append(r.Statistics,
		statistic(record.RequestToResponse, merge(newHist, func(s *workerStats) *hdrhistogram.Histogram { return s.r2r })),
		statistic(record.QueueToConnect, merge(newHist, func(s *workerStats) *hdrhistogram.Histogram { return s.q2c })),
		statistic(record.SendLateness, merge(newHist, func(s *workerStats) *hdrhistogram.Histogram { return s.lateness })),
	)
	return r
}
