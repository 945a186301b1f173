package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func testSeries() Series {
	return Series{Label: "s/t", Backend: "127.0.0.1:1", BackendName: "node-a",
		Start: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Width: time.Second}
}

func testBucket(s Series, i uint32, ok, fails uint64) BucketLine {
	b := s.Bucket(i)
	b.Counters = map[string]uint64{HTTP2xx: ok}
	if fails > 0 {
		b.Counters[HTTP5xx] = fails
	}
	b.Latency = BucketLatency{Count: ok, P50: 1000, P99: 2000, Max: 3000}
	return b
}

// TestLiveAppendAndRead: a head, buckets and samples appended in batches
// read back as the lines the series make, and a batch whose write failed
// part way is cut away: the next one is whole (its declarations written
// again) and no fragment is left to skip.
func TestLiveAppendAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.live.jsonl")
	w, err := OpenLive(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := testSeries()
	head := HeadLine{Type: LineHead, RunID: "r1", MadeBy: &MadeBy{}}
	due, out := int64(1500*time.Millisecond), int64(1600*time.Millisecond)
	smp := s.Sample(due, out)
	smp.Class, smp.Status = HTTP5xx, 503
	if err := w.Append(HeadEntry(head), BucketEntry(s, testBucket(s, 0, 5, 0))); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(BucketEntry(s, testBucket(s, 1, 4, 1)), SampleEntry(s, due, out, smp)); err != nil {
		t.Fatal(err)
	}
	// A second series: its declaration and its first bucket are torn.
	s2 := s
	s2.Backend = "127.0.0.1:2"
	w.w.f = &failingFile{streamFile: w.w.f, writeKeeps: 30}
	err = w.Append(BucketEntry(s2, testBucket(s2, 0, 5, 0)))
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), "live record "+path) {
		t.Fatalf("failing Append = %v, want the injected error naming the live record", err)
	}
	w.w.f.(*failingFile).writeKeeps = -1
	if err := w.Append(BucketEntry(s2, testBucket(s2, 0, 5, 0)), BucketEntry(s, testBucket(s, 2, 5, 0))); err != nil {
		t.Fatal(err)
	}
	lv := readLiveFile(t, path)
	head.Form = LiveForm
	if d := cmp.Diff([]HeadLine{head}, lv.Heads); d != "" {
		t.Errorf("heads (-want +got):\n%s", d)
	}
	want := []BucketLine{testBucket(s, 0, 5, 0), testBucket(s, 1, 4, 1), testBucket(s2, 0, 5, 0), testBucket(s, 2, 5, 0)}
	if d := cmp.Diff(want, lv.Buckets); d != "" {
		t.Errorf("buckets (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]SampleLine{smp}, lv.Samples); d != "" {
		t.Errorf("samples (-want +got):\n%s", d)
	}
	if len(lv.Skipped) != 0 {
		t.Errorf("skipped lines %v, want none: the torn batch is cut away", lv.Skipped)
	}
	if err := CheckSamples(lv.Buckets[:2], lv.Samples); err != nil {
		t.Error(err)
	}
}

func readLiveFile(t *testing.T, path string) *Live {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lv, err := ReadLive(f)
	if err != nil {
		t.Fatal(err)
	}
	return lv
}

