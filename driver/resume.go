package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// A run survives its driver. Before its first dispatch the driver writes
// the run manifest next to the report (record.Manifest): the run id, the
// plan's digest, the backends as resolved, and per stage the shared start
// time and every execution id. The engines run an execution to its end
// whatever became of its stream and keep its result and timeline for a
// while. A driver started again on the same report (--resume, or by itself
// when the manifest says the run is unfinished) follows each dispatched
// execution again with the engine's Attach RPC, from where its live record
// ends, and goes on with the stages not yet dispatched: one run, one
// report, each request counted once. On SIGTERM a driver with a manifest
// detaches (the engines run on); SIGINT cancels as it always did.

// manifestState is the run's manifest and where it is written; the stage
// loop updates it, one stage at a time.
type manifestState struct {
	path string
	mu   sync.Mutex
	m    *record.Manifest
}

// write writes the manifest atomically.
func (s *manifestState) write() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return record.WriteManifest(s.path, s.m)
}

// dispatching records a stage before its executions are dispatched.
func (s *manifestState) dispatching(name string, dispatched, startAt time.Time, calls []*call) error {
	if s == nil {
		return nil
	}
	st := record.ManifestStage{Name: name, Dispatched: dispatched.UTC().Format(record.TimeFormat),
		StartTime: startAt.UTC().Format(record.TimeFormat)}
	for _, c := range calls {
		st.Executions = append(st.Executions, record.ManifestExecution{Label: c.ex.label, Backend: c.backend, ExecutionID: c.id})
	}
	s.mu.Lock()
	s.m.Stages = append(s.m.Stages, st)
	s.mu.Unlock()
	return s.write()
}

// rejoined records, before the rest of execution id's schedule is sent
// to an engine that came back, the rejoin: a driver that dies from then
// on leaves the next one what it needs to follow that engine, and the
// counts of the engine before it, which is gone.
func (s *manifestState) rejoined(id string, rj record.ManifestRejoin) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	x := s.execution(id)
	if x != nil {
		x.Rejoins = append(x.Rejoins, rj)
	}
	s.mu.Unlock()
	if x == nil {
		return fmt.Errorf("the manifest names no execution %s", id)
	}
	return s.write()
}

// unrejoin takes back the last rejoin of execution id, when it is segID:
// its engine never heard of it.
func (s *manifestState) unrejoin(id, segID string) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	x := s.execution(id)
	if x == nil || len(x.Rejoins) == 0 || x.Rejoins[len(x.Rejoins)-1].ExecutionID != segID {
		s.mu.Unlock()
		return nil
	}
	x.Rejoins = x.Rejoins[:len(x.Rejoins)-1]
	s.mu.Unlock()
	return s.write()
}

// execution is the manifest's execution of that id, newest stage first;
// nil for none. s.mu is held.
func (s *manifestState) execution(id string) *record.ManifestExecution {
	for i := len(s.m.Stages) - 1; i >= 0; i-- {
		st := &s.m.Stages[i]
		for j := range st.Executions {
			if st.Executions[j].ExecutionID == id {
				return &st.Executions[j]
			}
		}
	}
	return nil
}

// resumed is what a resuming driver takes over from the one before it:
// the executions already in the results stream, and per execution and
// backend the timeline its live record holds.
type resumed struct {
	// done are the executions the results stream holds, by label.
	done map[string]record.Execution
	// held are the buckets and the count of samples the live record
	// holds, per execution and backend.
	held map[record.SeriesKey]*heldSeries
	// sawHead says the live record holds the run's head line.
	sawHead bool
	// rejoined is the last rejoin of each execution and backend whose
	// engine came back, from the manifest.
	rejoined map[record.SeriesKey]*record.ManifestRejoin
}

