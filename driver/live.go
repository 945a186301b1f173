package driver

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/pacer"
	"github.com/sortie-soak/sortie/record"
)

// liveRecordPath is the live record a run writes: --live-record as given,
// or, without it, the results stream's name with its extension replaced
// by .live.jsonl; "-" and "off" write none. Empty means none.
func liveRecordPath(flagValue, stream string) string {
	switch flagValue {
	case "-", "off":
		return ""
	case "":
		if stream == "" {
			return ""
		}
		return strings.TrimSuffix(stream, filepath.Ext(stream)) + ".live.jsonl"
	}
	return flagValue
}

// liveRecord appends the engines' buckets and samples to the live record
// as they arrive. The streams' goroutines only queue their lines; one
// flusher writes whatever is queued with one write and one sync, then
// waits minGap before the next, so a run of many executions syncs at most
// a few times a second however often its engines report, each line is on
// disk within minGap plus a sync of arriving, and a slow disk never holds
// up a stream. A write that fails is logged once and the run goes on: the
// report and the results stream are still written at the end.
type liveRecord struct {
	w      *record.LiveWriter
	log    *slog.Logger
	minGap time.Duration

	mu     sync.Mutex
	queue  []record.LiveEntry
	closed bool
	wake   chan struct{} // one token: the queue has lines
	// closing ends the flusher's wait between batches; done is closed
	// when it has written its last.
	closing, done chan struct{}
	once          sync.Once
}

// liveMinGap is the least time between two syncs of the live record.
const liveMinGap = 250 * time.Millisecond

func newLiveRecord(w *record.LiveWriter, log *slog.Logger, minGap time.Duration) *liveRecord {
	l := &liveRecord{w: w, log: log, minGap: minGap, wake: make(chan struct{}, 1),
		closing: make(chan struct{}), done: make(chan struct{})}
	go l.flusher()
	return l
}

// append queues lines for the next batch.
func (l *liveRecord) append(lines []record.LiveEntry) {
	if l == nil || len(lines) == 0 {
		return
	}
	l.mu.Lock()
	if !l.closed {
		l.queue = append(l.queue, lines...)
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *liveRecord) flusher() {
	defer close(l.done)
	for range l.wake {
		l.mu.Lock()
		batch, closed := l.queue, l.closed
		l.queue = nil
		l.mu.Unlock()
		if len(batch) > 0 {
			if err := l.w.Append(batch...); err != nil {
				l.once.Do(func() { l.log.Error("live record", "err", err) })
			}
		}
		if closed {
			return
		}
		select {
		case <-time.After(l.minGap):
		case <-l.closing:
		}
	}
}

// close writes what is queued and closes the file; lines appended after
// it are dropped.
func (l *liveRecord) close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	close(l.closing)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
	return l.w.Close()
}

// timeline is what a call's stream said of the execution's timeline: its
// series (from Started) and the sums of its contiguous prefix of buckets,
// from which a lost backend's partial result is built. Buckets that come
// ahead of the prefix wait in ahead until it reaches them, so the memory
// held is that of the out-of-order buckets only. The call's goroutine
// writes it; the verdict reads it once the stage is over.
type timeline struct {
	mu      sync.Mutex
	started bool
	series  record.Series
	// next is the length of the contiguous prefix: buckets 0 to next-1.
	next     uint32
	counters map[string]uint64
	unsent   uint64
	ahead    map[uint32]*enginev1.Bucket
	// quietBefore, on the execution of an engine that came back, is its
	// start_offset: the buckets that begin before it hold nothing of it
	// (the counts of the engines before are there), so they are summed
	// but not written to the live record.
	quietBefore time.Duration
	// lines and samples count the bucket and sample lines this timeline
	// wrote to the live record (for a resumed call, with those it held):
	// where the lines of an engine that comes back after it begin.
	lines, samples uint32
}

// quiet says whether bucket i begins before quietBefore. t.mu is held.
func (t *timeline) quiet(i uint32) bool {
	return t.series.Width > 0 && time.Duration(i)*t.series.Width < t.quietBefore
}

// written is how many bucket and sample lines the timeline wrote.
func (t *timeline) written() (lines, samples uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lines, t.samples
}

// width is the width of the timeline's buckets; 0 before its Started.
func (t *timeline) width() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.series.Width
}

// skip starts the prefix at bucket i: the buckets before it hold nothing
// of this timeline (a resumed segment's, whose live record lines begin
// at its offset).
func (t *timeline) skip(i uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next < i {
		t.next = i
	}
}

// start takes the Started event. A timeline already started (a resumed
// call, from its live record) keeps what it holds and takes the series.
func (t *timeline) start(s record.Series) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started {
		t.series = s
		return
	}
	t.started, t.series = true, s
	t.counters = map[string]uint64{}
}

// progress takes a Progress event's buckets and samples into the prefix
// and returns them as live record entries.
func (t *timeline) progress(p *enginev1.Progress) []record.LiveEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started || (len(p.GetBuckets()) == 0 && len(p.GetFailureSamples()) == 0) {
		return nil
	}
	lines := make([]record.LiveEntry, 0, len(p.GetBuckets())+len(p.GetFailureSamples()))
	for _, b := range p.GetBuckets() {
		if !t.quiet(b.GetIndex()) {
			lines = append(lines, record.BucketEntry(t.series, bucketLine(t.series, b)))
			t.lines++
		}
		t.take(b)
	}
	for _, s := range p.GetFailureSamples() {
		lines = append(lines, record.SampleEntry(t.series, s.GetDueNs(), s.GetOutcomeNs(), sampleLine(t.series, s)))
		t.samples++
	}
	return lines
}

