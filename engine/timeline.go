package engine

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/pacer"
)

// The timeline: every execution counts its requests per bucket of due time
// as well as in total, so that the record says when each outcome happened
// while the execution runs, and sums to the totals exactly.
//
// A request belongs to the bucket of its due time (the pacer's schedule),
// whenever it was sent or answered, so a bucket holds exactly the requests
// due in it. A worker keeps its open buckets under its stats lock: the
// pacer adds what it dispatched once per wake (and at each bucket it
// enters), each outcome subtracts one. A bucket is closed for the worker
// once its pacer has passed it, and final for the worker when it is closed
// and nothing in it is pending; the worker then hands it to the execution's
// timeline, which merges the workers' shares and keeps it, compact, for the
// execution's life. Final buckets and failure samples are streamed with
// Progress, each exactly once.

// Limits and defaults of the timeline.
const (
	defaultBucketWidth  = time.Second
	minBucketWidth      = 100 * time.Millisecond
	maxBucketWidth      = time.Hour
	maxBuckets          = 100_000
	defaultSampleBudget = 10_000
	maxSampleBudget     = 100_000
	// maxPerProgress bounds the buckets and the samples in one Progress,
	// far below gRPC's default message limit of 4 MiB.
	maxPerProgress = 1000
)

// bucketOf is the index of the bucket that holds offset due (ns from the
// start, never negative) for buckets width ns wide.
func bucketOf(due, width int64) uint32 { return uint32(due / width) }

// bucketCount is how many buckets a schedule needs whose last request is
// due at offset last: indexes 0 to bucketOf(last).
func bucketCount(last, width int64) uint64 { return uint64(last/width) + 1 }

// timelineGeometry checks the requested width (0: the default) against the
// schedule of p run by workers workers, and returns the width in use and
// the number of buckets.
func timelineGeometry(width time.Duration, p pacer.Pacer, workers int) (time.Duration, uint32, error) {
	last := int64(p.Last())
	if width == 0 {
		// 1 s, or the least whole number of seconds that fits.
		width = defaultBucketWidth
		if n := bucketCount(last, int64(width)); n > maxBuckets {
			width = time.Duration(last/maxBuckets/int64(time.Second)+1) * time.Second
		}
	} else {
		switch {
		case width%time.Millisecond != 0:
			return 0, 0, fieldErr("bucket_width", "%v is not a whole number of milliseconds", width)
		case width < minBucketWidth || width > maxBucketWidth:
			return 0, 0, fieldErr("bucket_width", "%v is not between %v and %v", width, minBucketWidth, maxBucketWidth)
		}
		if n := bucketCount(last, int64(width)); n > maxBuckets {
			return 0, 0, fieldErr("bucket_width", "%v makes %d buckets of a %v schedule, more than %d", width, n, p.Duration(), maxBuckets)
		}
	}
	// Per-bucket counts are 32 bits wide: a worker has at most
	// rate x width + 1 requests due in a bucket.
	if perBucket := float64(workers) * (float64(p.Rate())*width.Seconds() + 1); perBucket >= 1<<32 {
		return 0, 0, fieldErr("bucket_width", "%v at %d/s on %d workers holds %.0f requests a bucket, more than 2^32", width, p.Rate(), workers, perBucket)
	}
	return width, uint32(bucketCount(last, int64(width))), nil
}

// noDetail marks a failSample without a reason or phase counter.
const noDetail = 0xff

// failSample is one failed request as the timeline keeps it.
type failSample struct {
	due, at int64          // offsets from the start, ns
	age     int64          // of its connection at the outcome, ns
	carried uint64         // requests the connection carried before
	remote  netip.AddrPort // the connection's peer; invalid without one
	status  uint16         // of a 4xx or 5xx response
	class   uint8          // counterID
	reason  uint8          // counterID or noDetail
	phase   uint8          // counterID or noDetail
}