// TestReadLiveTolerates: a torn last line, garbage, lines without a type
// or with missing identity, and a line over the cap are skipped with
// their numbers; a type of a later writer is set apart; the rest is read.
func TestReadLiveTolerates(t *testing.T) {
	s := testSeries()
	b0, _ := json.Marshal(testBucket(s, 0, 1, 0))
	b1, _ := json.Marshal(testBucket(s, 1, 1, 0))
	in := strings.Join([]string{
		string(b0),
		`not json`,
		`{"label":"x"}`,
		`{"type":"bucket","index":3}`,
		`{"type":"roll","at":"x"}`,
		`{"type":"bucket","label":"s/t","backend":"b","index":"x"}`,
		`{"type":"sample","label":"s/t","backend":"b","bucket":1,"counters":` + strings.Repeat(" ", 500) + `{}}`,
		"",
		string(b1),
		`{"type":"bucket","label":"s/t","back`,
	}, "\n")
	lv, err := readLive(strings.NewReader(in), 1<<20, 400)
	if err != nil {
		t.Fatal(err)
	}
	if len(lv.Buckets) != 2 || lv.Buckets[1].Index != 1 {
		t.Errorf("buckets %+v, want 0 and 1", lv.Buckets)
	}
	if d := cmp.Diff([]int{2, 3, 4, 6, 7, 10}, lv.Skipped); d != "" {
		t.Errorf("skipped (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{5}, lv.Unknown); d != "" {
		t.Errorf("unknown (-want +got):\n%s", d)
	}
	if lv.Lines != 2 {
		t.Errorf("lines %d, want 2", lv.Lines)
	}
	if _, err := readLive(bytes.NewReader(bytes.Repeat([]byte(string(b0)+"\n"), 10)), 100, 1000); err == nil || !strings.Contains(err.Error(), "ScanLive") {
		t.Errorf("over the file cap: %v, want an error that points at ScanLive", err)
	}
}

func FuzzReadLive(f *testing.F) {
	s := testSeries()
	b, _ := json.Marshal(testBucket(s, 0, 3, 1))
	smp, _ := json.Marshal(s.Sample(10, 20))
	h, _ := json.Marshal(HeadLine{Type: LineHead, RunID: "r"})
	f.Add(string(h) + "\n" + string(b) + "\n" + string(smp) + "\n")
	f.Add(string(b) + "\n" + string(b[:len(b)/2]))
	f.Add(`{"type":"bucket","label":"a","backend":"b","counters":{"x":-1}}`)
	f.Add("\n\n{}\n[]\nnull\n")
	// The compact form, whole and torn.
	var enc liveEncoder
	smpl := s.Sample(10, 20)
	smpl.Class = HTTP5xx
	compact, _ := enc.encode(nil, []LiveEntry{HeadEntry(HeadLine{RunID: "r"}), BucketEntry(s, testBucket(s, 0, 3, 1)), SampleEntry(s, 10, 20, smpl)})
	f.Add(string(compact))
	f.Add(string(compact[:len(compact)-9]))
	f.Add(`{"type":"names","first":0,"names":["x"]}` + "\n" + `["b",0,0,[0,1],[]]` + "\n" + `["s",0,1,2,0,-1,-1,0,"",0,0,9,9]`)
	f.Fuzz(func(t *testing.T, in string) {
		lv, err := readLive(strings.NewReader(in), 1<<16, 1<<12)
		if err != nil {
			return
		}
		if got := len(lv.Heads) + len(lv.Buckets) + len(lv.Samples); got != lv.Lines {
			t.Fatalf("%d lines kept, %d counted", got, lv.Lines)
		}
		for _, l := range lv.Buckets {
			if l.Label == "" || l.Backend == "" {
				t.Fatalf("bucket line without identity kept: %+v", l)
			}
		}
		// What was read writes back and reads again the same.
		var buf bytes.Buffer
		for _, l := range lv.Buckets {
			out, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(append(out, '\n'))
		}
		again, err := readLive(&buf, 1<<20, 1<<16)
		if err != nil || !cmp.Equal(again.Buckets, lv.Buckets) {
			t.Fatalf("bucket lines do not round-trip: %v", err)
		}
	})
}

// TestDecodeLiveFirstFormBucket: a line that begins as a bucket line is
// decoded in one pass, and read exactly as the general path reads it: a
// later "type" key wins, a bucket without a backend is skipped.
func TestDecodeLiveFirstFormBucket(t *testing.T) {
	b := testSeries().Bucket(3)
	b.Counters = map[string]uint64{HTTP2xx: 9, HTTP5xx: 1}
	b.Latency = BucketLatency{Count: 9, P50: 1000, P99: 2000, Max: 3000}
	line, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(line, bucketPrefix) {
		t.Fatalf("a bucket line does not begin with %s: %s", bucketPrefix, line)
	}
	relabelled := bytes.Replace(line, []byte(`"index"`), []byte(`"type":"sample","bucket":3,"due":"x","index"`), 1)
	noBackend := bytes.Replace(line, []byte(`"backend":"127.0.0.1:1",`), nil, 1)
	in := bytes.Join([][]byte{line, relabelled, noBackend, []byte(`{"type":"bucket",garbage`)}, []byte("\n"))
	var got []LiveLine
	sc, err := ScanLive(bytes.NewReader(in), func(l LiveLine) error { got = append(got, l); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Bucket == nil || got[1].Sample == nil {
		t.Fatalf("read %+v, want the bucket, then the line whose last type is sample as a sample", got)
	}
	if diff := cmp.Diff(b, *got[0].Bucket); diff != "" {
		t.Errorf("bucket (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{3, 4}, sc.Skipped); diff != "" {
		t.Errorf("skipped lines (-want +got):\n%s", diff)
	}
}
