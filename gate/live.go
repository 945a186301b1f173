package gate

import (
	"math"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// What the gate keeps of a live record: every failure sample of the last
// run, compact. A reference soak at the engine's sample budget (8 targets
// x 5 nodes x 10,000) holds 400,000 samples; kept as record.SampleLine,
// ten strings each, they took some 500 bytes apiece (200 MB). A
// liveSample is 48 bytes without a pointer: its strings (label, backend,
// class and reason, replica) are interned, its times are nanoseconds,
// and what does not fit those (a time outside 1678-2261, a status above
// 65535, a connection age outside 32 bits of milliseconds) is in a side
// map. Nothing is rounded: every time, string and number the gate prints
// (the text report, --json and the HTML page's failure samples) is what
// the line said (BenchmarkLiveFailuresHeap).

// LiveFailures is what the gate keeps of a live record: the failure
// samples and the buckets that dropped some, of the last run in it, and
// its buckets for drawing when they were asked for.
type LiveFailures struct {
	// Skipped and Unknown count the lines ScanLive skipped.
	Skipped, Unknown int
	// Timeline is the run's buckets, for the HTML report; nil unless it
	// was asked for.
	Timeline *Timeline

	strs    idTable[string] // id 0 is ""
	series  idTable[liveSeries]
	kinds   idTable[liveKind]
	samples []liveSample
	odd     map[uint32]oddSample // by index in samples
	dropped []liveDropped
}

// liveSeries is an execution on a backend: ids of its label, backend
// address and backend name.
type liveSeries struct{ label, backend, name uint32 }

// liveKind is what failed: ids of a sample's class and reason, kept as
// one id since a run has few pairs.
type liveKind struct{ class, reason uint32 }

// liveSample is one failure sample.
type liveSample struct {
	// due and outcome are Unix nanoseconds, valid with sDue and sOutcome
	// (the line's time parsed) and without sOdd.
	due, outcome int64
	latencyNs    int64
	series, kind uint32
	// remote is a string id.
	remote uint32
	// dueText is the id of the due text when it is not due written in
	// record.TimeFormat; 0 when it is (or is empty).
	dueText uint32
	// connAgeMs is valid without sOdd.
	connAgeMs uint32
	status    uint16
	flags     uint8
}

// Flags of a liveSample.
const (
	sDue     = 1 << iota // due parsed
	sOutcome             // outcome parsed
	sOdd                 // times, status and age are in LiveFailures.odd
)

// oddSample holds what of a sample does not fit a liveSample.
type oddSample struct {
	due, outcome time.Time
	status       int
	connAgeMs    int64
}

// liveDropped is a bucket that dropped samples.
type liveDropped struct {
	start   time.Time // its start, valid with startOK
	startOK bool
	widthMs int64
	n       uint64 // samples_dropped
	series  uint32
}

// sampleView is one sample as the gate prints it.
type sampleView struct {
	label, class, reason, remote string
	due                          string // as the line wrote it
	status                       int
	connAgeMs, latencyNs         int64
}

func newLiveFailures() *LiveFailures {
	lf := &LiveFailures{strs: newIDTable[string](), series: newIDTable[liveSeries](), kinds: newIDTable[liveKind]()}
	lf.strs.id("")
	return lf
}

// idTable gives each distinct value a dense id, in the order first seen:
// a live record of hours repeats few strings, series and kinds, so a
// sample keeps their ids.
type idTable[K comparable] struct {
	vals []K
	ids  map[K]uint32
}

func newIDTable[K comparable]() idTable[K] { return idTable[K]{ids: map[K]uint32{}} }

// id returns the id of k, giving it the next one if it has none.
func (t *idTable[K]) id(k K) uint32 {
	if id, ok := t.ids[k]; ok {
		return id
	}
	id := uint32(len(t.vals))
	t.vals = append(t.vals, k)
	t.ids[k] = id
	return id
}

// at is the value of id.
func (t *idTable[K]) at(id uint32) K { return t.vals[id] }

// intern returns the id of s.
func (lf *LiveFailures) intern(s string) uint32 { return lf.strs.id(s) }

func (lf *LiveFailures) str(id uint32) string { return lf.strs.at(id) }

// seriesID returns the id of the series of label on backend.
func (lf *LiveFailures) seriesID(label, backend, name string) uint32 {
	return lf.series.id(liveSeries{lf.intern(label), lf.intern(backend), lf.intern(name)})
}

// kindID returns the id of the pair class, reason.
func (lf *LiveFailures) kindID(class, reason string) uint32 {
	return lf.kinds.id(liveKind{lf.intern(class), lf.intern(reason)})
}

// Times between these years fit in Unix nanoseconds.
const minNanoYear, maxNanoYear = 1678, 2261

func fitsNanos(t time.Time) bool { return t.Year() >= minNanoYear && t.Year() <= maxNanoYear }

func (lf *LiveFailures) addSample(l *record.SampleLine) {
	s := liveSample{
		series: lf.seriesID(l.Label, l.Backend, l.BackendName), kind: lf.kindID(l.Class, l.Reason),
		remote: lf.intern(l.Remote), latencyNs: l.LatencyNs,
	}
	odd := oddSample{status: l.Status, connAgeMs: l.ConnAgeMs}
	due, derr := time.Parse(time.RFC3339, l.Due)
	outcome, oerr := time.Parse(time.RFC3339, l.Outcome)
	if derr == nil {
		s.flags |= sDue
		odd.due = due
	}
	if derr != nil || due.UTC().Format(record.TimeFormat) != l.Due {
		s.dueText = lf.intern(l.Due)
	}
	if oerr == nil {
		s.flags |= sOutcome
		odd.outcome = outcome
	}
	fits := (derr != nil || fitsNanos(due)) && (oerr != nil || fitsNanos(outcome)) &&
		l.Status >= 0 && l.Status <= math.MaxUint16 && l.ConnAgeMs >= 0 && l.ConnAgeMs <= math.MaxUint32
	if fits {
		if derr == nil {
			s.due = due.UnixNano()
		}
		if oerr == nil {
			s.outcome = outcome.UnixNano()
		}
		s.status, s.connAgeMs = uint16(l.Status), uint32(l.ConnAgeMs)
	} else {
		s.flags |= sOdd
		if lf.odd == nil {
			lf.odd = map[uint32]oddSample{}
		}
		lf.odd[uint32(len(lf.samples))] = odd
	}
	lf.samples = append(lf.samples, s)
}

func (lf *LiveFailures) addDropped(b *record.BucketLine) {
	d := liveDropped{series: lf.seriesID(b.Label, b.Backend, b.BackendName), n: b.SamplesDropped, widthMs: b.WidthMs}
	if start, err := time.Parse(time.RFC3339, b.Start); err == nil {
		d.start, d.startOK = start, true
	}
	lf.dropped = append(lf.dropped, d)
}

// sampleCount is how many samples were kept.
func (lf *LiveFailures) sampleCount() int { return len(lf.samples) }

// droppedTotal sums the samples_dropped of the buckets kept.
func (lf *LiveFailures) droppedTotal() uint64 {
	var n uint64
	for _, d := range lf.dropped {
		n += d.n
	}
	return n
}

// times returns sample i's due and outcome times and whether each parsed.
func (lf *LiveFailures) times(i int) (due, outcome time.Time, dueOK, outcomeOK bool) {
	s := &lf.samples[i]
	dueOK, outcomeOK = s.flags&sDue != 0, s.flags&sOutcome != 0
	if s.flags&sOdd != 0 {
		o := lf.odd[uint32(i)]
		return o.due, o.outcome, dueOK, outcomeOK
	}
	if dueOK {
		due = time.Unix(0, s.due).UTC()
	}
	if outcomeOK {
		outcome = time.Unix(0, s.outcome).UTC()
	}
	return due, outcome, dueOK, outcomeOK
}

// class is sample i's outcome class.
func (lf *LiveFailures) class(i int) string {
	return lf.str(lf.kinds.at(lf.samples[i].kind).class)
}

// view is sample i as the gate prints it.
func (lf *LiveFailures) view(i int) sampleView {
	s := &lf.samples[i]
	k := lf.kinds.at(s.kind)
	v := sampleView{label: lf.str(lf.series.at(s.series).label), class: lf.str(k.class), reason: lf.str(k.reason),
		remote: lf.str(s.remote), latencyNs: s.latencyNs, status: int(s.status), connAgeMs: int64(s.connAgeMs)}
	if s.flags&sOdd != 0 {
		o := lf.odd[uint32(i)]
		v.status, v.connAgeMs = o.status, o.connAgeMs
	}
	switch {
	case s.dueText != 0 || s.flags&sDue == 0:
		v.due = lf.str(s.dueText)
	default:
		due, _, _, _ := lf.times(i)
		v.due = due.UTC().Format(record.TimeFormat)
	}
	return v
}