// heldSeries is what the live record holds of one execution on one
// backend, in the order it was written, which is the order the engine
// sent it.
type heldSeries struct {
	// buckets and samples are where Attach starts: the lines held, and
	// for an engine that came back, its empty buckets before its offset,
	// which it sent first and the live record does not hold. lines
	// counts the bucket lines.
	buckets, samples, lines uint32
	// seenBuckets and seenSamples count every line of the series read,
	// those of engines before the one followed again too.
	seenBuckets, seenSamples uint32
	// series is the execution's, from its first bucket line.
	series record.Series
	// tl sums the buckets as the call's stream would have (only the
	// out-of-order ones are held, not every line): a call whose engine no
	// longer holds the execution keeps them as its partial result.
	tl *timeline
}

// stageResume is a dispatched stage a resuming driver follows again.
type stageResume struct {
	dispatched, startAt time.Time
	ids                 map[record.SeriesKey]string
	// rejoins are the engines that came back, per execution and backend.
	rejoins map[record.SeriesKey][]record.ManifestRejoin
}

// id is the execution id of label on backend b; empty for none.
func (sr *stageResume) id(label, b string) string {
	if sr == nil {
		return ""
	}
	return sr.ids[record.SeriesKey{Label: label, Backend: b}]
}

// heldName is the backend name the live record gives the execution's
// engine: the name of a backend that is lost before it says Started.
func (r *runner) heldName(label, backend string) string {
	if r.resume == nil || r.resume.held[record.SeriesKey{Label: label, Backend: backend}] == nil {
		return ""
	}
	return r.resume.held[record.SeriesKey{Label: label, Backend: backend}].series.BackendName
}

// stageOf returns the resume of a stage the manifest says was dispatched,
// or nil for a stage to dispatch now.
func (r *runner) stageOf(name string) (*stageResume, error) {
	if r.resume == nil {
		return nil, nil
	}
	ms := r.manifest.m.Stage(name)
	if ms == nil {
		return nil, nil
	}
	d, err := record.ParseTime(ms.Dispatched)
	if err != nil {
		return nil, err
	}
	s, err := record.ParseTime(ms.StartTime)
	if err != nil {
		return nil, err
	}
	sr := &stageResume{dispatched: d, startAt: s, ids: map[record.SeriesKey]string{},
		rejoins: map[record.SeriesKey][]record.ManifestRejoin{}}
	for _, x := range ms.Executions {
		k := record.SeriesKey{Label: x.Label, Backend: x.Backend}
		sr.ids[k] = x.ExecutionID
		if len(x.Rejoins) > 0 {
			sr.rejoins[k] = x.Rejoins
		}
	}
	return sr, nil
}

