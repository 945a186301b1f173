package record

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// formSeries is testSeries with a start that is not a whole millisecond,
// where the first form's times and offsets round.
func formSeries() Series {
	s := testSeries()
	s.Start = s.Start.Add(123456789)
	return s
}

// formLines are the lines of testdata/live-form1.jsonl, a live record
// written by the first form's writer (a head, two buckets, two samples and
// a torn last line).
func formLines() (HeadLine, []BucketLine, []SampleLine, []int64) {
	s := formSeries()
	b1 := testBucket(s, 1, 57, 2)
	b1.Counters[LateSends] = 3
	b1.Unsent = 1
	due1, out1 := int64(1500*time.Millisecond+777), int64(1600*time.Millisecond+999)
	smp1 := s.Sample(due1, out1)
	smp1.Class, smp1.Status, smp1.Remote, smp1.ConnAgeMs, smp1.ConnRequests = HTTP5xx, 503, "10.244.2.9:8080", 41000, 612
	due2, out2 := int64(1700*time.Millisecond), int64(1750*time.Millisecond)
	smp2 := s.Sample(due2, out2)
	smp2.Class, smp2.Reason, smp2.Phase, smp2.Remote = StreamResets, StreamResetsPrefix+ReasonConnectionTermination, ResetsBeforeHeaders, "10.244.2.9:8080"
	return HeadLine{Type: LineHead, RunID: "r1", MadeBy: &MadeBy{}},
		[]BucketLine{testBucket(s, 0, 60, 0), b1}, []SampleLine{smp1, smp2}, []int64{due1, out1, due2, out2}
}

