package engine

import (
	"maps"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// progressRig is one execution of one worker at the soak shape's 9 rps
// with 1 s buckets, streamed as follow streams it: every second its
// cumulative counters and latency summary and the one bucket that became
// final, encoded as gRPC encodes it (the codec's marshal into a buffer it
// reuses).
type progressRig struct {
	x   *execution
	w   *worker
	ob  openBucket
	cur cursor
	m   *progressStream
	buf []byte
	k   uint32
}

func newProgressRig(buckets uint32) *progressRig {
	tl := newTimeline(time.Second, buckets, 1, defaultSampleBudget)
	w := &worker{stats: newWorkerStats(false, tl)}
	return &progressRig{x: &execution{base: time.Now(), workers: []*worker{w}, tl: tl}, w: w, m: newProgressStream()}
}

// second makes the next bucket final, as the worker does, and sends a
// Progress.
func (r *progressRig) second() error {
	r.ob.reset(r.k)
	r.ob.counts[cHTTP2xx] = 9
	for i := range 9 {
		r.ob.latency().record(int64(500_000 + i*10_000))
	}
	r.x.tl.contribute(&r.ob)
	r.k++
	s := r.w.stats
	s.counts[cHTTP2xx].Add(9)
	s.counts[cLateSends].Add(1)
	s.lat2xxSum.Add(9 * 550_000)
	s.lat2xxMax.Store(580_000)
	ev, _ := r.x.progress(&r.cur, r.m)
	var err error
	r.buf, err = (proto.MarshalOptions{}).MarshalAppend(r.buf[:0], ev)
	return err
}

// BenchmarkProgress is what one Progress of the soak shape costs the
// engine, with the bucket it carries made final in the loop (that part
// alone is in BenchmarkStreamBucket).
func BenchmarkProgress(b *testing.B) {
	r := newProgressRig(uint32(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := r.second(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestProgressAllocatesNothing holds a stream's Progress, built and
// encoded, to no allocation once its message exists: the engine sends
// one a second per execution for the live record, and a fresh message
// with its counters in maps cost 22 allocations (1 KB of garbage, which
// the engine's collector at 25 % pays for again).
func TestProgressAllocatesNothing(t *testing.T) {
	const warm, runs = 10, 1000
	r := newProgressRig(warm + runs + 1)
	for range warm {
		if err := r.second(); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	allocs := testing.AllocsPerRun(runs, func() {
		if e := r.second(); e != nil {
			err = e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("%.3f allocations a Progress, want 0", allocs)
	}
	// The last one sent reads back as what the worker counted, the
	// message's reuse leaving nothing of the previous ones.
	var ev enginev1.ExecuteEvent
	if err := proto.Unmarshal(r.buf, &ev); err != nil {
		t.Fatal(err)
	}
	p := ev.GetProgress()
	if err := p.DecodeCounters(); err != nil {
		t.Fatal(err)
	}
	n := uint64(r.k)
	want := map[string]uint64{record.HTTP2xx: 9 * n, record.LateSends: n}
	if !maps.Equal(p.GetCounters(), want) || p.GetLatencyCount() != 9*n {
		t.Errorf("counters %v latency_count %d, want %v", p.GetCounters(), p.GetLatencyCount(), want)
	}
	if bs := p.GetBuckets(); len(bs) != 1 || bs[0].GetIndex() != r.k-1 ||
		!maps.Equal(bs[0].GetCounters(), map[string]uint64{record.HTTP2xx: 9}) || bs[0].GetLatencyCount() != 9 {
		t.Errorf("buckets %v, want bucket %d of 9 2xx", bs, r.k-1)
	}
}
