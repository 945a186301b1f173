package engine

import (
	"testing"
	"time"
)

// recordPath is one worker's record of its requests as the engine keeps
// it: counters, histograms and the timeline, with the pacer's marks,
// fed as the worker feeds it.
type recordPath struct {
	s     *workerStats
	pm    pacerMark
	every int64 // ns between due times
	wake  int64 // requests per pacer wake
	n     uint32
}

// newRecordPath is the record of a worker sending every ns for requests
// requests, in buckets of 1 s, waking for wake requests at a time.
func newRecordPath(every time.Duration, requests, wake int64) *recordPath {
	width := int64(time.Second)
	n := uint32(requests*int64(every)/width + 1)
	tl := newTimeline(time.Second, n, 1, defaultSampleBudget)
	return &recordPath{s: newWorkerStats(false, tl), every: int64(every), wake: wake, n: n}
}

// request records request i answered 200 after 300 µs and more: the
// pacer's mark, the outcome (response), and at the end of a wake what
// the pacer counted and the buckets it passed.
func (r *recordPath) request(i int64) {
	s := r.s
	due := i * r.every
	if k := bucketOf(due, s.tl.width); k != r.pm.b {
		s.mu.Lock()
		s.tl.addMark(&r.pm)
		s.mu.Unlock()
		r.pm.b = k
	}
	r.pm.n++
	s.response(200, due, due+300_000+i%1000, due+1000, nil)
	if i%r.wake == r.wake-1 {
		s.mu.Lock()
		s.tl.addMark(&r.pm)
		s.tl.closeBelow(bucketOf(due+r.every, s.tl.width), nil)
		s.mu.Unlock()
	}
}

// finish closes every bucket, as the pacer's end does.
func (r *recordPath) finish() {
	s := r.s
	s.mu.Lock()
	s.tl.addMark(&r.pm)
	s.tl.closeBelow(r.n, nil)
	s.mu.Unlock()
}

// BenchmarkRecordResponse is the engine's whole record of one request
// answered 2xx (workerStats.response: the counters, the latency summary
// Progress reads, three HDR histograms, and the timeline's bucket count,
// latency step and settle) with the pacer's mark and its share of the
// pacer's per-wake update, which at the soak shape also makes a bucket
// final (its latency summary and slot) every 9 requests. At 50,000 rps
// the pacer wakes for some 10 requests at a time; at the soak's 9 rps,
// for each.
func BenchmarkRecordResponse(b *testing.B) {
	for _, c := range []struct {
		name  string
		every time.Duration
		wake  int64
	}{
		{"50000rps", 20 * time.Microsecond, 10},
		{"soak-9rps", time.Second / 9, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := newRecordPath(c.every, int64(b.N), c.wake)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range int64(b.N) {
				r.request(i)
			}
			r.finish()
			b.StopTimer()
			if got := r.s.tl.x.finalCount(); got != r.n {
				b.Fatalf("%d of %d buckets final", got, r.n)
			}
		})
	}
}

// TestRecordResponseAllocatesNothing holds the per-request record path
// to no allocation once its open buckets exist: at 50,000 rps and at the
// soak's rate, where every ninth request also makes a bucket final.
func TestRecordResponseAllocatesNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		every time.Duration
		wake  int64
	}{
		{"50000rps", 20 * time.Microsecond, 10},
		{"soak-9rps", time.Second / 9, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			const warm, runs = 200_000, 100_000
			r := newRecordPath(c.every, warm+runs+1, c.wake)
			i := int64(0)
			for ; i < warm; i++ {
				r.request(i)
			}
			allocs := testing.AllocsPerRun(runs, func() {
				r.request(i)
				i++
			})
			if allocs != 0 {
				t.Errorf("%.3f allocations a request, want 0", allocs)
			}
		})
	}
}
