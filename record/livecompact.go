// The compact form of the live record. The first form wrote every bucket
// as a self-contained JSON object of some 300 bytes, three quarters of
// them the same words on every line (label, backend, times, counter
// names); the reference soak's 1.22 million buckets came to some 355 MB.
// The compact form says each of those once and then refers to it:
//
//	{"type":"head",...,"form":2}
//	{"type":"series","id":0,"label":"mesh/svc-1","backend":"10.244.1.7:8443","backend_name":"node-a","start":"2026-03-02T10:00:08.123456789Z","width_ns":1000000000}
//	{"type":"names","first":0,"names":["benchmark.http_2xx","benchmark.late_sends"]}
//	["b",0,30599,[0,60,1,2],[1523456,4523456,5523456]]
//	["s",0,30599500000000,30599600000222,2,-1,-1,503,"10.244.2.9:8080",41000,612]
//
// A series line gives an id to one execution on one backend (label,
// backend, backend_name, the due time of its request 0 to the ns, the
// bucket width in ns); a names line gives the ids first, first+1, ... to
// counter names. A bucket or sample line is a JSON array that names its
// series and counters by id:
//
//	["b", series, index, [name, count, ...], [p50, p99, max] (, unsent, samples_dropped, latency count)]
//	["s", series, due_ns, outcome_ns, class, reason, phase, status, remote, conn_age_ms, conn_requests (, bucket, latency_ns)]
//
// Counters that are zero are left out; the latency is [] when its three
// values are zero. The trailing fields of a bucket are written only when
// one is not the default: unsent and samples_dropped 0, the latency count
// the bucket's http_2xx (which it is, from this project's engine). A
// sample's times are offsets in ns from the series' start; reason and
// phase are -1 when it has none; its bucket and latency_ns are written
// only when they are not the ones its due and outcome times give. Every
// other field of the first form (start, offset_ms, width_ms, due,
// outcome, ...) follows from the series and is filled in by the reader,
// which hands on the same BucketLine and SampleLine as for the first form.
//
// A declaration holds from its line on, until a later one gives the same
// id again or a head line starts a new run (ids then start over). The
// writer declares an id in the same write as the first line that uses
// it, and after a failed write declares again whatever it uses next, so
// a torn batch never leaves a line that refers to a declaration that is
// not on disk before it. A line that names an id not declared is skipped
// like a torn one.
//
// Old readers see the head line as before, the declarations as lines of a
// type they do not know, and the arrays as lines they cannot read: they
// read no bucket of a record in this form, and say so rather than
// reading it as a run without failures.

package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// LiveForm is the form this package writes: 2, the compact one. A head
// line without form opens a run in the first form.
const LiveForm = 2

// Types of the compact form's declaration lines.
const (
	LineSeries = "series"
	LineNames  = "names"
)

// Kinds of the compact form's array lines.
const (
	compactBucket = "b"
	compactSample = "s"
)

// Bounds of one run's declarations, so that a reader holds a bounded
// dictionary whatever the file says: a run has a series per execution
// and backend, and some twenty counter names.
const (
	MaxLiveSeries = 1 << 16
	MaxLiveNames  = 1 << 10
)

// SeriesLine declares a series id of the compact form.
type SeriesLine struct {
	// Type is LineSeries.
	Type string `json:"type"`
	// ID is the id the run's bucket and sample lines name it by.
	ID uint32 `json:"id"`
	// Label, Backend and BackendName are the lines' identity.
	Label       string `json:"label"`
	Backend     string `json:"backend"`
	BackendName string `json:"backend_name,omitempty"`
	// Start is the due time of the execution's request 0, RFC 3339 UTC
	// to the ns.
	Start string `json:"start"`
	// WidthNs is the bucket width.
	WidthNs int64 `json:"width_ns"`
}

// NamesLine declares counter name ids of the compact form: Names[i] gets
// the id First+i.
type NamesLine struct {
	// Type is LineNames.
	Type string `json:"type"`
	// First is the id of Names[0].
	First uint32 `json:"first"`
	// Names are counter names.
	Names []string `json:"names"`
}

// LiveEntry is one thing to append to a live record: a head line, or a
// bucket or sample line of a series. Build it with HeadEntry, BucketEntry
// or SampleEntry.
type LiveEntry struct {
	head   *HeadLine
	series Series
	bucket *BucketLine
	sample *SampleLine
	// dueNs and outcomeNs are a sample's offsets from the series' start.
	dueNs, outcomeNs int64
}

// HeadEntry opens a run.
func HeadEntry(h HeadLine) LiveEntry { return LiveEntry{head: &h} }

