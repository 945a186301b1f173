// The timeline lines of the live record: what the driver appends while a
// run goes, so that the run is on disk within seconds of happening.
// BucketLine and SampleLine describe the two lines field by field, as
// the first form wrote them (one JSON object per line, its type first)
// and as ScanLive hands them on from either form; the compact form
// (livecompact.go) writes the same values in fewer bytes.

package record

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Types of the live record's lines.
const (
	LineBucket = "bucket"
	LineSample = "sample"
)

// BucketLine is one bucket of one execution's timeline on one backend:
// every request whose due time (the intended send time, start + the
// pacer's offset) falls in [start, start + width), whenever it was sent or
// answered, with the outcome it got. The engine sends a bucket once, when
// it is final (every request due in it was sent or left unsent, and has
// its outcome), so its counts never change; an execution has buckets 0 to
// n-1, the last one holding the due time of its last planned request.
//
//	type             "bucket"
//	label            the execution's label, "<scenario>/<target>[/stage-N]"
//	backend          the engine's address (ip:port)
//	backend_name     the engine's --backend-name, if it has one
//	index            the bucket's index, from 0
//	start            start of the bucket, RFC 3339 UTC with ms
//	offset_ms        start of the bucket from the execution's start
//	                 (the due time of request 0): index x width_ms
//	width_ms         the bucket's width
//	counters         benchmark.* counters of the requests due in it, by the
//	                 result's names; an absent counter was zero
//	unsent           requests due in it that a cancel left unsent
//	latency          {count, p50, p99, max} of its 2xx responses in ns,
//	                 from the due time; count = counters' http_2xx, max is
//	                 exact, p50 and p99 at most 1.6 % above the exact
//	                 percentile and never below it
//	samples_dropped  its failures that found the sample budget spent
//
// Summed over an execution's bucket lines on a backend, counters equal
// that backend's result counters name by name, and unsent its unsent
// (CheckTimeline). In every bucket, the sample lines due in it plus
// samples_dropped equal its failure-class counters (CheckSamples).
type BucketLine struct {
	// Type is LineBucket.
	Type string `json:"type"`
	// Label is the execution's label.
	Label string `json:"label"`
	// Backend is the engine's address.
	Backend string `json:"backend"`
	// BackendName is the engine's --backend-name, if it has one.
	BackendName string `json:"backend_name,omitempty"`
	// Index is the bucket's index, from 0.
	Index uint32 `json:"index"`
	// Start is when the bucket begins (TimeFormat).
	Start string `json:"start"`
	// OffsetMs is Start from the due time of the execution's request 0:
	// Index x WidthMs.
	OffsetMs int64 `json:"offset_ms"`
	// WidthMs is the bucket's width.
	WidthMs int64 `json:"width_ms"`
	// Counters of the requests due in the bucket, by the result's names;
	// an absent counter was zero.
	Counters map[string]uint64 `json:"counters"`
	// Unsent is how many requests due in the bucket a cancel left unsent.
	Unsent uint64 `json:"unsent,omitempty"`
	// Latency summarises the bucket's 2xx responses.
	Latency BucketLatency `json:"latency"`
	// SamplesDropped counts the bucket's failures that found the sample
	// budget spent: counted, but in no sample line.
	SamplesDropped uint64 `json:"samples_dropped,omitempty"`
}

// BucketLatency is the latency of a bucket's 2xx responses, from their due
// time, in ns. All zero when the bucket has none.
type BucketLatency struct {
	// Count is the number of 2xx responses: the bucket's http_2xx.
	Count uint64 `json:"count"`
	// P50 and P99 are the percentiles, from a histogram of 64 steps per
	// power of two: never below the exact value of rank ceil(q x count),
	// at most 1/64 above it, and never above Max.
	P50 int64 `json:"p50"`
	P99 int64 `json:"p99"`
	// Max is exact.
	Max int64 `json:"max"`
}

