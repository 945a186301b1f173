package engine

import (
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sortie-soak/sortie/engine/pacer"
)

func TestBucketOf(t *testing.T) {
	const ms = int64(time.Millisecond)
	tests := []struct {
		due, width int64
		want       uint32
	}{
		{0, 1000 * ms, 0},
		{999*ms + 999_999, 1000 * ms, 0},
		{1000 * ms, 1000 * ms, 1},
		{1000*ms + 1, 1000 * ms, 1},
		{59_888_888_888, 1000 * ms, 59},
		{250 * ms, 100 * ms, 2},
		{300 * ms, 100 * ms, 3},
		// 8 h 30 min at 1 s: the last of 30,600 buckets.
		{int64(8*time.Hour+30*time.Minute) - 1, 1000 * ms, 30_599},
		{int64(100 * time.Hour), int64(time.Hour), 100},
	}
	for _, tt := range tests {
		if got := bucketOf(tt.due, tt.width); got != tt.want {
			t.Errorf("bucketOf(%d, %d) = %d, want %d", tt.due, tt.width, got, tt.want)
		}
	}
}

func TestTimelineGeometry(t *testing.T) {
	mustPacer := func(rate uint32, d time.Duration) pacer.Pacer {
		t.Helper()
		p, err := pacer.New(rate, d, 0)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		width   time.Duration
		p       pacer.Pacer
		workers int
		wantW   time.Duration
		wantN   uint32
		err     string
	}{
		// 9/s for 60 s: the last request is due at 59.888 s.
		{"soak share, default", 0, mustPacer(9, time.Minute), 1, time.Second, 60, ""},
		{"soak, 8 h 30 min", 0, mustPacer(9, 8*time.Hour+30*time.Minute), 1, time.Second, 30_600, ""},
		{"one request", 0, mustPacer(1, time.Second), 1, time.Second, 1, ""},
		{"100 ms", 100 * time.Millisecond, mustPacer(10, 2*time.Second), 1, 100 * time.Millisecond, 20, ""},
		// The last request of 1/s for 48 h is due at 47 h 59 min 59 s:
		// 1 s makes 172,800 buckets, 2 s makes 86,400.
		{"default widens past 100,000", 0, mustPacer(1, 48*time.Hour), 1, 2 * time.Second, 86_400, ""},
		{"a width wider than the run", time.Hour, mustPacer(10, time.Second), 1, time.Hour, 1, ""},
		{"too narrow", 99 * time.Millisecond, mustPacer(10, time.Second), 1, 0, 0, "not between 100ms and 1h0m0s"},
		{"not whole ms", 100*time.Millisecond + 1, mustPacer(10, time.Second), 1, 0, 0, "not a whole number of milliseconds"},
		{"too many", 100 * time.Millisecond, mustPacer(1, 3*time.Hour), 1, 0, 0, "107991 buckets"},
		{"2^32 a bucket", time.Second, mustPacer(math.MaxUint32, time.Second), 1, 0, 0, "more than 2^32"},
		{"just under 2^32", time.Second, mustPacer(1<<30, time.Second), 3, time.Second, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, n, err := timelineGeometry(tt.width, tt.p, tt.workers)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || w != tt.wantW || n != tt.wantN {
				t.Fatalf("= %v, %d, %v; want %v, %d", w, n, err, tt.wantW, tt.wantN)
			}
			if got := bucketOf(int64(tt.p.Last()), int64(w)); got != n-1 {
				t.Errorf("the last request is in bucket %d of %d", got, n)
			}
		})
	}
}