// BucketEntry is bucket line l of series s. The line's identity and times
// are the series' (as s.Bucket(l.Index) gives them); its index, counters,
// unsent, latency and samples dropped are its own.
func BucketEntry(s Series, l BucketLine) LiveEntry { return LiveEntry{series: s, bucket: &l} }

// SampleEntry is the sample line l of series s, due at offset dueNs with
// its outcome at outcomeNs (the arguments l was made with by s.Sample).
// The line's identity and times are the series'; its bucket, latency,
// class, reason, phase, status and connection fields are its own.
func SampleEntry(s Series, dueNs, outcomeNs int64, l SampleLine) LiveEntry {
	return LiveEntry{series: s, sample: &l, dueNs: dueNs, outcomeNs: outcomeNs}
}

// seriesKey tells series apart for the writer's ids.
type seriesKey struct {
	label, backend, name string
	start                int64
	width                time.Duration
}

// liveEncoder writes entries in the compact form and keeps the ids it
// has declared.
type liveEncoder struct {
	series map[seriesKey]uint32
	names  map[string]uint32
	// pairs is the scratch of one bucket's counters.
	pairs []counterPair
	fresh []string
}

type counterPair struct {
	id uint32
	n  uint64
}

// forget drops every declaration: the next line that needs one declares
// it again. Called when a head starts a run and after a failed write.
func (e *liveEncoder) forget() {
	e.series = map[seriesKey]uint32{}
	e.names = map[string]uint32{}
}

// encode appends the entries' lines to buf.
func (e *liveEncoder) encode(buf []byte, entries []LiveEntry) ([]byte, error) {
	if e.series == nil {
		e.forget()
	}
	for _, en := range entries {
		switch {
		case en.head != nil:
			e.forget()
			h := *en.head
			h.Type, h.Form = LineHead, LiveForm
			b, err := json.Marshal(h)
			if err != nil {
				return buf, fmt.Errorf("encode head line: %w", err)
			}
			buf = append(append(buf, b...), '\n')
		case en.bucket != nil:
			var sid uint32
			buf, sid = e.seriesID(buf, en.series)
			buf = e.appendBucket(buf, sid, en.bucket)
		case en.sample != nil:
			var sid uint32
			buf, sid = e.seriesID(buf, en.series)
			buf = e.appendSample(buf, sid, en)
		}
	}
	return buf, nil
}

// seriesID is s's id, declared in buf first if it has none yet.
func (e *liveEncoder) seriesID(buf []byte, s Series) ([]byte, uint32) {
	k := seriesKey{s.Label, s.Backend, s.BackendName, s.Start.UnixNano(), s.Width}
	if id, ok := e.series[k]; ok {
		return buf, id
	}
	id := uint32(len(e.series))
	e.series[k] = id
	buf = append(buf, `{"type":"series","id":`...)
	buf = strconv.AppendUint(buf, uint64(id), 10)
	buf = append(buf, `,"label":`...)
	buf = appendJSONString(buf, s.Label)
	buf = append(buf, `,"backend":`...)
	buf = appendJSONString(buf, s.Backend)
	if s.BackendName != "" {
		buf = append(buf, `,"backend_name":`...)
		buf = appendJSONString(buf, s.BackendName)
	}
	buf = append(buf, `,"start":"`...)
	buf = s.Start.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","width_ns":`...)
	buf = strconv.AppendInt(buf, int64(s.Width), 10)
	return append(buf, "}\n"...), id
}

// nameIDs gives every counter of l an id, declaring the new ones in buf
// first, and leaves the non-zero counters in e.pairs, by id.
func (e *liveEncoder) nameIDs(buf []byte, counters map[string]uint64) []byte {
	e.pairs, e.fresh = e.pairs[:0], e.fresh[:0]
	for k, n := range counters {
		if n == 0 {
			continue
		}
		id, ok := e.names[k]
		if !ok {
			id = uint32(len(e.names))
			e.names[k] = id
			e.fresh = append(e.fresh, k)
		}
		e.pairs = append(e.pairs, counterPair{id, n})
	}
	slices.SortFunc(e.pairs, func(a, b counterPair) int { return int(a.id) - int(b.id) })
	return e.declareNames(buf)
}