// openBucket is one worker's part of a bucket while requests due in it may
// be outstanding, or the execution's merge of the workers' parts.
type openBucket struct {
	idx    uint32
	closed bool // the pacer passed it: every request due in it was dispatched or left unsent
	// pending is requests dispatched less outcomes counted. It may dip
	// below zero for a moment, when an outcome is counted before the
	// pacer added its dispatch (it adds once per wake); it is exact once
	// the bucket is closed.
	pending int64
	parts   int // workers merged (the execution's merge only)
	counts  [numCounters]uint32
	unsent  uint32
	dropped uint32
	lat     *bucketLat // nil until a 2xx
}

func (b *openBucket) reset(idx uint32) {
	lat := b.lat
	if lat != nil {
		lat.reset()
	}
	*b = openBucket{idx: idx, lat: lat}
}

func (b *openBucket) latency() *bucketLat {
	if b.lat == nil {
		b.lat = new(bucketLat)
	}
	return b.lat
}

// pacerMark is what the pacer counted of one bucket and not yet added to
// it: it adds once per wake, not once per request. The pacer's own.
type pacerMark struct {
	b       uint32
	n, late uint32
}

// workerTimeline holds a worker's open buckets, guarded by its
// workerStats.mu. Buckets are found by index in a ring spanning
// [lo, hi), which grows when more are open at once than it holds.
type workerTimeline struct {
	x        *timeline
	width    int64
	ring     []*openBucket
	lo, hi   uint32
	closedTo uint32 // buckets below are closed (written by the pacer)
	free     []*openBucket
	scratch  openBucket // a closed bucket nobody dispatched into
}

func newWorkerTimeline(x *timeline) workerTimeline {
	return workerTimeline{x: x, width: x.width, ring: make([]*openBucket, 8)}
}

// find returns open bucket k, or nil.
func (t *workerTimeline) find(k uint32) *openBucket {
	if k < t.lo || k >= t.hi {
		return nil
	}
	return t.ring[k&uint32(len(t.ring)-1)]
}

// get returns open bucket k, made if need be. A bucket that is final for
// this worker never gets another outcome: every request due in it had
// one.
func (t *workerTimeline) get(k uint32) *openBucket {
	if b := t.find(k); b != nil {
		return b
	}
	if k < t.closedTo {
		panic(fmt.Sprintf("engine timeline: an outcome for bucket %d, already final", k))
	}
	lo, hi := k, k+1
	if t.lo < t.hi {
		lo, hi = min(t.lo, k), max(t.hi, k+1)
	}
	if int(hi-lo) > len(t.ring) {
		t.grow(int(hi - lo))
	}
	t.lo, t.hi = lo, hi
	var b *openBucket
	if n := len(t.free); n > 0 {
		b, t.free = t.free[n-1], t.free[:n-1]
	} else {
		b = new(openBucket)
	}
	b.reset(k)
	t.ring[k&uint32(len(t.ring)-1)] = b
	return b
}

// grow makes the ring hold at least span buckets.
func (t *workerTimeline) grow(span int) {
	n := len(t.ring)
	for n < span {
		n *= 2
	}
	ring := make([]*openBucket, n)
	for _, b := range t.ring {
		if b != nil {
			ring[b.idx&uint32(n-1)] = b
		}
	}
	t.ring = ring
}

// answer counts a response of class id to the request due at due in its
// bucket, a 2xx's latency too, and returns the bucket for done.
func (t *workerTimeline) answer(due int64, id counterID, latency int64) *openBucket {
	b := t.get(bucketOf(due, t.width))
	b.counts[id]++
	if id == cHTTP2xx {
		b.latency().record(latency)
	}
	return b
}

// fail counts failure f in its bucket and returns the bucket for done.
func (t *workerTimeline) fail(f *failSample) *openBucket {
	b := t.get(bucketOf(f.due, t.width))
	b.counts[f.class]++
	if f.reason != noDetail {
		b.counts[f.reason]++
	}
	if f.phase != noDetail {
		b.counts[f.phase]++
	}
	return b
}