// restore takes a bucket the live record already holds of a resumed
// call into the prefix, as if its stream had sent it.
func (t *timeline) restore(b *enginev1.Bucket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.take(b)
}

// adopt takes over what from holds (a resumed call's sums of its live
// record); from is not used after.
func (t *timeline) adopt(from *timeline) {
	from.mu.Lock()
	defer from.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.started, t.series, t.next = from.started, from.series, from.next
	t.counters, t.unsent, t.ahead = from.counters, from.unsent, from.ahead
	t.lines, t.samples = from.lines, from.samples
}

// take adds b to the prefix, or keeps it until the prefix reaches it.
func (t *timeline) take(b *enginev1.Bucket) {
	if b.GetIndex() < t.next {
		return // sent twice: the engine sends a bucket once
	}
	if b.GetIndex() > t.next {
		if t.ahead == nil {
			t.ahead = map[uint32]*enginev1.Bucket{}
		}
		t.ahead[b.GetIndex()] = b
		return
	}
	for b != nil {
		for k, v := range b.GetCounters() {
			if v != 0 {
				t.counters[k] += v
			}
		}
		t.unsent += b.GetUnsent()
		t.next++
		b = t.ahead[t.next]
		delete(t.ahead, t.next)
	}
}

// until is the end of the contiguous prefix of buckets, from the start;
// 0 when there is none.
func (t *timeline) until() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started {
		return 0
	}
	return time.Duration(t.next) * t.series.Width
}

// partial is the result a lost or silent backend had counted: the sums of
// its prefix of buckets, with planned the requests due before the
// prefix's end. ok is false when it sent no bucket.
func (t *timeline) partial(c *call) (record.BackendResult, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started || t.next == 0 {
		return record.BackendResult{}, false
	}
	until := time.Duration(t.next) * t.series.Width
	br := record.BackendResult{
		Backend:      c.backend,
		BackendName:  c.backendName,
		ElapsedMs:    until.Milliseconds(),
		StartedAt:    t.series.Start.UTC().Format(record.TimeFormat),
		Planned:      plannedBefore(c.ex.requests[c.backend], until),
		Unsent:       t.unsent,
		Counters:     map[string]uint64{},
		Partial:      true,
		CountedUntil: t.series.Start.Add(until).UTC().Format(record.TimeFormat),
	}
	for k, v := range t.counters {
		br.Counters[k] = v
	}
	return br, true
}

// plannedBefore is how many requests of req are due before offset t:
// each worker's pacer, the engine's own schedule, counted by Before.
func plannedBefore(req *enginev1.ExecuteRequest, t time.Duration) uint64 {
	p, err := pacer.New(req.GetRate(), req.GetDuration().AsDuration(), req.GetRamp().AsDuration())
	if err != nil {
		return 0
	}
	return uint64(max(req.GetWorkers(), 1)) * p.Before(t)
}

// seriesOf is the series of a call's lines, from its Started event.
func seriesOf(c *call, s *enginev1.Started) record.Series {
	return record.Series{
		Label: c.ex.label, Backend: c.backend, BackendName: s.GetBackendName(),
		Start: s.GetStartTime().AsTime(), Width: s.GetBucketWidth().AsDuration(),
	}
}

func bucketLine(s record.Series, b *enginev1.Bucket) record.BucketLine {
	l := s.Bucket(b.GetIndex())
	l.Counters = map[string]uint64{}
	for k, v := range b.GetCounters() {
		if v != 0 {
			l.Counters[k] = v
		}
	}
	l.Unsent = b.GetUnsent()
	l.Latency = record.BucketLatency{Count: b.GetLatencyCount(), P50: b.GetLatencyP50Ns(), P99: b.GetLatencyP99Ns(), Max: b.GetLatencyMaxNs()}
	l.SamplesDropped = b.GetSamplesDropped()
	return l
}

func sampleLine(s record.Series, f *enginev1.FailureSample) record.SampleLine {
	l := s.Sample(f.GetDueNs(), f.GetOutcomeNs())
	l.Bucket = f.GetBucket()
	l.LatencyNs = f.GetLatencyNs()
	l.Class, l.Reason, l.Phase = f.GetClass(), f.GetReason(), f.GetPhase()
	l.Status = int(f.GetStatus())
	l.Remote = f.GetRemote()
	l.ConnAgeMs = time.Duration(f.GetConnAgeNs()).Milliseconds()
	l.ConnRequests = f.GetConnRequests()
	return l
}

// openLive opens the live record at path and writes the run's head line;
// nil writes none (a resumed run goes on under its own).
func openLive(path string, head *record.HeadLine, log *slog.Logger) (*liveRecord, error) {
	w, err := record.OpenLive(path)
	if err != nil {
		return nil, err
	}
	if head != nil {
		if err := w.Append(record.HeadEntry(*head)); err != nil {
			w.Close()
			return nil, fmt.Errorf("live record head: %w", err)
		}
	}
	return newLiveRecord(w, log, liveMinGap), nil
}
