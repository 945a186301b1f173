package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// refSeries are the 40 series of the reference soak (8 targets on 5
// nodes), with the names a kind cluster gives them.
func refSeries() []Series {
	start := time.Date(2026, 3, 2, 10, 0, 8, 123456789, time.UTC)
	var out []Series
	for t := range 8 {
		for n := range 5 {
			out = append(out, Series{Label: fmt.Sprintf("mesh/svc-%d", t+1), Backend: fmt.Sprintf("10.244.%d.7:8443", n+1),
				BackendName: fmt.Sprintf("sortie-worker%d", n+1), Start: start, Width: time.Second})
		}
	}
	return out
}

// refBucket is a clean bucket of the reference soak: 60 requests, all 2xx,
// a few sent late.
func refBucket(s Series, i uint32) BucketLine {
	b := s.Bucket(i)
	b.Counters = map[string]uint64{HTTP2xx: 60, LateSends: 2}
	b.Latency = BucketLatency{Count: 60, P50: 1523456 + int64(i%97)*1000, P99: 4523456, Max: 5523456 + int64(i%13)}
	return b
}

// The writer's cost, the compact form beside the first (whole JSON
// objects, as the first form's writer encoded them), in one run:
//
//	go test -run - -bench Live ./record/

// appendFirstForm writes lines as the first form's writer did: each one
// json.Marshal'ed, one write and one sync for the batch.
func appendFirstForm(w *LiveWriter, lines ...any) error {
	var buf []byte
	for _, l := range lines {
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		buf = append(append(buf, b...), '\n')
	}
	return w.w.write(buf)
}

// BenchmarkLiveAppendJSONLines appends one second of the reference soak
// (a bucket of each of its 40 series) per op, in the first form.
func BenchmarkLiveAppendJSONLines(b *testing.B) {
	w, err := OpenLive(filepath.Join(b.TempDir(), "live.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	series := refSeries()
	lines := make([]any, len(series))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for k, s := range series {
			lines[k] = refBucket(s, uint32(30000+i))
		}
		if err := appendFirstForm(w, lines...); err != nil {
			b.Fatal(err)
		}
	}
	st, _ := w.w.f.Stat()
	b.ReportMetric(float64(st.Size())/float64(b.N*len(series)), "bytes/bucket")
}

// refSeconds are n seconds of the reference soak's buckets, built before
// an encoding benchmark so that it measures the encoding alone.
func refSeconds(n int) [][]BucketLine {
	series := refSeries()
	out := make([][]BucketLine, n)
	for i := range out {
		for _, s := range series {
			out[i] = append(out[i], refBucket(s, uint32(30000+i)))
		}
	}
	return out
}

// BenchmarkLiveEncodeJSONLines encodes one second of the reference soak in
// the first form, without the write: the writer's own CPU.
func BenchmarkLiveEncodeJSONLines(b *testing.B) {
	secs := refSeconds(64)
	var buf []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = buf[:0]
		for _, l := range secs[i%len(secs)] {
			out, err := json.Marshal(l)
			if err != nil {
				b.Fatal(err)
			}
			buf = append(append(buf, out...), '\n')
		}
	}
	b.ReportMetric(float64(len(buf))/float64(len(secs[0])), "bytes/bucket")
}

// BenchmarkLiveAppend appends one second of the reference soak per op in
// the compact form.
func BenchmarkLiveAppend(b *testing.B) {
	w, err := OpenLive(filepath.Join(b.TempDir(), "live.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	series := refSeries()
	entries := make([]LiveEntry, len(series))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for k, s := range series {
			entries[k] = BucketEntry(s, refBucket(s, uint32(30000+i)))
		}
		if err := w.Append(entries...); err != nil {
			b.Fatal(err)
		}
	}
	st, _ := w.w.f.Stat()
	b.ReportMetric(float64(st.Size())/float64(b.N*len(series)), "bytes/bucket")
}

// BenchmarkLiveEncode encodes one second of the reference soak in the
// compact form, without the write.
func BenchmarkLiveEncode(b *testing.B) {
	secs := refSeconds(64)
	series := refSeries()
	entries := make([][]LiveEntry, len(secs))
	for i, sec := range secs {
		for k, l := range sec {
			entries[i] = append(entries[i], BucketEntry(series[k], l))
		}
	}
	var enc liveEncoder
	var buf []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var err error
		if buf, err = enc.encode(buf[:0], entries[i%len(entries)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf))/float64(len(series)), "bytes/bucket")
}

// liveFile is n seconds of the reference soak as a live record in the
// first form (first) or the compact one.
func liveFile(b *testing.B, n int, first bool) []byte {
	b.Helper()
	var enc liveEncoder
	buf, _ := enc.encode(nil, []LiveEntry{HeadEntry(HeadLine{RunID: "r"})})
	series := refSeries()
	for i := range n {
		for _, s := range series {
			l := refBucket(s, uint32(i))
			if first {
				out, _ := json.Marshal(l)
				buf = append(append(buf, out...), '\n')
				continue
			}
			var err error
			if buf, err = enc.encode(buf, []LiveEntry{BucketEntry(s, l)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return buf
}

func benchScan(b *testing.B, first bool) {
	data := liveFile(b, 100, first)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		n := 0
		if _, err := ScanLive(bytes.NewReader(data), func(l LiveLine) error {
			if l.Bucket != nil {
				n++
			}
			return nil
		}); err != nil || n != 4000 {
			b.Fatalf("read %d buckets: %v", n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*4000), "ns/bucket")
}

// BenchmarkScanLiveJSONLines and BenchmarkScanLive read 100 seconds of
// the reference soak (4,000 buckets) in each form: what the gate pays.
func BenchmarkScanLiveJSONLines(b *testing.B) { benchScan(b, true) }
func BenchmarkScanLive(b *testing.B)          { benchScan(b, false) }