// The requests due in a bucket, counted as the pacer leaves them unsent
// (pacer.Before at the bucket's edges), are those whose due time's
// bucket it is, request by request, ramp included.
func TestRequestsPerBucket(t *testing.T) {
	for _, c := range []struct {
		rate    uint32
		d, ramp time.Duration
		width   time.Duration
	}{
		{9, 60 * time.Second, 0, time.Second},
		{7, 3 * time.Second, 0, 100 * time.Millisecond},
		{20, 10 * time.Second, 4 * time.Second, time.Second},
		{1, 5 * time.Second, 0, 300 * time.Millisecond},
		{1000, 2 * time.Second, time.Second, 250 * time.Millisecond},
	} {
		p, err := pacer.New(c.rate, c.d, c.ramp)
		if err != nil {
			t.Fatal(err)
		}
		w := int64(c.width)
		n := bucketCount(int64(p.Last()), w)
		want := make([]uint64, n)
		for i := range p.Planned() {
			want[bucketOf(int64(p.Offset(i)), w)]++
		}
		got := make([]uint64, n)
		var sum uint64
		for k := range n {
			got[k] = p.Before(time.Duration(int64(k+1)*w)) - p.Before(time.Duration(int64(k)*w))
			sum += got[k]
		}
		if !slices.Equal(got, want) || sum != p.Planned() {
			t.Errorf("rate %d ramp %v width %v: per bucket %v, want %v (sum %d of %d)", c.rate, c.ramp, c.width, got, want, sum, p.Planned())
		}
	}
}

func TestLatCodes(t *testing.T) {
	// Every value is within its step, steps are in order, and a step's
	// width is at most 1/64 of its lowest value.
	prevHi := int64(-1)
	for code := range latCodes {
		hi := latUpper(code)
		lo := prevHi + 1
		if hi < lo {
			t.Fatalf("step %d ends at %d before it begins at %d", code, hi, lo)
		}
		if latCode(lo) != code || latCode(hi) != code {
			t.Fatalf("step %d = [%d, %d] but latCode gives %d and %d", code, lo, hi, latCode(lo), latCode(hi))
		}
		if lo >= latSub && (hi-lo+1)*latSub > lo {
			t.Fatalf("step %d = [%d, %d] is wider than 1/64 of %d", code, lo, hi, lo)
		}
		prevHi = hi
	}
	if prevHi < histMax {
		t.Fatalf("the steps end at %d, below histMax %d", prevHi, histMax)
	}
}

// exactPercentile is the value of rank ceil(pct/100 x n) of vs.
func exactPercentile(vs []int64, pct int) int64 {
	s := slices.Sorted(slices.Values(vs))
	rank := max((len(s)*pct+99)/100, 1)
	return s[rank-1]
}

// The bucket's summary against an exact computation: never below, at most
// 1/64 above, never above the maximum; merged halves summarise as the
// whole.
func TestBucketLatAgainstExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + rng.IntN(2000)
		if round%4 == 0 {
			n = 1 + rng.IntN(10) // the soak's few requests a bucket
		}
		var whole, a, b bucketLat
		vs := make([]int64, n)
		for i := range vs {
			// Log-uniform from 1 µs to 10 s, some tiny, some past histMax.
			v := int64(math.Exp(rng.Float64()*math.Log(1e10)) * 1e3)
			switch rng.IntN(50) {
			case 0:
				v = rng.Int64N(latSub)
			case 1:
				v = histMax + 1
			}
			whole.record(v)
			if i%2 == 0 {
				a.record(v)
			} else {
				b.record(v)
			}
			vs[i] = min(v, histMax)
		}
		a.merge(&b)
		if a.n != whole.n || a.max != whole.max || a.counts != whole.counts {
			t.Fatalf("round %d: merged halves differ from the whole", round)
		}
		if whole.max != slices.Max(vs) {
			t.Fatalf("round %d: max %d, want %d", round, whole.max, slices.Max(vs))
		}
		for _, pct := range []int{50, 99} {
			exact := exactPercentile(vs, pct)
			got := latValue(whole.quantile(uint64(pct)), whole.max)
			if got < exact || float64(got) > float64(exact)*(1+1.0/64) || got > whole.max {
				t.Fatalf("round %d, %d values: p%d = %d, exact %d (max %d)", round, n, pct, got, exact, whole.max)
			}
		}
	}
	var empty bucketLat
	if got := latValue(empty.quantile(50), empty.max); got != 0 {
		t.Errorf("an empty bucket's p50 = %d", got)
	}
}