// loadResumed reads what the previous driver left: the results stream's
// executions of this run (those whose start is one of the manifest's
// dispatches) and the live record's lines after this run's head.
func loadResumed(m *record.Manifest, stream, live string) (*resumed, error) {
	rs := &resumed{done: map[string]record.Execution{}, held: map[record.SeriesKey]*heldSeries{},
		rejoined: map[record.SeriesKey]*record.ManifestRejoin{}}
	dispatched := map[string]bool{}
	for _, st := range m.Stages {
		dispatched[st.Dispatched] = true
		for _, x := range st.Executions {
			if n := len(x.Rejoins); n > 0 {
				rs.rejoined[record.SeriesKey{Label: x.Label, Backend: x.Backend}] = &x.Rejoins[n-1]
			}
		}
	}
	if stream != "" {
		src, err := record.ReadStreamFile(stream)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			// No execution line the reader can take (none finished yet,
			// or only a torn one): every dispatched execution is
			// followed again and appended once it ends.
		default:
			for _, e := range src.All {
				if dispatched[e.StartedAt] {
					rs.done[e.Label] = e.Execution
				}
			}
		}
	}
	if live == "" {
		return rs, nil
	}
	f, err := os.Open(live)
	if errors.Is(err, os.ErrNotExist) {
		return rs, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read live record: %w", err)
	}
	defer f.Close()
	ours := false
	_, err = record.ScanLive(f, func(l record.LiveLine) error {
		switch {
		case l.Head != nil:
			ours = l.Head.RunID == m.RunID
			rs.sawHead = rs.sawHead || ours
		case !ours:
		case l.Bucket != nil:
			if _, ok := rs.done[l.Bucket.Label]; !ok { // a finished one is not followed again
				rs.takeBucket(l.Bucket)
			}
		case l.Sample != nil:
			k := record.SeriesKey{Label: l.Sample.Label, Backend: l.Sample.Backend}
			h := rs.series(k)
			if h.seenSamples++; rs.rejoined[k] == nil || h.seenSamples > rs.rejoined[k].LiveSamplesBefore {
				h.samples++
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("live record %s: %w", live, err)
	}
	return rs, nil
}

// takeBucket takes a bucket line of the live record into its series. Of
// a backend whose engine came back, only the lines of the engine that
// came back last count (those of the engines before it come first, as
// many as its rejoin says): it is the one followed again.
func (rs *resumed) takeBucket(b *record.BucketLine) {
	k := record.SeriesKey{Label: b.Label, Backend: b.Backend}
	h := rs.series(k)
	rj := rs.rejoined[k]
	if h.series.BackendName == "" {
		// The node's name, whichever engine's line gives it.
		h.series.BackendName = b.BackendName
	}
	if h.seenBuckets++; rj != nil && h.seenBuckets <= rj.LiveBucketsBefore {
		return
	}
	if h.tl == nil {
		h.series = seriesOfLine(b)
		h.tl = &timeline{}
		h.tl.start(h.series)
		if rj != nil {
			// The engine that came back sent its empty buckets before
			// its offset first (they were final at its start),
			// unwritten: Attach counts them too.
			q := quietBuckets(time.Duration(rj.OffsetMs)*time.Millisecond, time.Duration(b.WidthMs)*time.Millisecond)
			h.tl.skip(q)
			h.buckets = q
		}
	}
	h.tl.restore(&enginev1.Bucket{Index: b.Index, Counters: b.Counters, Unsent: b.Unsent})
	h.buckets++
	h.lines++
}

// quietBuckets is how many buckets of width begin before off: those of
// an engine that came back at off that hold nothing of it.
func quietBuckets(off, width time.Duration) uint32 {
	if off <= 0 || width <= 0 {
		return 0
	}
	return uint32((off + width - 1) / width)
}

// resumeSegments gives c, a call a resuming driver follows again, the
// engines of its node that came back as the manifest names them: the last
// is followed again (Attach), those before it are gone, and their counts
// are the manifest's.
func resumeSegments(c *call, rejoins []record.ManifestRejoin) {
	for _, rj := range rejoins {
		seg := &call{ex: c.ex, backend: c.backend, addr: rj.Addr, id: rj.ExecutionID, parent: c, startAt: c.startAt,
			offset: time.Duration(rj.OffsetMs) * time.Millisecond, before: rj.Before, gap: rj.Gap,
			joined: true, resumed: true, started: true, backendName: c.backendName,
			bucketsBefore: rj.LiveBucketsBefore, samplesBefore: rj.LiveSamplesBefore}
		seg.tl.quietBefore = seg.offset
		c.segs = append(c.segs, seg)
	}
	if n := len(c.segs); n > 0 {
		c.seg, c.started = c.segs[n-1], true
		c.lostErr = fmt.Errorf("its engine was lost, and an engine of its node came back at %s", c.seg.addr)
	}
}

// finished says whether the driver before this one finished every
// execution of st.
func (rs *resumed) finished(st *stageRun) bool {
	if rs == nil {
		return false
	}
	for _, ex := range st.execs {
		if _, ok := rs.done[ex.label]; !ok {
			return false
		}
	}
	return true
}

// doneExecution is the execution of that label the results stream holds.
func (rs *resumed) doneExecution(label string) (record.Execution, bool) {
	if rs == nil {
		return record.Execution{}, false
	}
	e, ok := rs.done[label]
	return e, ok
}

func (rs *resumed) series(k record.SeriesKey) *heldSeries {
	h := rs.held[k]
	if h == nil {
		h = &heldSeries{}
		rs.held[k] = h
	}
	return h
}

// seriesOfLine is the series a bucket line belongs to.
func seriesOfLine(b *record.BucketLine) record.Series {
	s := record.Series{Label: b.Label, Backend: b.Backend, BackendName: b.BackendName,
		Width: time.Duration(b.WidthMs) * time.Millisecond}
	if start, err := record.ParseTime(b.Start); err == nil {
		s.Start = start.Add(-time.Duration(b.OffsetMs) * time.Millisecond)
	}
	return s
}

// gapOf is the driver's gap a resume closes: from the last sign of the
// driver before (its detach, else the newest write to the run's files)
// to now.
func gapOf(m *record.Manifest, manifestPath string, files []string, now time.Time) record.DriverGap {
	if m.DetachedAt != "" {
		return record.DriverGap{From: m.DetachedAt, To: now.UTC().Format(record.TimeFormat), Why: "detached (SIGTERM)"}
	}
	var last time.Time
	for _, p := range append([]string{manifestPath}, files...) {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
	}
	return record.DriverGap{From: last.UTC().Format(record.TimeFormat), To: now.UTC().Format(record.TimeFormat),
		Why: "the driver stopped without detaching (killed)"}
}

// attach follows a dispatched execution again from what the live record
// holds of it, and reports its events as execute does.
func (r *runner) attach(c *call, events chan<- event) {
	k := record.SeriesKey{Label: c.ex.label, Backend: c.backend}
	h := &heldSeries{}
	if r.resume != nil && r.resume.held[k] != nil {
		h = r.resume.held[k]
	}
	req := &enginev1.AttachRequest{ExecutionId: c.id, RunId: r.runID,
		FromBucket: h.buckets, FromSample: h.samples}
	if r.progressInterval > 0 {
		req.ProgressInterval = durationpb.New(r.progressInterval)
	}
	if h.tl != nil {
		// What the live record holds counts even if the engine no
		// longer holds the execution: its partial result.
		c.tl.adopt(h.tl)
		h.tl = nil
	}
	// Lines the live record held count as written: an engine that comes
	// back after this one has its lines after them.
	c.tl.mu.Lock()
	c.tl.lines, c.tl.samples = h.lines, h.samples
	c.tl.mu.Unlock()
	stream, err := c.client.Attach(c.ctx, req)
	if err != nil {
		events <- event{c: c, kind: evError, err: err}
		return
	}
	r.follow(c, stream, events)
}

// cancelRun is `sortie run --cancel RUNDIR`: it cancels every execution
// the run's manifest names on its engine, and marks the manifest
// cancelled, so that no driver resumes it by itself.
func cancelRun(ctx context.Context, o Options, dir string, stdout io.Writer) error {
	path := filepath.Join(dir, record.ManifestName)
	m, err := record.ReadManifestFile(path)
	if err != nil {
		return cli.Usage(err)
	}
	r := &runner{opts: o, log: o.logger(&lineWriter{w: io.Discard})}
	defer r.close()
	var errs []error
	var lines []string
	for _, st := range m.Stages {
		for _, x := range st.Executions {
			client, err := r.client(x.Backend)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, o.CancelWait)
			resp, err := client.Cancel(cctx, &enginev1.CancelRequest{ExecutionId: x.ExecutionID})
			cancel()
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("cancel %s on %s: %w", x.ExecutionID, x.Backend, err))
			case resp.GetFound():
				lines = append(lines, fmt.Sprintf("CANCELLED %s %s", x.Backend, x.ExecutionID))
			default:
				lines = append(lines, fmt.Sprintf("NOT-RUNNING %s %s", x.Backend, x.ExecutionID))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	m.Cancelled = true
	if err := record.WriteManifest(path, m); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return cli.Fail(err)
	}
	return nil
}