// done ends an outcome counted in b: one request less pending.
func (t *workerTimeline) done(b *openBucket) {
	b.pending--
	t.settle(b)
}

// settle hands b to the execution once it is closed and nothing in it
// is pending.
func (t *workerTimeline) settle(b *openBucket) {
	if !b.closed || b.pending != 0 {
		return
	}
	t.x.contribute(b)
	if b == &t.scratch {
		return
	}
	t.ring[b.idx&uint32(len(t.ring)-1)] = nil
	for t.lo < t.hi && t.ring[t.lo&uint32(len(t.ring)-1)] == nil {
		t.lo++
	}
	t.free = append(t.free, b)
}

// addMark adds what the pacer counted of its bucket.
func (t *workerTimeline) addMark(m *pacerMark) {
	if m.n == 0 && m.late == 0 {
		return
	}
	b := t.get(m.b)
	b.pending += int64(m.n)
	b.counts[cLateSends] += m.late
	m.n, m.late = 0, 0
}

// closeBelow closes the buckets below to, which the pacer has passed.
// unsent, when not nil, counts the requests due in a bucket that the
// pacer left unsent.
func (t *workerTimeline) closeBelow(to uint32, unsent func(k uint32) uint32) {
	for k := t.closedTo; k < to; k++ {
		b := t.find(k)
		if b == nil {
			// Nothing was dispatched into it.
			b = &t.scratch
			b.reset(k)
		}
		b.closed = true
		if unsent != nil {
			b.unsent += unsent(k)
		}
		t.settle(b)
	}
	t.closedTo = max(t.closedTo, to)
}

// timeline is an execution's: its final buckets, kept compact for the
// execution's life, and its failure samples.
type timeline struct {
	width   int64 // ns
	n       uint32
	workers int
	budget  uint64
	// admitted counts the failures offered a sample: the first budget
	// get one.
	admitted atomic.Uint64

	mu      sync.Mutex
	slots   []slot
	extras  []uint64 // packed (id, count) of the slots' other counters
	xrefs   []xref   // where each slot with extras has them, by index
	order   []uint32 // final buckets in the order they became final
	partial map[uint32]*openBucket
	pool    []*openBucket
	samples []failSample
}

// cursor is how far one stream of an execution has sent its timeline:
// order[:b] and samples[:s]. Each stream (Execute's, and each Attach)
// owns its own, so a stream that breaks takes nothing from the next.
type cursor struct{ b, s int }

// slot is a final bucket in 16 bytes (and 4 more in order), the
// timeline's cost per bucket for the execution's life (8 h 30 min at 1 s is 30,600 of them): its 2xx
// count and latency summary, and how many other non-zero counters it has.
// Those are a run of extras, found through xrefs, so a bucket with 2xx
// only (nearly all of a clean soak) pays for no offset. The exact latency
// max is 48 bits wide (78 hours; a latency beyond histMax is kept as
// histMax).
type slot struct {
	ok       uint32 // benchmark.http_2xx, the latency count
	maxLo    uint32 // latency max, ns: maxLo | maxHi<<32
	maxHi    uint16
	p50, p99 uint16 // latency steps (latCode)
	nx       uint8  // extras of the bucket
	flags    uint8  // slotFinal
}

// xref finds the extras of bucket idx: extras[off : off+nx].
type xref struct{ idx, off uint32 }

// Flags of a slot.
const (
	slotFinal = 1 << iota
)

func (s *slot) max() int64 { return int64(s.maxLo) | int64(s.maxHi)<<32 }

func (s *slot) setMax(v int64) {
	v = min(max(v, 0), histMax)
	s.maxLo, s.maxHi = uint32(v), uint16(v>>32)
}

// Extras ids beyond the counters.
const (
	idUnsent = uint64(numCounters) + iota
	idDropped
)

func packExtra(id, n uint64) uint64 { return id<<56 | n }

func unpackExtra(e uint64) (id, n uint64) { return e >> 56, e & (1<<56 - 1) }