func TestBucketLatReset(t *testing.T) {
	var h bucketLat
	for _, v := range []int64{5e5, 7e5, 3e9} {
		h.record(v)
	}
	h.reset()
	if h != (bucketLat{}) {
		t.Error("reset left counts behind")
	}
	h.record(1000)
	if got := latValue(h.quantile(99), h.max); got != 1000 {
		t.Errorf("after reset p99 = %d, want 1000", got)
	}
}

func TestExtrasPacking(t *testing.T) {
	for _, c := range []struct{ id, n uint64 }{{0, 0}, {uint64(cLateSends), 1}, {idDropped, 1<<32 - 1}, {idUnsent, 1<<56 - 1}} {
		if id, n := unpackExtra(packExtra(c.id, c.n)); id != c.id || n != c.n {
			t.Errorf("pack(%d, %d) unpacks to (%d, %d)", c.id, c.n, id, n)
		}
	}
}

// TestSlotMax: a slot keeps a bucket's latency max exactly in 48 bits,
// up to histMax, as the result's histograms clamp it.
func TestSlotMax(t *testing.T) {
	for _, c := range []struct{ in, want int64 }{
		{0, 0}, {1, 1}, {1<<32 - 1, 1<<32 - 1}, {1 << 32, 1 << 32}, {5_123_456_789, 5_123_456_789},
		{histMax, histMax}, {histMax + 1, histMax}, {math.MaxInt64, histMax}, {-5, 0},
	} {
		var s slot
		s.setMax(c.in)
		if got := s.max(); got != c.want {
			t.Errorf("setMax(%d): max() = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestTakeOutOfOrder: buckets that become final out of index order (one
// held by a slow request) are each streamed exactly once, in the order
// they became final, with their own other counters (found through their
// xrefs), and waiting says whether any is left past the cursor.
func TestTakeOutOfOrder(t *testing.T) {
	tl := newTimeline(time.Second, 6, 1, defaultSampleBudget)
	final := func(ks ...uint32) {
		for _, k := range ks {
			var b openBucket
			b.reset(k)
			b.counts[cHTTP2xx] = k + 1
			if k%2 == 1 {
				b.counts[cLateSends] = 10 + k
			}
			tl.contribute(&b)
		}
	}
	var cur cursor
	take := func(limit int) []uint32 {
		bs, _, _ := takeDecoded(t, tl, &cur, limit)
		var got []uint32
		for _, b := range bs {
			got = append(got, b.GetIndex())
			k := b.GetIndex()
			want := map[string]uint64{counterNames[cHTTP2xx]: uint64(k) + 1}
			if k%2 == 1 {
				want[counterNames[cLateSends]] = 10 + uint64(k)
			}
			if !maps.Equal(b.GetCounters(), want) {
				t.Errorf("bucket %d counters %v, want %v", k, b.GetCounters(), want)
			}
		}
		return got
	}
	final(0, 2, 3)
	if got := take(maxPerProgress); !slices.Equal(got, []uint32{0, 2, 3}) {
		t.Fatalf("first take %v, want [0 2 3]", got)
	}
	if tl.waiting(&cur) {
		t.Fatal("waiting after every final bucket was taken")
	}
	final(5, 1)
	if got := take(1); !slices.Equal(got, []uint32{5}) {
		t.Fatalf("take(1) %v, want [5]", got)
	}
	if !tl.waiting(&cur) {
		t.Fatal("bucket 1 final and not taken, but not waiting")
	}
	final(4)
	if got := take(maxPerProgress); !slices.Equal(got, []uint32{1, 4}) {
		t.Fatalf("last take %v, want [1 4]", got)
	}
	if got := take(maxPerProgress); len(got) != 0 || tl.waiting(&cur) || tl.finalCount() != 6 {
		t.Fatalf("after all: take %v, waiting %v, final %d", got, tl.waiting(&cur), tl.finalCount())
	}
}

// BenchmarkTimelinePerRequest is the timeline's own work for one request
// answered 2xx, at 50,000 rps in buckets of 1 s: the pacer's mark (a
// bucket index per request; once a wake, 10 requests here, adding its
// count and closing what it passed) and the outcome's count, latency and
// settle. The engine's cost per request is about 10 µs at that rate
// (bench/README.md); ns/op here is the timeline's share of it. What
// Progress streams is not in it: a few buckets a second.
func BenchmarkTimelinePerRequest(b *testing.B) {
	const width = int64(time.Second)
	const every = int64(20 * time.Microsecond) // 50,000 rps
	n := uint32(uint64(b.N)*uint64(every)/uint64(width) + 1)
	tl := newTimeline(time.Second, n, 1, defaultSampleBudget)
	w := newWorkerTimeline(tl)
	var pm pacerMark
	b.ReportAllocs()
	b.ResetTimer()
	for i := range int64(b.N) {
		due := i * every
		if k := bucketOf(due, width); k != pm.b {
			w.addMark(&pm)
			pm.b = k
		}
		pm.n++
		ob := w.answer(due, cHTTP2xx, 200_000+i%1000)
		w.done(ob)
		if i%10 == 9 {
			w.addMark(&pm)
			w.closeBelow(bucketOf(due+every, width), nil)
		}
	}
	w.addMark(&pm)
	w.closeBelow(n, nil)
	b.StopTimer()
	if got := tl.finalCount(); got != n {
		b.Fatalf("%d of %d buckets final", got, n)
	}
}

// BenchmarkTimelineBytesPerBucket measures what the engine keeps per
// final bucket over an 8 h 30 min execution at the soak's 9 rps in 1 s
// buckets (30,600 buckets): the heap the timeline holds once every bucket
// is final, divided by the buckets, as B/bucket. "clean" buckets hold
// 2xx only; "late" add one other counter to every fourth (late sends, as
// a loaded machine gives); "resets" give every bucket three (a reset's
// class, phase and reason).
func BenchmarkTimelineBytesPerBucket(b *testing.B) {
	const n = 30_600
	for _, c := range []struct {
		name  string
		extra func(k uint32, ob *openBucket)
	}{
		{"clean", func(uint32, *openBucket) {}},
		{"late", func(k uint32, ob *openBucket) {
			if k%4 == 0 {
				ob.counts[cLateSends] = 1
			}
		}},
		{"resets", func(_ uint32, ob *openBucket) {
			ob.counts[cResets], ob.counts[cResetsBeforeHeaders], ob.counts[cResetConnTermination] = 1, 1, 1
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var perBucket float64
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				tl := newTimeline(time.Second, n, 1, defaultSampleBudget)
				var ob openBucket
				for k := range uint32(n) {
					ob.reset(k)
					ob.counts[cHTTP2xx] = 9
					lat := ob.latency()
					for i := range 9 {
						lat.record(int64(500_000 + i*10_000))
					}
					c.extra(k, &ob)
					tl.contribute(&ob)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perBucket = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(tl)
			}
			b.ReportMetric(perBucket, "B/bucket")
			b.ReportMetric(perBucket*n*8/(1<<20), "MiB/8-executions")
		})
	}
}

// BenchmarkStreamBucket is what streaming costs per bucket: finalizing
// it, taking it for a Progress and encoding it as gRPC does. At the soak
// shape (8 executions, 1 s buckets) that is 8 a second.
func BenchmarkStreamBucket(b *testing.B) {
	tl := newTimeline(time.Second, uint32(b.N), 1, defaultSampleBudget)
	var ob openBucket
	var cur cursor
	m := newProgressStream()
	b.ReportAllocs()
	b.ResetTimer()
	for k := range uint32(b.N) {
		ob.reset(k)
		ob.counts[cHTTP2xx] = 9
		for i := range 9 {
			ob.latency().record(int64(500_000 + i*10_000))
		}
		tl.contribute(&ob)
		m.reset()
		tl.take(&cur, maxPerProgress, m)
		if _, err := proto.Marshal(&m.p); err != nil {
			b.Fatal(err)
		}
	}
}