// declareNames writes a names line for e.fresh, whose ids are the last
// len(e.fresh) given; the ids were given in map order, so the line lists
// the names by id.
func (e *liveEncoder) declareNames(buf []byte) []byte {
	if len(e.fresh) == 0 {
		return buf
	}
	first := uint32(len(e.names) - len(e.fresh))
	slices.SortFunc(e.fresh, func(a, b string) int { return int(e.names[a]) - int(e.names[b]) })
	buf = append(buf, `{"type":"names","first":`...)
	buf = strconv.AppendUint(buf, uint64(first), 10)
	buf = append(buf, `,"names":[`...)
	for i, k := range e.fresh {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, k)
	}
	e.fresh = e.fresh[:0]
	return append(buf, "]}\n"...)
}

// nameID is the id of counter name k ("" is -1), declared in buf first
// if it has none yet.
func (e *liveEncoder) nameID(buf []byte, k string) ([]byte, int64) {
	if k == "" {
		return buf, -1
	}
	id, ok := e.names[k]
	if !ok {
		id = uint32(len(e.names))
		e.names[k] = id
		e.fresh = append(e.fresh[:0], k)
		buf = e.declareNames(buf)
	}
	return buf, int64(id)
}

func (e *liveEncoder) appendBucket(buf []byte, sid uint32, l *BucketLine) []byte {
	buf = e.nameIDs(buf, l.Counters)
	buf = append(buf, `["b",`...)
	buf = strconv.AppendUint(buf, uint64(sid), 10)
	buf = append(buf, ',')
	buf = strconv.AppendUint(buf, uint64(l.Index), 10)
	buf = append(buf, ",["...)
	for i, p := range e.pairs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendUint(buf, uint64(p.id), 10)
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, p.n, 10)
	}
	buf = append(buf, "],["...)
	if lt := l.Latency; lt.P50 != 0 || lt.P99 != 0 || lt.Max != 0 {
		buf = strconv.AppendInt(buf, lt.P50, 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, lt.P99, 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, lt.Max, 10)
	}
	buf = append(buf, ']')
	tail := []uint64{l.Unsent, l.SamplesDropped}
	if l.Latency.Count != l.Counters[HTTP2xx] {
		tail = append(tail, l.Latency.Count)
	}
	for len(tail) > 0 && tail[len(tail)-1] == 0 && len(tail) < 3 {
		tail = tail[:len(tail)-1]
	}
	for _, v := range tail {
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, v, 10)
	}
	return append(buf, "]\n"...)
}

func (e *liveEncoder) appendSample(buf []byte, sid uint32, en LiveEntry) []byte {
	l := en.sample
	var class, reason, phase int64
	buf, class = e.nameID(buf, l.Class)
	buf, reason = e.nameID(buf, l.Reason)
	buf, phase = e.nameID(buf, l.Phase)
	buf = append(buf, `["s",`...)
	for _, v := range []int64{int64(sid), en.dueNs, en.outcomeNs, class, reason, phase, int64(l.Status)} {
		buf = strconv.AppendInt(buf, v, 10)
		buf = append(buf, ',')
	}
	buf = appendJSONString(buf, l.Remote)
	buf = append(buf, ',')
	buf = strconv.AppendInt(buf, l.ConnAgeMs, 10)
	buf = append(buf, ',')
	buf = strconv.AppendUint(buf, l.ConnRequests, 10)
	if d := en.series.Sample(en.dueNs, en.outcomeNs); d.Bucket != l.Bucket || d.LatencyNs != l.LatencyNs {
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, uint64(l.Bucket), 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, l.LatencyNs, 10)
	}
	return append(buf, "]\n"...)
}

// appendJSONString appends s as a JSON string: as it is when it needs no
// escape (names and addresses), else as encoding/json writes it.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(buf, b...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// liveDecoder reads the compact form: the declarations of the run read so
// far.
type liveDecoder struct {
	series map[uint32]Series
	names  map[uint32]string
	// scratch of fastBucket
	pairs, tail []uint64
	lat         []int64
}

// reset forgets the declarations: a head line starts a run.
func (d *liveDecoder) reset() {
	d.series, d.names = nil, nil
}

// errUndeclared says a compact line names an id no declaration gave.
var errUndeclared = errors.New("an id that no declaration gave")

// declareSeries takes a series line.
func (d *liveDecoder) declareSeries(l SeriesLine) error {
	if l.ID >= MaxLiveSeries {
		return fmt.Errorf("series id %d over %d", l.ID, MaxLiveSeries-1)
	}
	if l.Label == "" || l.Backend == "" {
		return errors.New("a series line without a label or backend")
	}
	start, err := time.Parse(time.RFC3339Nano, l.Start)
	if err != nil {
		return fmt.Errorf("series start: %w", err)
	}
	if l.WidthNs < 0 {
		return fmt.Errorf("series width %d ns", l.WidthNs)
	}
	if d.series == nil {
		d.series = map[uint32]Series{}
	}
	d.series[l.ID] = Series{Label: l.Label, Backend: l.Backend, BackendName: l.BackendName,
		Start: start.UTC(), Width: time.Duration(l.WidthNs)}
	return nil
}

