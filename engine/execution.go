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

	ctx    context.Context // cancelled: the pacers stop
	cancel context.CancelFunc

	abortOnce sync.Once
	abort     chan struct{} // closed: in-flight requests are cut short

	done chan struct{} // closed when every worker finished
}

func newExecution(s *spec, parent context.Context) (*execution, error) {
	now := time.Now()
	x := &execution{
		spec:  s,
		base:  now.Add(s.start.Sub(now)),
		abort: make(chan struct{}),
		done:  make(chan struct{}),
	}
	x.ctx, x.cancel = context.WithCancel(parent)
	x.workers = make([]*worker, s.workers)
	for i := range x.workers {
		w, err := newWorker(s, i, x.base, x.ctx, s.stats != nil)
		if err != nil {
			for _, w := range x.workers[:i] {
				w.sleeper.close()
			}
			x.cancel()
			return nil, fmt.Errorf("worker %d: %w", i, err)
		}
		x.workers[i] = w
	}
	return x, nil
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

// counters sums the workers' counters.
func (x *execution) counters() counterSet {
	var total, one counterSet
	for _, w := range x.workers {
		w.stats.snapshot(&one)
		total.add(&one)
	}
	return total
}

// progress is a cumulative snapshot: counters and the latency_2xx summary.
func (x *execution) progress() *enginev1.Progress {
	c := x.counters()
	p := &enginev1.Progress{Counters: c.toMap()}
	elapsed := time.Since(x.base)
	if elapsed < 0 {
		elapsed = 0
	}
	p.Elapsed = durationpb.New(elapsed)
	var sum int64
	for _, w := range x.workers {
		sum += w.stats.lat2xxSum.Load()
		if m := w.stats.lat2xxMax.Load(); m > p.LatencyMaxNs {
			p.LatencyMaxNs = m
		}
	}
	// The count is the 2xx counter, read before the sums: the mean may
	// include a response or two more than the count, never fewer.
	p.LatencyCount = c[cHTTP2xx]
	if p.LatencyCount > 0 {
		p.LatencyMeanNs = float64(sum) / float64(p.LatencyCount)
	}
	return p
}

// result assembles the Result once every worker finished.
func (x *execution) result(backendName string) *enginev1.Result {
	c := x.counters()
	r := &enginev1.Result{
		ExecutionId: x.spec.id,
		BackendName: backendName,
		Counters:    c.toMap(),
		StartedAt:   timestamppb.New(x.spec.start),
		Planned:     x.spec.pacer.Planned() * uint64(len(x.workers)),
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

	// Per-worker histograms are merged, never their percentiles averaged.
	// The workers are done, so the first one's histogram takes the others
	// in place: no copy (result is called once).
	merge := func(pick func(*workerStats) *hdrhistogram.Histogram) *hdrhistogram.Histogram {
		var out *hdrhistogram.Histogram
		for _, w := range x.workers {
			switch h := pick(w.stats); {
			case h == nil:
			case out == nil:
				out = h
			default:
				out.Merge(h)
			}
		}
		return out
	}
	for class := 0; class < numClasses; class++ {
		h := merge(func(s *workerStats) *hdrhistogram.Histogram { return s.latency[class] })
		if h == nil || (class != 1 && h.TotalCount() == 0) {
			continue
		}
		id := record.LatencyPrefix + string(rune('1'+class)) + "xx"
		r.Statistics = append(r.Statistics, statistic(id, h))
	}
	r.Statistics = append(r.Statistics,
		statistic(record.RequestToResponse, merge(func(s *workerStats) *hdrhistogram.Histogram { return s.r2r })),
		statistic(record.QueueToConnect, merge(func(s *workerStats) *hdrhistogram.Histogram { return s.q2c })),
		statistic(record.SendLateness, merge(func(s *workerStats) *hdrhistogram.Histogram { return s.lateness })),
	)
	return r
}
