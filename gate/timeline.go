package gate

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// The timeline the HTML report draws: what the gate keeps of the live
// record's bucket lines, per execution and backend, compactly (an 8 h 30 min
// soak at 1 s buckets is 30,600 buckets per series, some forty series).
// It is read in the same pass as the failures (ReadLiveRecord), so a live
// record of any size is read once, line by line.

// maxTimelineBuckets bounds a series' bucket index: a line past it (a
// bucket more than 48 days into its execution at 1 s) is not drawn and is
// counted in Timeline.Beyond. The buckets are kept as they are read, so
// memory grows with the lines read, never with an index.
const maxTimelineBuckets = 1 << 22

// Timeline is the bucket lines of a live record's last run.
type Timeline struct {
	// Series are the executions on their backends, in the order their
	// first bucket was read.
	Series []*TimelineSeries
	// Beyond counts the bucket lines whose index is past
	// maxTimelineBuckets, whose width is not positive, or whose start does
	// not parse: not drawn.
	Beyond int

	byKey map[record.SeriesKey]*TimelineSeries
}

// TimelineSeries is one execution's buckets on one backend.
type TimelineSeries struct {
	Label, Backend, BackendName string
	// Start is the start of bucket 0, and Width every bucket's width.
	Start time.Time
	Width time.Duration
	// buckets are in the order read until sorted() orders them by index
	// and keeps the last line of an index read twice.
	buckets []tlBucket
	sorted  bool
}

// tlBucket is what a chart draws of one bucket line.
type tlBucket struct {
	index    uint32
	ok       uint64
	p50, p99 int64
	// fail holds, when the bucket has a failure, the counts of each class
	// of record.FailureClasses, in that order: the outcome classes of the
	// zero-failure set, which never overlap, and the failed gRPC statuses,
	// which overlap a gRPC call's reset, timeout or 4xx/5xx class in the
	// counters (such a call is drawn in both; its sample is one).
	fail []uint64
}

// add records one bucket line; false when it cannot be placed.
func (t *Timeline) add(b *record.BucketLine) bool {
	if b.Index >= maxTimelineBuckets || b.WidthMs <= 0 {
		return false
	}
	k := record.SeriesKey{Label: b.Label, Backend: b.Backend}
	s := t.byKey[k]
	if s == nil {
		start, err := time.Parse(time.RFC3339, b.Start)
		if err != nil {
			return false
		}
		s = &TimelineSeries{Label: b.Label, Backend: b.Backend, BackendName: b.BackendName,
			Start: start.Add(-time.Duration(b.OffsetMs) * time.Millisecond), Width: time.Duration(b.WidthMs) * time.Millisecond}
		if t.byKey == nil {
			t.byKey = map[record.SeriesKey]*TimelineSeries{}
		}
		t.byKey[k] = s
		t.Series = append(t.Series, s)
	}
	tb := tlBucket{index: b.Index, ok: b.Counters[record.HTTP2xx], p50: b.Latency.P50, p99: b.Latency.P99}
	for c, name := range record.FailureClasses {
		if n := b.Counters[name]; n > 0 {
			if tb.fail == nil {
				tb.fail = make([]uint64, len(record.FailureClasses))
			}
			tb.fail[c] = n
		}
	}
	s.buckets = append(s.buckets, tb)
	s.sorted = false
	return true
}

// ordered returns the buckets by index, each index once (the last line
// read of it, as the engine never sends a bucket twice).
func (s *TimelineSeries) ordered() []tlBucket {
	if s.sorted {
		return s.buckets
	}
	slices.SortStableFunc(s.buckets, func(a, b tlBucket) int { return cmp.Compare(a.index, b.index) })
	out := s.buckets[:0]
	for i, b := range s.buckets {
		if i+1 < len(s.buckets) && s.buckets[i+1].index == b.index {
			continue
		}
		out = append(out, b)
	}
	s.buckets, s.sorted = out, true
	return out
}

// Buckets is how many buckets the series spans: its highest index + 1.
func (s *TimelineSeries) Buckets() int {
	bs := s.ordered()
	if len(bs) == 0 {
		return 0
	}
	return int(bs[len(bs)-1].index) + 1
}

// End is the end of the series' last bucket.
func (s *TimelineSeries) End() time.Time {
	return s.Start.Add(time.Duration(s.Buckets()) * s.Width)
}

// ReadLiveRecord reads a live record line by line, keeping the failures
// of its last run (a head line starts a run) and, when timeline is true,
// its buckets for drawing (LiveFailures.Timeline).
func ReadLiveRecord(r io.Reader, timeline bool) (*LiveFailures, error) {
	lf := newLiveFailures()
	reset := func() {
		*lf = *newLiveFailures()
		if timeline {
			lf.Timeline = &Timeline{}
		}
	}
	reset()
	sc, err := record.ScanLive(r, func(l record.LiveLine) error {
		switch {
		case l.Head != nil:
			reset()
		case l.Sample != nil:
			lf.addSample(l.Sample)
		case l.Bucket != nil:
			if l.Bucket.SamplesDropped > 0 {
				lf.addDropped(l.Bucket)
			}
			if timeline && !lf.Timeline.add(l.Bucket) {
				lf.Timeline.Beyond++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	lf.Skipped, lf.Unknown = len(sc.Skipped), len(sc.Unknown)
	return lf, nil
}

// describe is a note for the bucket lines the page cannot draw.
func (t *Timeline) describe() []string {
	if t == nil || t.Beyond == 0 {
		return nil
	}
	return []string{fmt.Sprintf("the live record has %d bucket line(s) with an index past %d or a start that does not parse: not drawn", t.Beyond, maxTimelineBuckets)}
}