func newTimeline(width time.Duration, n uint32, workers, budget int) *timeline {
	return &timeline{
		width:   int64(width),
		n:       n,
		workers: workers,
		budget:  uint64(budget),
		slots:   make([]slot, n),
		order:   make([]uint32, 0, n),
	}
}

// admit says whether a failure gets a sample: the budget's first do.
func (t *timeline) admit() bool { return t.admitted.Add(1) <= t.budget }

// addSample keeps an admitted failure's sample.
func (t *timeline) addSample(f failSample) {
	t.mu.Lock()
	t.samples = append(t.samples, f)
	t.mu.Unlock()
}

// contribute takes one worker's final part of a bucket; the bucket is
// final when every worker's part is in. b stays the worker's.
func (t *timeline) contribute(b *openBucket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.workers == 1 {
		t.finalize(b)
		return
	}
	m := t.partial[b.idx]
	if m == nil {
		if n := len(t.pool); n > 0 {
			m, t.pool = t.pool[n-1], t.pool[:n-1]
		} else {
			m = new(openBucket)
		}
		m.reset(b.idx)
		if t.partial == nil {
			t.partial = make(map[uint32]*openBucket)
		}
		t.partial[b.idx] = m
	}
	for i, v := range b.counts {
		m.counts[i] += v
	}
	m.unsent += b.unsent
	m.dropped += b.dropped
	if b.lat != nil && b.lat.n > 0 {
		m.latency().merge(b.lat)
	}
	m.parts++
	if m.parts == t.workers {
		t.finalize(m)
		delete(t.partial, b.idx)
		t.pool = append(t.pool, m)
	}
}

// finalize keeps b as its final slot. t.mu is held.
func (t *timeline) finalize(b *openBucket) {
	s := &t.slots[b.idx]
	if s.flags&slotFinal != 0 {
		panic(fmt.Sprintf("engine timeline: bucket %d final twice", b.idx))
	}
	*s = slot{ok: b.counts[cHTTP2xx], flags: slotFinal}
	xoff := uint32(len(t.extras))
	if b.lat != nil && b.lat.n > 0 {
		s.setMax(b.lat.max)
		s.p50, s.p99 = uint16(b.lat.quantile(50)), uint16(b.lat.quantile(99))
	}
	for id, v := range b.counts {
		if v > 0 && counterID(id) != cHTTP2xx {
			t.extras = append(t.extras, packExtra(uint64(id), uint64(v)))
		}
	}
	if b.unsent > 0 {
		t.extras = append(t.extras, packExtra(idUnsent, uint64(b.unsent)))
	}
	if b.dropped > 0 {
		t.extras = append(t.extras, packExtra(idDropped, uint64(b.dropped)))
	}
	s.nx = uint8(uint32(len(t.extras)) - xoff)
	if s.nx > 0 {
		// Buckets become final nearly in index order: an append, or an
		// insert near the end.
		i := len(t.xrefs)
		for i > 0 && t.xrefs[i-1].idx > b.idx {
			i--
		}
		t.xrefs = slices.Insert(t.xrefs, i, xref{idx: b.idx, off: xoff})
	}
	t.order = append(t.order, b.idx)
}

// take adds to m's Progress up to limit of the final buckets and of the
// samples past cur, moves cur past them, and says whether more are
// waiting.
func (t *timeline) take(cur *cursor, limit int, m *progressStream) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for n := 0; cur.b < len(t.order) && n < limit; cur.b, n = cur.b+1, n+1 {
		t.fillBucket(m.bucket(), t.order[cur.b], m)
	}
	for n := 0; cur.s < len(t.samples) && n < limit; cur.s, n = cur.s+1, n+1 {
		m.p.FailureSamples = append(m.p.FailureSamples, t.sampleProto(&t.samples[cur.s]))
	}
	return cur.b < len(t.order) || cur.s < len(t.samples)
}

// waiting says whether final buckets or samples past cur wait to be
// streamed.
func (t *timeline) waiting(cur *cursor) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return cur.b < len(t.order) || cur.s < len(t.samples)
}

