package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The live record is the file of JSON lines the driver appends while a
// run goes (sortie run --live-record): a head line that says what made
// the run, then every bucket and sample (timeline.go) as the engines send
// them, each batch synced. It is append-only and torn-line safe like the
// results stream; a second run appended to the same file starts with its
// own head line. It has two forms: the first wrote every bucket and
// sample as a whole JSON object (BucketLine, SampleLine); the compact one
// (livecompact.go), which this package writes, declares each series and
// counter name once and writes the lines as short arrays that refer to
// them. ScanLive reads both, and a file that holds runs of both.
//
// # Head line
//
//	type     "head"
//	made_by  the run's made_by block, as in the report
//	run_id   the driver's id of the run (prefix of every execution id)
//	form     2 when the run's lines are in the compact form; absent in
//	         the first form

// LineHead is the type of the live record's head line.
const LineHead = "head"

// MaxLiveLineBytes bounds one line of a live record: a bucket or sample
// line is some hundreds of bytes, a head line holds the plan. A longer
// line is skipped like a torn one, without being held in memory.
const MaxLiveLineBytes = MaxLineBytes

// HeadLine opens a run in the live record.
type HeadLine struct {
	// Type is LineHead.
	Type string `json:"type"`
	// MadeBy says what made the run.
	MadeBy *MadeBy `json:"made_by,omitempty"`
	// RunID is the driver's id of the run.
	RunID string `json:"run_id,omitempty"`
	// Form is LiveForm when the run's lines are in the compact form; 0 in
	// the first form. A reader reads both without it: it says to a
	// person (and to an older reader, which skips the compact lines)
	// what follows.
	Form int `json:"form,omitempty"`
}

// LiveLine is one line of a live record as read: exactly one of Head,
// Bucket and Sample is set, whichever the form. Line is its 1-based line
// number.
type LiveLine struct {
	Head   *HeadLine
	Bucket *BucketLine
	Sample *SampleLine
	Line   int
}

// LiveScan says what ScanLive read besides the lines it handed on.
type LiveScan struct {
	// Lines counts the lines handed on.
	Lines int
	// Declarations counts the compact form's series and names lines,
	// read and not handed on.
	Declarations int
	// Skipped lists the lines that are not a JSON object of a known
	// type with fields of the right types: a torn line (the last one,
	// after a writer died mid-write), garbage, a line over
	// MaxLiveLineBytes, a compact line that names an id no declaration
	// before it gave.
	Skipped []int
	// Unknown lists the lines of a type this reader does not know
	// (written by a later driver); they are skipped too.
	Unknown []int
}

// ScanLive reads a live record line by line and hands each line it can
// read to fn, in file order; it stops at fn's first error and returns it.
// It holds one line at a time, so a record of any size is read in bounded
// memory. Unreadable lines are skipped and named in the LiveScan.
func ScanLive(r io.Reader, fn func(LiveLine) error) (*LiveScan, error) {
	return scanLive(r, MaxLiveLineBytes, fn)
}

func scanLive(r io.Reader, maxLine int, fn func(LiveLine) error) (*LiveScan, error) {
	sc := &LiveScan{}
	var d liveDecoder
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, long, rerr := readLine(br, maxLine)
		if t := bytes.TrimSpace(line); long || len(t) > 0 {
			var l LiveLine
			var known bool
			var err error
			if !long {
				l, known, err = d.decode(t)
			}
			switch {
			case long || err != nil:
				sc.Skipped = append(sc.Skipped, n)
			case !known:
				sc.Unknown = append(sc.Unknown, n)
			case l.Head == nil && l.Bucket == nil && l.Sample == nil:
				sc.Declarations++
			default:
				l.Line = n
				sc.Lines++
				if err := fn(l); err != nil {
					return sc, err
				}
			}
		}
		if rerr == io.EOF {
			return sc, nil
		}
		if rerr != nil {
			return sc, fmt.Errorf("read live record: %w", rerr)
		}
	}
}