// SampleLine is one failed request of an execution on one backend, of a
// class of the zero-failure set (4xx, 5xx, resets,
// connection failures and timeouts, overflow, in-flight losses). The
// engine describes an execution's first failures one by one, up to its
// sample budget (10,000 unless the plan says otherwise), and only counts
// the others (samples_dropped). A failure is in its bucket's counters
// before it is in a sample.
//
//	type               "sample"
//	label, backend, backend_name   as in a bucket line
//	bucket             index of the bucket its due time falls in
//	due                its due time, RFC 3339 UTC with ms
//	due_offset_ms      its due time from the execution's start (floor)
//	outcome            when its outcome was counted (for a response, when
//	                   its last bytes reached the engine), RFC 3339 with ms
//	outcome_offset_ms  the same from the execution's start (floor)
//	latency_ns         from due time to outcome, exact
//	class              its outcome class, such as benchmark.stream_resets
//	reason             the detail counter that says why: a reset's
//	                   benchmark.stream_resets_<reason>, a connection
//	                   failure's benchmark.pool_failure_local_... or
//	                   _remote_connection_failure; absent for other classes
//	phase              a reset's benchmark.stream_resets_before_headers or
//	                   _incomplete_body; absent otherwise
//	status             the HTTP status of a 4xx or 5xx; absent otherwise
//	remote             the connection's peer as the socket reached it, ip:port
//	                   (the replica, not the Service); absent when no
//	                   connection was made
//	conn_age_ms        age of that connection at the outcome (floor)
//	conn_requests      requests that connection carried before this one
type SampleLine struct {
	// Type is LineSample.
	Type string `json:"type"`
	// Label is the execution's label.
	Label string `json:"label"`
	// Backend is the engine's address.
	Backend string `json:"backend"`
	// BackendName is the engine's --backend-name, if it has one.
	BackendName string `json:"backend_name,omitempty"`
	// Bucket is the index of the bucket its due time falls in.
	Bucket uint32 `json:"bucket"`
	// Due is its due time, the intended send time (TimeFormat).
	Due string `json:"due"`
	// DueOffsetMs is Due from the execution's start, rounded down.
	DueOffsetMs int64 `json:"due_offset_ms"`
	// Outcome is when its outcome was counted (TimeFormat): for a
	// response, when its last bytes reached the engine.
	Outcome string `json:"outcome"`
	// OutcomeOffsetMs is Outcome from the execution's start, rounded down.
	OutcomeOffsetMs int64 `json:"outcome_offset_ms"`
	// LatencyNs runs from the due time to the outcome, exactly.
	LatencyNs int64 `json:"latency_ns"`
	// Class is its outcome class, a counter name.
	Class string `json:"class"`
	// Reason is the detail counter that says why (a reset's reason, a
	// connection failure's local or remote), if the class has one.
	Reason string `json:"reason,omitempty"`
	// Phase is a reset's phase counter (before headers or incomplete
	// body).
	Phase string `json:"phase,omitempty"`
	// Status is the HTTP status of a 4xx or 5xx response.
	Status int `json:"status,omitempty"`
	// Remote is the peer of its connection as the socket reached it,
	// ip:port (the replica, not the Service); empty when no connection was
	// made.
	Remote string `json:"remote,omitempty"`
	// ConnAgeMs is the age of that connection at the outcome, rounded
	// down.
	ConnAgeMs int64 `json:"conn_age_ms"`
	// ConnRequests is how many requests that connection carried before
	// this one.
	ConnRequests uint64 `json:"conn_requests"`
}

// Series identifies the lines of one execution on one backend and turns
// the engine's offsets into their times. Start is the due time of request
// 0 (the engine's Started.start_time), Width the timeline's bucket width.
type Series struct {
	Label, Backend, BackendName string
	Start                       time.Time
	Width                       time.Duration
}

// Bucket is the line of bucket index with its identity and times filled
// in; the caller adds its counters, unsent, latency and samples dropped.
func (s Series) Bucket(index uint32) BucketLine {
	off := time.Duration(index) * s.Width
	return BucketLine{
		Type: LineBucket, Label: s.Label, Backend: s.Backend, BackendName: s.BackendName,
		Index: index, Start: s.Start.Add(off).UTC().Format(TimeFormat),
		OffsetMs: off.Milliseconds(), WidthMs: s.Width.Milliseconds(),
	}
}

// Sample is the line of a failure due at offset dueNs whose outcome came
// at offset outcomeNs, with its identity, bucket and times filled in; the
// caller adds class, reason, phase, status and the connection's fields.
func (s Series) Sample(dueNs, outcomeNs int64) SampleLine {
	l := SampleLine{
		Type: LineSample, Label: s.Label, Backend: s.Backend, BackendName: s.BackendName,
		Due:             s.Start.Add(time.Duration(dueNs)).UTC().Format(TimeFormat),
		DueOffsetMs:     time.Duration(dueNs).Milliseconds(),
		Outcome:         s.Start.Add(time.Duration(outcomeNs)).UTC().Format(TimeFormat),
		OutcomeOffsetMs: time.Duration(outcomeNs).Milliseconds(),
		LatencyNs:       outcomeNs - dueNs,
	}
	if s.Width > 0 && dueNs >= 0 {
		l.Bucket = uint32(dueNs / int64(s.Width))
	}
	return l
}

// TimelineTotals is what a set of bucket lines sums to.
type TimelineTotals struct {
	// Counters sums each counter over the lines.
	Counters map[string]uint64
	// Unsent and SamplesDropped sum those fields.
	Unsent, SamplesDropped uint64
	// Buckets is the number of lines summed.
	Buckets int
	// Overflow says a sum does not fit in 64 bits; the sums are then
	// meaningless.
	Overflow bool
}

