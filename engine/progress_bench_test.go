package engine

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

// BenchmarkProgress is what one Progress of the soak shape costs the
// engine: an execution of one worker at 9 rps with 1 s buckets sends,
// every second, its cumulative counters and latency summary and the one
// bucket that became final, encoded as gRPC encodes it (the codec's
// marshal into a buffer it reuses). The bucket is made final in the
// loop as the worker makes it; BenchmarkStreamBucket has that part alone.
func BenchmarkProgress(b *testing.B) {
	tl := newTimeline(time.Second, uint32(b.N), 1, defaultSampleBudget)
	w := &worker{stats: newWorkerStats(false, tl)}
	x := &execution{base: time.Now(), workers: []*worker{w}, tl: tl}
	var ob openBucket
	var cur cursor
	st := newProgressStream()
	var buf []byte
	b.ReportAllocs()
	b.ResetTimer()
	for k := range uint32(b.N) {
		ob.reset(k)
		ob.counts[cHTTP2xx] = 9
		for i := range 9 {
			ob.latency().record(int64(500_000 + i*10_000))
		}
		tl.contribute(&ob)
		w.stats.counts[cHTTP2xx].Add(9)
		w.stats.counts[cLateSends].Add(1)
		w.stats.lat2xxSum.Add(9 * 550_000)
		w.stats.lat2xxMax.Store(580_000)
		ev, _ := x.progress(&cur, st)
		var err error
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], ev); err != nil {
			b.Fatal(err)
		}
	}
}