// declareNames takes a names line.
func (d *liveDecoder) declareNames(l NamesLine) error {
	if uint64(l.First)+uint64(len(l.Names)) > MaxLiveNames {
		return fmt.Errorf("name ids %d to %d over %d", l.First, uint64(l.First)+uint64(len(l.Names))-1, MaxLiveNames-1)
	}
	if d.names == nil {
		d.names = map[uint32]string{}
	}
	for i, k := range l.Names {
		d.names[l.First+uint32(i)] = k
	}
	return nil
}

// name is the counter name of id; -1 is "" when none is allowed.
func (d *liveDecoder) name(id int64, none bool) (string, error) {
	if id == -1 && none {
		return "", nil
	}
	k, ok := d.names[uint32(id)]
	if id < 0 || id >= MaxLiveNames || !ok {
		return "", fmt.Errorf("counter %d: %w", id, errUndeclared)
	}
	return k, nil
}

func (d *liveDecoder) seriesOf(id uint32) (Series, error) {
	s, ok := d.series[id]
	if !ok {
		return Series{}, fmt.Errorf("series %d: %w", id, errUndeclared)
	}
	return s, nil
}

// decodeArray decodes a compact bucket or sample line; known is false for
// an array of a kind this reader does not know.
func (d *liveDecoder) decodeArray(b []byte) (l LiveLine, known bool, err error) {
	if rb, ok := d.fastBucket(b); ok {
		l.Bucket, err = d.buildBucket(rb)
		return l, err == nil, err
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return l, false, err
	}
	var kind string
	if len(raw) == 0 || json.Unmarshal(raw[0], &kind) != nil {
		return l, false, errors.New("an array line without a kind")
	}
	switch kind {
	case compactBucket:
		l.Bucket, err = d.bucket(raw)
	case compactSample:
		l.Sample, err = d.sample(raw)
	default:
		return l, false, nil
	}
	return l, err == nil, err
}

// fields decodes raw[i] into dst[i] for each dst; raw must have between
// need and len(dst) elements.
func fields(raw []json.RawMessage, need int, dst ...any) error {
	if len(raw) < need || len(raw) > len(dst) {
		return fmt.Errorf("%d fields, want %d to %d", len(raw), need, len(dst))
	}
	for i := 1; i < len(raw); i++ {
		if err := json.Unmarshal(raw[i], dst[i]); err != nil {
			return fmt.Errorf("field %d: %w", i, err)
		}
	}
	return nil
}

// rawBucket is a compact bucket line's fields as read, before they are
// checked against the declarations.
type rawBucket struct {
	sid, index uint32
	pairs      []uint64
	lat        []int64
	// tail holds unsent, samples_dropped and the latency count, as many
	// as the line has.
	tail []uint64
}

func (d *liveDecoder) bucket(raw []json.RawMessage) (*BucketLine, error) {
	var rb rawBucket
	var unsent, dropped, count uint64
	if err := fields(raw, 5, nil, &rb.sid, &rb.index, &rb.pairs, &rb.lat, &unsent, &dropped, &count); err != nil {
		return nil, fmt.Errorf("bucket line: %w", err)
	}
	rb.tail = []uint64{unsent, dropped, count}[:len(raw)-5]
	return d.buildBucket(rb)
}

// buildBucket checks a bucket line's fields against the declarations and
// makes its BucketLine.
func (d *liveDecoder) buildBucket(rb rawBucket) (*BucketLine, error) {
	s, err := d.seriesOf(rb.sid)
	if err != nil {
		return nil, err
	}
	if len(rb.pairs)%2 != 0 || (len(rb.lat) != 0 && len(rb.lat) != 3) {
		return nil, fmt.Errorf("bucket line: %d counter fields, %d latency fields", len(rb.pairs), len(rb.lat))
	}
	l := s.Bucket(rb.index)
	l.Counters = make(map[string]uint64, len(rb.pairs)/2)
	for i := 0; i < len(rb.pairs); i += 2 {
		k, err := d.name(int64(min(rb.pairs[i], MaxLiveNames)), false)
		if err != nil {
			return nil, err
		}
		if _, dup := l.Counters[k]; dup {
			return nil, fmt.Errorf("bucket line: counter %s twice", k)
		}
		l.Counters[k] = rb.pairs[i+1]
	}
	if len(rb.lat) == 3 {
		l.Latency.P50, l.Latency.P99, l.Latency.Max = rb.lat[0], rb.lat[1], rb.lat[2]
	}
	l.Latency.Count = l.Counters[HTTP2xx]
	if len(rb.tail) > 0 {
		l.Unsent = rb.tail[0]
	}
	if len(rb.tail) > 1 {
		l.SamplesDropped = rb.tail[1]
	}
	if len(rb.tail) > 2 {
		l.Latency.Count = rb.tail[2]
	}
	return &l, nil
}