// SumBuckets sums bucket lines (of one execution on one backend) into
// per-counter totals.
func SumBuckets(lines []BucketLine) TimelineTotals {
	t := TimelineTotals{Counters: map[string]uint64{}}
	add := func(sum *uint64, v uint64) {
		var c uint64
		*sum, c = bits.Add64(*sum, v, 0)
		t.Overflow = t.Overflow || c != 0
	}
	for _, l := range lines {
		for k, v := range l.Counters {
			n := t.Counters[k]
			add(&n, v)
			t.Counters[k] = n
		}
		add(&t.Unsent, l.Unsent)
		add(&t.SamplesDropped, l.SamplesDropped)
		t.Buckets++
	}
	return t
}

// TimelineError says an execution's timeline on a backend does not add up
// to the backend's result, or is not one line per bucket.
type TimelineError struct {
	// Label and Backend name the execution and backend checked.
	Label, Backend string
	// Mismatches lists, by name, every counter whose timeline sum differs
	// from the result (a counter absent on one side is zero there), and
	// "unsent" when the unsent counts differ.
	Mismatches []TimelineMismatch
	// Duplicates lists the bucket indexes found on more than one line.
	Duplicates []uint32
	// Gaps lists the indexes missing below the highest one found.
	Gaps []uint32
	// Overflow says a timeline sum does not fit in 64 bits.
	Overflow bool
}

// TimelineMismatch is one counter whose timeline sum and result differ.
type TimelineMismatch struct {
	Counter          string
	Timeline, Result uint64
}

// UnsentCounter is the name TimelineError.Mismatches gives the unsent
// count, which is a field of the result, not a counter.
const UnsentCounter = "unsent"

func (e *TimelineError) Error() string {
	var parts []string
	for _, m := range e.Mismatches {
		parts = append(parts, fmt.Sprintf("%s %d in the timeline, %d in the result", m.Counter, m.Timeline, m.Result))
	}
	if len(e.Duplicates) > 0 {
		parts = append(parts, fmt.Sprintf("buckets %v recorded more than once", e.Duplicates))
	}
	if len(e.Gaps) > 0 {
		parts = append(parts, fmt.Sprintf("buckets %v missing", e.Gaps))
	}
	if e.Overflow {
		parts = append(parts, "the timeline's sums overflow 64 bits")
	}
	return fmt.Sprintf("timeline of %s on %s: %s", e.Label, e.Backend, strings.Join(parts, "; "))
}

// CheckTimeline checks the conservation of a timeline: the bucket lines
// of one execution on one backend sum to that backend's result, counter
// by counter (every counter of either side, benchmark.late_sends
// included) and in unsent, with each bucket on one line and none missing
// below the highest. It returns a *TimelineError when they do not.
func CheckTimeline(lines []BucketLine, r BackendResult) error {
	e := &TimelineError{Backend: r.Backend}
	if len(lines) > 0 {
		e.Label = lines[0].Label
	}
	if e.Backend == "" && len(lines) > 0 {
		e.Backend = lines[0].Backend
	}
	seen := make(map[uint32]bool, len(lines))
	top := uint32(0)
	for _, l := range lines {
		if seen[l.Index] && !slices.Contains(e.Duplicates, l.Index) {
			e.Duplicates = append(e.Duplicates, l.Index)
		}
		seen[l.Index] = true
		top = max(top, l.Index)
	}
	for k := uint32(0); len(lines) > 0 && k < top; k++ {
		if !seen[k] {
			e.Gaps = append(e.Gaps, k)
		}
	}
	t := SumBuckets(lines)
	e.Overflow = t.Overflow
	names := make(map[string]bool, len(t.Counters)+len(r.Counters))
	for k := range t.Counters {
		names[k] = true
	}
	for k := range r.Counters {
		names[k] = true
	}
	for k := range names {
		if t.Counters[k] != r.Counters[k] {
			e.Mismatches = append(e.Mismatches, TimelineMismatch{Counter: k, Timeline: t.Counters[k], Result: r.Counters[k]})
		}
	}
	slices.SortFunc(e.Mismatches, func(a, b TimelineMismatch) int { return cmp.Compare(a.Counter, b.Counter) })
	if t.Unsent != r.Unsent {
		e.Mismatches = append(e.Mismatches, TimelineMismatch{Counter: UnsentCounter, Timeline: t.Unsent, Result: r.Unsent})
	}
	slices.Sort(e.Duplicates)
	if len(e.Mismatches) == 0 && len(e.Duplicates) == 0 && len(e.Gaps) == 0 && !e.Overflow {
		return nil
	}
	return e
}