// has says whether cur is within what the timeline holds: a stream may
// start there.
func (t *timeline) has(cur cursor) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return cur.b <= len(t.order) && cur.s <= len(t.samples)
}

// keep drops what only a running execution needs (the merges in progress
// and their pool) and returns an estimate of the bytes the kept timeline
// holds: what an ended execution costs the engine while it is retained.
func (t *timeline) keep() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial, t.pool = nil, nil
	return int64(cap(t.slots))*int64(unsafe.Sizeof(slot{})) +
		int64(cap(t.extras))*8 + int64(cap(t.xrefs))*int64(unsafe.Sizeof(xref{})) + int64(cap(t.order))*4 +
		int64(cap(t.samples))*int64(unsafe.Sizeof(failSample{}))
}

// finals returns, in one Progress with coded counters (not for the wire:
// it may hold more than maxPerProgress), every final bucket in index
// order, streamed or not, and every sample: what a driver that lost its
// stream would fetch again.
func (t *timeline) finals() *enginev1.Progress {
	m := newProgressStream()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.slots {
		if t.slots[k].flags&slotFinal != 0 {
			t.fillBucket(m.bucket(), uint32(k), m)
		}
	}
	for i := range t.samples {
		m.p.FailureSamples = append(m.p.FailureSamples, t.sampleProto(&t.samples[i]))
	}
	return &m.p
}

// fillBucket writes final bucket k into b, an empty Bucket of m, its
// counters coded against m's name table. t.mu is held.
func (t *timeline) fillBucket(b *enginev1.Bucket, k uint32, m *progressStream) {
	s := &t.slots[k]
	b.Index = k
	if s.ok > 0 {
		b.CounterIds = append(b.CounterIds, m.code(cHTTP2xx))
		b.CounterValues = append(b.CounterValues, uint64(s.ok))
		b.LatencyCount = uint64(s.ok)
		b.LatencyMaxNs = s.max()
		b.LatencyP50Ns = latValue(int(s.p50), s.max())
		b.LatencyP99Ns = latValue(int(s.p99), s.max())
	}
	for _, e := range t.extrasOf(k, s.nx) {
		id, n := unpackExtra(e)
		switch id {
		case idUnsent:
			b.Unsent = n
		case idDropped:
			b.SamplesDropped = n
		default:
			b.CounterIds = append(b.CounterIds, m.code(counterID(id)))
			b.CounterValues = append(b.CounterValues, n)
		}
	}
}

// extrasOf returns the nx extras of final bucket k. t.mu is held.
func (t *timeline) extrasOf(k uint32, nx uint8) []uint64 {
	if nx == 0 {
		return nil
	}
	i, ok := slices.BinarySearchFunc(t.xrefs, k, func(x xref, k uint32) int { return cmp.Compare(x.idx, k) })
	if !ok {
		panic(fmt.Sprintf("engine timeline: bucket %d has %d extras and no xref", k, nx))
	}
	off := t.xrefs[i].off
	return t.extras[off : off+uint32(nx)]
}

// sampleProto is f on the wire.
func (t *timeline) sampleProto(f *failSample) *enginev1.FailureSample {
	s := &enginev1.FailureSample{
		Bucket:       bucketOf(f.due, t.width),
		DueNs:        f.due,
		OutcomeNs:    f.at,
		LatencyNs:    f.at - f.due,
		Class:        counterNames[f.class],
		Status:       uint32(f.status),
		ConnAgeNs:    f.age,
		ConnRequests: f.carried,
	}
	if f.reason != noDetail {
		s.Reason = counterNames[f.reason]
	}
	if f.phase != noDetail {
		s.Phase = counterNames[f.phase]
	}
	if f.remote.IsValid() {
		s.Remote = f.remote.String()
	}
	return s
}

// finalCount is how many buckets are final.
func (t *timeline) finalCount() uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return uint32(len(t.order))
}