// fastBucket reads a bucket line as the writer writes it (no white space,
// integers only) without encoding/json, which a reader of a million
// buckets notices; ok is false for anything else, which the general path
// then reads (or refuses). Its slices are the decoder's scratch.
func (d *liveDecoder) fastBucket(b []byte) (rb rawBucket, ok bool) {
	p := numScanner{b: b}
	if !p.lit(`["b",`) {
		return rb, false
	}
	sid, ok1 := p.uint(math.MaxUint32)
	ok2 := p.lit(",")
	index, ok3 := p.uint(math.MaxUint32)
	if !ok1 || !ok2 || !ok3 || !p.lit(",[") {
		return rb, false
	}
	rb.sid, rb.index = uint32(sid), uint32(index)
	rb.pairs, rb.lat, rb.tail = d.pairs[:0], d.lat[:0], d.tail[:0]
	for !p.lit("]") {
		if len(rb.pairs) > 0 && !p.lit(",") {
			return rb, false
		}
		v, ok := p.uint(math.MaxUint64)
		if !ok {
			return rb, false
		}
		rb.pairs = append(rb.pairs, v)
	}
	if !p.lit(",[") {
		return rb, false
	}
	for !p.lit("]") {
		if len(rb.lat) > 0 && !p.lit(",") {
			return rb, false
		}
		v, ok := p.int()
		if !ok {
			return rb, false
		}
		rb.lat = append(rb.lat, v)
	}
	for len(rb.tail) < 3 && p.lit(",") {
		v, ok := p.uint(math.MaxUint64)
		if !ok {
			return rb, false
		}
		rb.tail = append(rb.tail, v)
	}
	d.pairs, d.lat, d.tail = rb.pairs, rb.lat, rb.tail
	return rb, p.lit("]") && p.i == len(b)
}

// numScanner reads the few tokens of a compact bucket line.
type numScanner struct {
	b []byte
	i int
}

// lit consumes s if it comes next.
func (p *numScanner) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// uint reads a JSON integer of no sign, at most most: "0", or digits
// that do not start with 0.
func (p *numScanner) uint(most uint64) (uint64, bool) {
	start := p.i
	var v uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if v > (most-d)/10 {
			return 0, false
		}
		v = v*10 + d
		p.i++
	}
	n := p.i - start
	if n == 0 || (n > 1 && p.b[start] == '0') {
		return 0, false
	}
	// A fraction or an exponent is for the general path to refuse.
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	return v, true
}

// int reads a JSON integer that fits in an int64.
func (p *numScanner) int() (int64, bool) {
	if p.lit("-") {
		v, ok := p.uint(1 << 63)
		return -int64(v), ok && v > 0 // "-0" is for the general path
	}
	v, ok := p.uint(math.MaxInt64)
	return int64(v), ok
}

func (d *liveDecoder) sample(raw []json.RawMessage) (*SampleLine, error) {
	var sid uint32
	var due, outcome, class, reason, phase, age, lat int64
	var status int
	var remote string
	var reqs uint64
	var bucket uint32
	if err := fields(raw, 11, nil, &sid, &due, &outcome, &class, &reason, &phase, &status, &remote, &age, &reqs, &bucket, &lat); err != nil {
		return nil, fmt.Errorf("sample line: %w", err)
	}
	if len(raw) == 12 {
		return nil, errors.New("sample line: a bucket without its latency")
	}
	s, err := d.seriesOf(sid)
	if err != nil {
		return nil, err
	}
	l := s.Sample(due, outcome)
	if len(raw) == 13 {
		l.Bucket, l.LatencyNs = bucket, lat
	}
	// -1 is a class the engine never leaves empty, written as it came.
	if l.Class, err = d.name(class, true); err != nil {
		return nil, err
	}
	if l.Reason, err = d.name(reason, true); err != nil {
		return nil, err
	}
	if l.Phase, err = d.name(phase, true); err != nil {
		return nil, err
	}
	l.Status, l.Remote, l.ConnAgeMs, l.ConnRequests = status, remote, age, reqs
	return &l, nil
}