// decode decodes one line of either form; known is false for a
// well-formed line of a type this reader does not know. A declaration is
// known and sets none of l's lines.
func (d *liveDecoder) decode(b []byte) (l LiveLine, known bool, err error) {
	if len(b) > 0 && b[0] == '[' {
		return d.decodeArray(b)
	}
	if l, ok, err := decodeFirstFormBucket(b); ok {
		return l, err == nil, err
	}
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return l, false, err
	}
	if head.Type == nil {
		return l, false, errors.New("a line without a type")
	}
	switch *head.Type {
	case LineHead:
		l.Head = &HeadLine{}
		err = json.Unmarshal(b, l.Head)
		d.reset()
	case LineSeries:
		var sl SeriesLine
		if err = json.Unmarshal(b, &sl); err == nil {
			err = d.declareSeries(sl)
		}
	case LineNames:
		var nl NamesLine
		if err = json.Unmarshal(b, &nl); err == nil {
			err = d.declareNames(nl)
		}
	case LineBucket:
		l.Bucket = &BucketLine{}
		err = json.Unmarshal(b, l.Bucket)
		if err == nil && (l.Bucket.Label == "" || l.Bucket.Backend == "") {
			err = errors.New("a bucket line without a label or backend")
		}
	case LineSample:
		l.Sample = &SampleLine{}
		err = json.Unmarshal(b, l.Sample)
		if err == nil && (l.Sample.Label == "" || l.Sample.Backend == "") {
			err = errors.New("a sample line without a label or backend")
		}
	default:
		return l, false, nil
	}
	return l, err == nil, err
}

// bucketPrefix is how the first form's writer began every bucket line.
var bucketPrefix = []byte(`{"type":"bucket",`)

// decodeFirstFormBucket reads a bucket line of the first form in one pass;
// ok is false when b is not one and the general path must read it. Only
// records written before the compact form hold such lines; a line that
// begins as a bucket line is decoded once instead of twice (type, then
// body): a later "type" key wins in encoding/json, so the line's Type
// says whether it really was a bucket line.
func decodeFirstFormBucket(b []byte) (l LiveLine, ok bool, err error) {
	if !bytes.HasPrefix(b, bucketPrefix) {
		return l, false, nil
	}
	var bl BucketLine
	if json.Unmarshal(b, &bl) != nil || bl.Type != LineBucket {
		return l, false, nil
	}
	l.Bucket = &bl
	if bl.Label == "" || bl.Backend == "" {
		return l, true, errors.New("a bucket line without a label or backend")
	}
	return l, true, nil
}

// Live is a whole live record, read into memory by ReadLive.
type Live struct {
	Heads   []HeadLine
	Buckets []BucketLine
	Samples []SampleLine
	LiveScan
}

// ReadLive reads a whole live record of at most MaxReportBytes into
// memory (ScanLive reads a larger one line by line).
func ReadLive(r io.Reader) (*Live, error) {
	return readLive(r, MaxReportBytes, MaxLiveLineBytes)
}

func readLive(r io.Reader, maxFile, maxLine int) (*Live, error) {
	lv := &Live{}
	lr := &io.LimitedReader{R: r, N: int64(maxFile) + 1}
	sc, err := scanLive(lr, maxLine, func(l LiveLine) error {
		switch {
		case l.Head != nil:
			lv.Heads = append(lv.Heads, *l.Head)
		case l.Bucket != nil:
			lv.Buckets = append(lv.Buckets, *l.Bucket)
		case l.Sample != nil:
			lv.Samples = append(lv.Samples, *l.Sample)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("live record larger than %s, the most ReadLive holds; read it with ScanLive", size(maxFile))
	}
	lv.LiveScan = *sc
	return lv, nil
}

// SeriesKey names the lines of one execution on one backend.
type SeriesKey struct{ Label, Backend string }

// BucketsBySeries groups bucket lines by execution and backend, in the
// order they were read.
func BucketsBySeries(lines []BucketLine) map[SeriesKey][]BucketLine {
	out := map[SeriesKey][]BucketLine{}
	for _, l := range lines {
		k := SeriesKey{l.Label, l.Backend}
		out[k] = append(out[k], l)
	}
	return out
}