// FailureClasses are the outcome classes of the zero-failure set and the
// failed gRPC statuses (grpc_status.1..16 and missing): the classes a
// sample line may have. A failed call leaves one sample: a failed gRPC
// status has its own only when its call is in no other of these classes
// (answered 2xx), so a window's failures count calls.
var FailureClasses = failureClasses()

// FailedCalls is how many failure samples, kept or dropped, the counters
// c of a bucket or a result ask for: one a failed call. A failed gRPC
// status leaves its own sample only when its call is in no other failure
// class, and the counters do not say which calls are in both, so with
// gRPC it is a range: from max(other, grpc) (every failed status on a call
// reset, timed out or answered 4xx/5xx) to other + grpc (none). Without
// gRPC lo == hi, the failures counted.
func FailedCalls(c map[string]uint64) (lo, hi uint64) {
	var other, grpc uint64
	for _, k := range FailureClasses {
		if strings.HasPrefix(k, GRPCStatusPrefix) {
			grpc += c[k]
		} else {
			other += c[k]
		}
	}
	return max(other, grpc), other + grpc
}

func failureClasses() []string {
	var out []string
	for _, k := range Outcomes {
		if InZeroFailureSet(k) {
			out = append(out, k)
		}
	}
	for code := 1; code <= GRPCMaxStatus; code++ {
		out = append(out, GRPCStatusPrefix+strconv.Itoa(code))
	}
	return append(out, GRPCStatusMissing)
}

// SampleError says sample lines do not match the bucket lines of their
// execution and backend.
type SampleError struct {
	// Label and Backend name the execution and backend checked.
	Label, Backend string
	// Buckets lists each bucket whose samples do not add up.
	Buckets []SampleMismatch
}

// SampleMismatch is one bucket whose samples do not add up: Samples (the
// sample lines due in it) plus Dropped (its samples_dropped) should be
// Failures (the sum of its failure-class counters), and no class should
// have more samples than its counter (OverClasses names those that do).
// Missing says no bucket line of that index was given.
type SampleMismatch struct {
	Bucket                     uint32
	Samples, Dropped, Failures uint64
	OverClasses                []string
	Missing                    bool
}

func (e *SampleError) Error() string {
	var parts []string
	for _, m := range e.Buckets {
		switch {
		case m.Missing:
			parts = append(parts, fmt.Sprintf("bucket %d: %d samples and no bucket", m.Bucket, m.Samples))
		case len(m.OverClasses) > 0:
			parts = append(parts, fmt.Sprintf("bucket %d: more samples than counted of %s", m.Bucket, strings.Join(m.OverClasses, ", ")))
		default:
			parts = append(parts, fmt.Sprintf("bucket %d: %d samples + %d dropped for %d failures", m.Bucket, m.Samples, m.Dropped, m.Failures))
		}
	}
	return fmt.Sprintf("samples of %s on %s: %s", e.Label, e.Backend, strings.Join(parts, "; "))
}

// CheckSamples checks the sample lines of one execution on one backend
// against its bucket lines, all of them: in every bucket, the samples due
// in it plus its samples_dropped equal the sum of its failure-class
// counters, and no class has more samples than its counter. A sample is
// thus never of a failure the counters do not hold. It returns a
// *SampleError when they do not match.
func CheckSamples(buckets []BucketLine, samples []SampleLine) error {
	e := &SampleError{}
	if len(buckets) > 0 {
		e.Label, e.Backend = buckets[0].Label, buckets[0].Backend
	}
	byClass := map[uint32]map[string]uint64{}
	for _, s := range samples {
		if byClass[s.Bucket] == nil {
			byClass[s.Bucket] = map[string]uint64{}
		}
		byClass[s.Bucket][s.Class]++
	}
	have := make(map[uint32]bool, len(buckets))
	for _, b := range buckets {
		have[b.Index] = true
		m := SampleMismatch{Bucket: b.Index, Dropped: b.SamplesDropped}
		lo, hi := FailedCalls(b.Counters)
		m.Failures = hi
		for k, n := range byClass[b.Index] {
			m.Samples += n
			if n > b.Counters[k] || !InZeroFailureSet(k) {
				m.OverClasses = append(m.OverClasses, k)
			}
		}
		slices.Sort(m.OverClasses)
		got := m.Samples + m.Dropped
		if got < lo || got > hi || len(m.OverClasses) > 0 {
			e.Buckets = append(e.Buckets, m)
		}
	}
	for k, c := range byClass {
		if !have[k] {
			m := SampleMismatch{Bucket: k, Missing: true}
			for _, n := range c {
				m.Samples += n
			}
			e.Buckets = append(e.Buckets, m)
		}
	}
	if len(e.Buckets) == 0 {
		return nil
	}
	slices.SortFunc(e.Buckets, func(a, b SampleMismatch) int { return cmp.Compare(a.Bucket, b.Bucket) })
	return e
}