// TestReadLiveFirstForm: a record of the first form, as its writer left it
// on disk, reads as it always did.
func TestReadLiveFirstForm(t *testing.T) {
	head, buckets, samples, _ := formLines()
	lv := readLiveFile(t, filepath.Join("testdata", "live-form1.jsonl"))
	if d := cmp.Diff([]HeadLine{head}, lv.Heads); d != "" {
		t.Errorf("heads (-want +got):\n%s", d)
	}
	if d := cmp.Diff(buckets, lv.Buckets); d != "" {
		t.Errorf("buckets (-want +got):\n%s", d)
	}
	if d := cmp.Diff(samples, lv.Samples); d != "" {
		t.Errorf("samples (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{6}, lv.Skipped); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}
}

// TestLiveBothForms: a compact run appended to a file of the first form
// (a newer driver given the same --live-record) is read after it, line
// for line the same as the first form's lines, and the first run's torn
// line stays one skipped line.
func TestLiveBothForms(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "live-form1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "live.jsonl")
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	head, buckets, samples, offs := formLines()
	w, err := OpenLive(path)
	if err != nil {
		t.Fatal(err)
	}
	s := formSeries()
	head2 := HeadLine{RunID: "r2"}
	err = w.Append(HeadEntry(head2), BucketEntry(s, buckets[0]), BucketEntry(s, buckets[1]),
		SampleEntry(s, offs[0], offs[1], samples[0]), SampleEntry(s, offs[2], offs[3], samples[1]))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	lv := readLiveFile(t, path)
	head2.Type, head2.Form = LineHead, LiveForm
	if d := cmp.Diff([]HeadLine{head, head2}, lv.Heads); d != "" {
		t.Errorf("heads (-want +got):\n%s", d)
	}
	if d := cmp.Diff(append(buckets, buckets...), lv.Buckets); d != "" {
		t.Errorf("buckets (-want +got):\n%s", d)
	}
	if d := cmp.Diff(append(samples, samples...), lv.Samples); d != "" {
		t.Errorf("samples (-want +got):\n%s", d)
	}
	if len(lv.Skipped) != 1 || len(lv.Unknown) != 0 {
		t.Errorf("skipped %v, unknown %v; want the first run's torn line only", lv.Skipped, lv.Unknown)
	}
}

// TestLiveCompactRoundTrip: what the compact form leaves out or writes
// only when it is not the default comes back as it was given.
func TestLiveCompactRoundTrip(t *testing.T) {
	s := formSeries()
	odd := Series{Label: `mesh/"quoted"\svc <&>`, Backend: "[::1]:8443", Start: time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.FixedZone("x", 3600)), Width: 1500 * time.Microsecond}
	bk := func(s Series, i uint32, f func(*BucketLine)) BucketLine {
		b := testBucket(s, i, 10, 0)
		f(&b)
		return b
	}
	buckets := []struct {
		s Series
		l BucketLine
	}{
		{s, bk(s, 0, func(*BucketLine) {})},
		{s, bk(s, 1, func(b *BucketLine) { b.Counters = map[string]uint64{}; b.Latency = BucketLatency{} })},
		{s, bk(s, 2, func(b *BucketLine) { b.Unsent = 7 })},
		{s, bk(s, 3, func(b *BucketLine) { b.SamplesDropped = 3; b.Counters[PoolOverflow] = 3 })},
		{s, bk(s, 4, func(b *BucketLine) { b.Latency.Count = 9 })},
		{s, bk(s, 5, func(b *BucketLine) { b.Latency.Count = 0 })},
		{s, bk(s, 6, func(b *BucketLine) { b.Counters["benchmark.new_kind"] = 1<<64 - 1 })},
		{odd, bk(odd, 1<<32-1, func(b *BucketLine) { b.Latency = BucketLatency{Count: 10, P50: -1, Max: 1<<63 - 1} })},
	}
	type smp struct {
		s         Series
		due, out  int64
		edit      func(*SampleLine)
		wantExtra bool
	}
	samples := []smp{
		{s, 1500, 2500, func(l *SampleLine) { l.Class = HTTP4xx; l.Status = 429 }, false},
		{s, 1500, 2500, func(l *SampleLine) {
			l.Class = StreamResets
			l.Reason = StreamResetsPrefix + ReasonConnectionTermination
			l.Phase = ResetsIncompleteBody
		}, false},
		{s, 1500, 2500, func(l *SampleLine) { l.Class = PoolOverflow; l.Bucket = 9; l.LatencyNs = 1 }, true},
		{odd, -5, -1, func(l *SampleLine) { l.Class = "benchmark.\u00e9"; l.Remote = "\x00\"" }, false},
	}
	var entries []LiveEntry
	var wantB []BucketLine
	var wantS []SampleLine
	for _, b := range buckets {
		entries = append(entries, BucketEntry(b.s, b.l))
		want := b.l
		for k, v := range want.Counters {
			if v == 0 {
				delete(want.Counters, k)
			}
		}
		wantB = append(wantB, want)
	}
	for _, c := range samples {
		l := c.s.Sample(c.due, c.out)
		c.edit(&l)
		entries = append(entries, SampleEntry(c.s, c.due, c.out, l))
		wantS = append(wantS, l)
	}
	var enc liveEncoder
	buf, err := enc.encode(nil, entries)
	if err != nil {
		t.Fatal(err)
	}
	lv, err := ReadLive(bytes.NewReader(buf))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantB, lv.Buckets); d != "" {
		t.Errorf("buckets (-want +got):\n%s\n%s", d, buf)
	}
	if d := cmp.Diff(wantS, lv.Samples); d != "" {
		t.Errorf("samples (-want +got):\n%s\n%s", d, buf)
	}
	if len(lv.Skipped)+len(lv.Unknown) > 0 {
		t.Errorf("skipped %v, unknown %v\n%s", lv.Skipped, lv.Unknown, buf)
	}
	// Each series and each name is declared once.
	if n := strings.Count(string(buf), `"type":"series"`); n != 2 {
		t.Errorf("%d series lines, want 2\n%s", n, buf)
	}
}

// TestLiveCompactSkipsBadLines: compact lines that name an id no
// declaration gave (or gave before the run's head), or that do not have
// their fields, are skipped with their numbers; a kind of a later writer
// is set apart; the rest is read.
func TestLiveCompactSkipsBadLines(t *testing.T) {
	in := strings.Join([]string{
		`{"type":"series","id":0,"label":"s/t","backend":"b","start":"2026-01-02T03:04:05.5Z","width_ns":1000000000}`,
		`{"type":"names","first":0,"names":["benchmark.http_2xx","benchmark.http_5xx"]}`,
		`["b",0,0,[0,5],[1,2,3]]`,        // 3: read
		`["b",1,0,[0,5],[1,2,3]]`,        // 4: series 1 undeclared
		`["b",0,1,[7,5],[1,2,3]]`,        // 5: name 7 undeclared
		`["b",0,1,[0,5,0,6],[]]`,         // 6: a counter twice
		`["b",0,1,[0],[]]`,               // 7: a counter without a count
		`["b",0,1,[0,5],[1,2]]`,          // 8: two latency fields
		`["b",0,1,[0,5],[],0,0,0,0]`,     // 9: too many fields
		`["b",0,1,[0,-5],[]]`,            // 10: a negative count
		`["s",0,1,2,0,-1,-1,0,"",0,0,3]`, // 11: a bucket without latency
		`["s",0,1,2,1,-2,-1,0,"",0,0]`,   // 12: reason -2
		`["x",1]`,                        // 13: a later kind
		`[]`,                             // 14
		`{"type":"series","id":70000,"label":"s/t","backend":"b","start":"2026-01-02T03:04:05Z","width_ns":1}`, // 15
		`{"type":"series","id":2,"label":"s/t","backend":"b","start":"yesterday","width_ns":1}`,                // 16
		`{"type":"names","first":1020,"names":["a","b","c","d","e"]}`,                                          // 17
		`["s",0,1,2,1,-1,-1,503,"10.0.0.1:80",4,5]`,                                                            // 18: read
		`{"type":"head","run_id":"r2","form":2}`,
		`["b",0,2,[0,5],[]]`, // 20: the head forgot series 0
		`["b",0,3,[0,5],[1,2,3`,
	}, "\n")
	lv, err := ReadLive(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int{4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15, 16, 17, 20, 21}, lv.Skipped); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{13}, lv.Unknown); d != "" {
		t.Errorf("unknown (-want +got):\n%s", d)
	}
	if len(lv.Buckets) != 1 || len(lv.Samples) != 1 || lv.Declarations != 2 {
		t.Fatalf("read %d buckets, %d samples, %d declarations; want 1, 1, 2", len(lv.Buckets), len(lv.Samples), lv.Declarations)
	}
	want := BucketLine{Type: LineBucket, Label: "s/t", Backend: "b", Start: "2026-01-02T03:04:05.500Z", WidthMs: 1000,
		Counters: map[string]uint64{HTTP2xx: 5}, Latency: BucketLatency{Count: 5, P50: 1, P99: 2, Max: 3}}
	if d := cmp.Diff(want, lv.Buckets[0]); d != "" {
		t.Errorf("bucket (-want +got):\n%s", d)
	}
	if got := lv.Samples[0]; got.Class != HTTP5xx || got.Status != 503 || got.Due != "2026-01-02T03:04:05.500Z" || got.LatencyNs != 1 {
		t.Errorf("sample %+v", got)
	}
}

// TestLiveCompactSize: a clean bucket of the reference soak takes a small
// fraction of its first-form line, declarations included.
func TestLiveCompactSize(t *testing.T) {
	series := refSeries()
	var first int
	var entries []LiveEntry
	for i := range uint32(600) {
		for _, s := range series {
			b := refBucket(s, i)
			l, _ := json.Marshal(b)
			first += len(l) + 1
			entries = append(entries, BucketEntry(s, b))
		}
	}
	var enc liveEncoder
	buf, err := enc.encode(nil, entries)
	if err != nil {
		t.Fatal(err)
	}
	n := len(entries)
	t.Logf("%d buckets: first form %.1f bytes a bucket, compact %.1f", n, float64(first)/float64(n), float64(len(buf))/float64(n))
	if len(buf)*4 > first {
		t.Errorf("compact form %d bytes for %d in the first form: more than a quarter", len(buf), first)
	}
	// The reader's fast path takes every bucket line the writer writes.
	var d liveDecoder
	for _, line := range bytes.Split(buf, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(`["b"`)) {
			if _, ok := d.fastBucket(line); !ok {
				t.Fatalf("the fast path leaves %s to the general one", line)
			}
		}
	}
}

// FuzzLiveCompactRoundTrip: whatever a bucket and a sample hold, the
// compact form gives back the lines the first form would have written.
func FuzzLiveCompactRoundTrip(f *testing.F) {
	f.Add("mesh/svc-1", "10.0.0.1:8443", "node-a", HTTP2xx, int64(1_000_000), int64(0), uint32(3), uint64(60), uint64(0), int64(1), int64(2), int64(3), int64(1500), int64(2500), 503, uint32(1))
	f.Add("a\"b", "\u2028", "", "benchmark.\x00", int64(-1), int64(-5), uint32(1<<31), uint64(1<<63), uint64(5), int64(-9), int64(0), int64(0), int64(-7), int64(7), -1, uint32(0))
	f.Add("s/t", "b", "", "", int64(1), int64(0), uint32(0), uint64(1), uint64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, uint32(0))
	f.Fuzz(func(t *testing.T, label, backend, name, counter string, width, startNs int64, index uint32, n, unsent uint64,
		p50, p99, maxNs, due, out int64, status int, bucket uint32) {
		if label == "" || backend == "" || !utf8Valid(label, backend, name, counter) {
			return // the reader refuses these in either form; the driver never writes them
		}
		s := Series{Label: label, Backend: backend, BackendName: name, Start: time.Unix(0, startNs).UTC(), Width: time.Duration(max(width, 0))}
		b := s.Bucket(index)
		b.Counters = map[string]uint64{counter: n}
		if n == 0 {
			b.Counters = map[string]uint64{}
		}
		b.Unsent, b.SamplesDropped = unsent, unsent/2
		b.Latency = BucketLatency{Count: n / 3, P50: p50, P99: p99, Max: maxNs}
		l := s.Sample(due, out)
		l.Class, l.Reason, l.Status, l.Remote, l.Bucket = counter, name, status, backend, bucket
		var enc liveEncoder
		buf, err := enc.encode(nil, []LiveEntry{HeadEntry(HeadLine{RunID: label}), BucketEntry(s, b), SampleEntry(s, due, out, l)})
		if err != nil {
			t.Fatal(err)
		}
		lv, err := ReadLive(bytes.NewReader(buf))
		if err != nil {
			t.Fatal(err)
		}
		if len(lv.Skipped) > 0 || len(lv.Buckets) != 1 || len(lv.Samples) != 1 {
			t.Fatalf("read %d buckets, %d samples, skipped %v of\n%s", len(lv.Buckets), len(lv.Samples), lv.Skipped, buf)
		}
		if d := cmp.Diff(b, lv.Buckets[0]); d != "" {
			t.Fatalf("bucket (-want +got):\n%s\n%s", d, buf)
		}
		if d := cmp.Diff(l, lv.Samples[0]); d != "" {
			t.Fatalf("sample (-want +got):\n%s\n%s", d, buf)
		}
	})
}

func utf8Valid(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// FuzzFastBucket: the fast path reads a bucket line exactly as the general
// one does, or leaves it to it.
func FuzzFastBucket(f *testing.F) {
	for _, s := range []string{`["b",0,30599,[0,60,1,2],[1523456,4523456,5523456]]`, `["b",1,2,[],[]]`, `["b",1,2,[0,5],[-1,0,9223372036854775807],7,0,3]`,
		`["b",4294967295,0,[18446744073709551615,1],[]]`, `["b",4294967296,0,[],[]]`, `["b",01,0,[],[]]`, `["b",1,0,[1.0],[]]`, `["b",1,0,[],[-0]]`,
		`["b",1,0,[],[],1,2,3,4]`, `["b", 1,0,[],[]]`, `["b",1,0,null,[]]`, `["b",1,0,[],[-9223372036854775808]]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var d liveDecoder
		fast, ok := d.fastBucket([]byte(line))
		if !ok {
			return
		}
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatalf("fast path read %q, which is not JSON: %v", line, err)
		}
		var slow rawBucket
		var unsent, dropped, count uint64
		if err := fields(raw, 5, nil, &slow.sid, &slow.index, &slow.pairs, &slow.lat, &unsent, &dropped, &count); err != nil {
			t.Fatalf("fast path read %q, which the general path refuses: %v", line, err)
		}
		slow.tail = []uint64{unsent, dropped, count}[:len(raw)-5]
		norm := func(r rawBucket) rawBucket {
			r.pairs, r.lat, r.tail = append([]uint64{}, r.pairs...), append([]int64{}, r.lat...), append([]uint64{}, r.tail...)
			return r
		}
		if d := cmp.Diff(norm(slow), norm(fast), cmp.AllowUnexported(rawBucket{})); d != "" {
			t.Fatalf("%q: fast path (-general +fast):\n%s", line, d)
		}
	})
}
