// Package saver gets a sortie run's verdict out of the cluster before
// anything is torn down: it waits for the driver's Job to end, saves the Job,
// the driver pod and its log, every engine's log and where the engines ran,
// copies the results stream and the report off the report PVC through a
// short-lived reader pod, and writes SAVED last, only when the report
// parsed. Teardown refuses to run without SAVED.
//
// "Parsed" means read by the record's one reader (record.ReadReport), the
// one the gate grades with: SAVED is never written for a report the gate
// would refuse (an older format without started_at, garbage), and a
// report the gate grades (the older stack's too) is always kept.
//
// The saver never replaces a good copy with a worse one: a copy is accepted
// only when the reader pod Succeeded and its whole log was read, a report
// must parse, and a results stream must extend the copy saved before (it is
// only ever appended to). Every file is written to a temporary name and
// renamed, so an interrupted saver leaves no half-written file; once it has
// started a copy, SIGTERM lets that copy finish (bounded) before it exits.
//
// Save is the core; it takes a kubernetes.Interface and a clock.Clock so
// tests drive it with client-go's fake clientset and a fake clock.
package saver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

// Job states, as the SORTIE_SAVED line names them.
const (
	JobComplete = "complete"
	JobFailed   = "failed"
	JobGone     = "gone"
	// JobActive is a Job still running when the saver gave up waiting.
	JobActive = "active"
)

// Options configure one Save. DefaultOptions fills every field but Dir, Env
// and the writers.
type Options struct {
	// Dir is the run directory the files are written to.
	Dir string
	// Env describes the run (from Dir/run.env).
	Env RunEnv
	// Poll is how often the Job is looked at while it runs.
	Poll time.Duration
	// CopyTimeout bounds how long a reader pod may take to finish.
	CopyTimeout time.Duration
	// ReaderPoll is how often the reader pod is looked at.
	ReaderPoll time.Duration
	// ChunkBytes is the size of the chunks a file is copied in when the
	// reader command is `sortie cat` (chunks.go); 0 copies each file
	// whole through one reader pod.
	ChunkBytes int64
	// DeleteTimeout bounds the wait for an earlier reader pod to go after a
	// plain delete; ForceDeleteTimeout the wait after a forced one (grace
	// period 0). A pod on a node that does not answer is never confirmed
	// deleted by its kubelet, so both are bounded.
	DeleteTimeout      time.Duration
	ForceDeleteTimeout time.Duration
	// OverdueAfter is how long past the planned end a running Job is
	// overdue; OverdueEvery how often SORTIE_OVERDUE repeats after that.
	OverdueAfter time.Duration
	OverdueEvery time.Duration
	// GiveUp is how long past the planned end the saver waits for a running
	// Job before it saves what exists and says the run is incomplete; zero
	// waits as long as the Job runs.
	GiveUp time.Duration
	// Logs reads pod logs; nil reads them through the clientset.
	Logs LogReader
	// Out receives the program's lines (SORTIE_*); nil discards them.
	Out io.Writer
	// Log receives progress and warnings; nil discards them.
	Log *slog.Logger
}

// DefaultOptions returns the defaults the flags start from.
func DefaultOptions() Options {
	return Options{
		Poll:               10 * time.Second,
		CopyTimeout:        3 * time.Minute,
		ReaderPoll:         2 * time.Second,
		ChunkBytes:         DefaultChunkBytes,
		DeleteTimeout:      60 * time.Second,
		ForceDeleteTimeout: 30 * time.Second,
		OverdueAfter:       5 * time.Minute,
		OverdueEvery:       5 * time.Minute,
		GiveUp:             20 * time.Minute,
	}
}

// Validate returns every problem at once.
func (o Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("--dir is required"))
	} else if st, err := os.Stat(o.Dir); err != nil {
		errs = append(errs, fmt.Errorf("--dir: %w", err))
	} else if !st.IsDir() {
		errs = append(errs, fmt.Errorf("--dir %s is not a directory", o.Dir))
	}
	if err := o.Env.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--poll", o.Poll}, {"--copy-timeout", o.CopyTimeout}, {"reader poll", o.ReaderPoll},
		{"delete timeout", o.DeleteTimeout}, {"force delete timeout", o.ForceDeleteTimeout},
		{"--overdue-after", o.OverdueAfter}, {"overdue repeat", o.OverdueEvery},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.name, d.v))
		}
	}
	if o.ChunkBytes != 0 && (o.ChunkBytes < MinChunkBytes || o.ChunkBytes > record.MaxChunkBytes) {
		errs = append(errs, fmt.Errorf("--chunk-size must be 0 or %d to %d bytes, got %d", MinChunkBytes, record.MaxChunkBytes, o.ChunkBytes))
	}
	if o.GiveUp < 0 {
		errs = append(errs, fmt.Errorf("--give-up must not be negative, got %s", o.GiveUp))
	}
	return errors.Join(errs...)
}

// Result says what one Save did.
type Result struct {
	// Job is the Job's state: complete, failed, gone, or active when the
	// saver gave up waiting.
	Job string
	// Saved is true when report.json holds a report that parsed and SAVED
	// was written.
	Saved bool
	// ReportKept is true when the copy failed but a good report.json saved
	// earlier is kept and stands.
	ReportKept bool
	// Pass is the saved report's verdict; Executions, Passed and NotRun
	// count its executions, and Window runs from the first started_at to
	// the last ended_at.
	Pass                       bool
	Executions, Passed, NotRun int
	Window                     string
	// StreamSaved is true when results.jsonl holds a copy of the stream
	// (made now, or kept from an earlier save); StreamExecutions counts its
	// execution lines (of every run it holds) and StreamSkipped the lines
	// that do not parse, both read as the gate reads them: both are 0 for
	// a stream the gate would not grade (no execution line, an older
	// format).
	StreamSaved      bool
	StreamExecutions int
	StreamSkipped    int
	// Interrupted is true when the context was cancelled during the save.
	Interrupted bool
	// Problems names, in words, everything that could not be saved.
	Problems []string
}

// saver holds one Save's state.
type saver struct {
	cs   kubernetes.Interface
	clk  clock.Clock
	o    Options
	log  *slog.Logger
	out  io.Writer
	logs LogReader
	// t0 is when Save started: the load start of last resort.
	t0  time.Time
	res Result
	// reportWhy and streamWhy say why a copy was not kept.
	reportWhy, streamWhy string
	// reportDone is true when this save copied the report.
	reportDone bool
	// interrupt is Save's own context, which a SIGTERM cancels; the steps
	// run on detached ones, and a chunked copy stops between two chunks
	// when it is done.
	interrupt context.Context
}

// step is one part of a save after the wait, run to its end once started.
type step struct {
	name string
	run  func(context.Context) error
}

// Save waits for the run's Job to end and saves its verdict into o.Dir. It
// prints SORTIE_OVERDUE while the Job runs late, then SORTIE_SAVED,
// SORTIE_SAVE_FAILED or SORTIE_SAVE_INCOMPLETE. The error is for unusable
// options, an unwritable directory, or an interruption before anything was
// saved; a run whose report could not be saved is a Result with Saved false.
func Save(ctx context.Context, cs kubernetes.Interface, clk clock.Clock, o Options) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	s := &saver{cs: cs, clk: clk, o: o, log: o.Log, out: o.Out, logs: o.Logs, t0: clk.Now(), interrupt: ctx}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.out == nil {
		s.out = io.Discard
	}
	if s.logs == nil {
		s.logs = ClientLogs{Client: cs}
	}
	s.log = s.log.With("component", "sortie-save", "job", o.Env.Job)
	removeStaleTemps(o.Dir)

	state, job, err := s.waitJob(ctx)
	if err != nil {
		return Result{Job: state, Interrupted: true}, err
	}
	s.res.Job = state
	if job != nil {
		job = job.DeepCopy()
		job.APIVersion, job.Kind = "batch/v1", "Job"
		job.ManagedFields = nil
		if err := writeJSON(o.Dir, FileJob, job); err != nil {
			return s.res, err
		}
	}

	// Each step below runs to its end on a detached, bounded context: a
	// SIGTERM stops the saver from starting the next step, never a copy
	// half-way.
	steps := []step{{"driver pod", s.saveDriver}, {"engines", s.saveEngines}}
	// The stream first: without a report it is all the run recorded. A Job
	// still running has no report yet, but its stream so far is worth having.
	if state != JobActive {
		steps = append(steps, step{"pvc", s.checkPVC})
	}
	if o.Env.Stream != "" {
		steps = append(steps, step{"results stream", s.copyStream})
	}
	if o.Env.Live != "" {
		steps = append(steps, step{"live record", s.copyLive})
	}
	if state != JobActive {
		steps = append(steps, step{"report", s.copyReport})
	}
	for _, st := range steps {
		if ctx.Err() != nil {
			s.res.Interrupted = true
			s.log.Warn("interrupted: not starting the next step", "step", st.name)
			break
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.stepBound())
		err := st.run(dctx)
		cancel()
		if errors.Is(err, errPVCGone) {
			s.reportWhy, s.streamWhy = err.Error(), err.Error()
			break
		}
		if err != nil {
			// Only a local write fails a step: nothing later could be kept.
			return s.res, err
		}
	}
	if ctx.Err() != nil {
		s.res.Interrupted = true
	}
	return s.finish()
}

// stepBound is a real-time backstop for one step, and for each look at the
// Job while it runs: each wait inside a step is already bounded on the
// clock, and each request by the client's timeout; this catches an API call
// that hangs anyway.
func (s *saver) stepBound() time.Duration {
	return 2*(s.o.DeleteTimeout+s.o.ForceDeleteTimeout+s.o.CopyTimeout) + time.Minute
}

// waitJob polls the Job until it is complete, failed or gone, saying
// SORTIE_OVERDUE while it runs late, and gives up GiveUp past the planned
// end. It returns the last Job it read.
func (s *saver) waitJob(ctx context.Context) (string, *batchv1.Job, error) {
	var last *batchv1.Job
	var saidAt time.Time
	said := false
	for {
		job, err := s.getJob(ctx)
		state := JobActive
		switch {
		case apierrors.IsNotFound(err):
			s.log.Info("job is gone")
			return JobGone, last, nil
		case err != nil && ctx.Err() != nil:
			return JobActive, last, fmt.Errorf("interrupted while waiting for job/%s to end: nothing saved", s.o.Env.Job)
		case err != nil:
			// The API server may be restarting: keep asking, bounded by the
			// give-up time.
			s.log.Warn("cannot read the job; asking again", "err", err)
		default:
			last = job
			state = jobState(job)
		}
		if state != JobActive {
			s.log.Info("job ended", "state", state)
			return state, last, nil
		}
		now := s.clk.Now()
		end := s.plannedEnd(last)
		late := now.Sub(end)
		if late >= s.o.OverdueAfter && (!said || now.Sub(saidAt) >= s.o.OverdueEvery) {
			said, saidAt = true, now
			fmt.Fprintf(s.out, "SORTIE_OVERDUE job/%s is still running %ds past its planned end (%s): the driver gives up on a silent backend about 3 minutes after the end, so it is stuck or frozen with its node\n",
				s.o.Env.Job, int64(late/time.Second), end.UTC().Format(time.RFC3339))
		}
		if s.o.GiveUp > 0 && late >= s.o.GiveUp {
			s.log.Warn("giving up waiting for the job", "late", late)
			return JobActive, last, nil
		}
		if err := s.clk.Sleep(ctx, s.o.Poll); err != nil {
			return JobActive, last, fmt.Errorf("interrupted while waiting for job/%s to end: nothing saved", s.o.Env.Job)
		}
	}
}

// getJob reads the Job once. The wait for the Job lasts as long as the
// run, but each look at it is bounded like a step (stepBound), so a request
// the API server takes and never answers cannot outlast the give-up time.
// A signal still ends it at once: the bound is on ctx, not detached.
func (s *saver) getJob(ctx context.Context) (*batchv1.Job, error) {
	gctx, cancel := context.WithTimeout(ctx, s.stepBound())
	defer cancel()
	return s.cs.BatchV1().Jobs(s.o.Env.Namespace).Get(gctx, s.o.Env.Job, metav1.GetOptions{})
}

// jobState reads the Job's terminal conditions. SuccessCriteriaMet and
// FailureTarget come before the pods are gone; only Complete and Failed
// mean the driver is done.
func jobState(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return JobComplete
		case batchv1.JobFailed:
			return JobFailed
		}
	}
	return JobActive
}

// plannedEnd is the load start plus the planned duration. Without
// LOAD_START the Job's start (or creation) stands in, and without a Job the
// saver's own start.
func (s *saver) plannedEnd(job *batchv1.Job) time.Time {
	start := s.o.Env.LoadStart
	if start.IsZero() && job != nil {
		if job.Status.StartTime != nil {
			start = job.Status.StartTime.Time
		} else if !job.CreationTimestamp.IsZero() {
			start = job.CreationTimestamp.Time
		}
	}
	if start.IsZero() {
		start = s.t0
	}
	return start.Add(s.o.Env.PlannedDuration)
}

// saveDriver saves the Job's newest pod as sortie-pod.json and its log as
// sortie.log; the logs of earlier attempts are saved as sortie-<pod>.log.
func (s *saver) saveDriver(ctx context.Context) error {
	pods, err := s.cs.CoreV1().Pods(s.o.Env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + s.o.Env.Job})
	if err != nil {
		s.problem("the driver pods could not be listed: %v", err)
		return nil
	}
	if len(pods.Items) == 0 {
		// Evicted with its node, or deleted with the Job: its log went
		// with it. What the run recorded is still on the PVC.
		s.problem("no driver pod of job/%s: sortie.log is lost (the PVC is still read)", s.o.Env.Job)
		return nil
	}
	items := pods.Items
	sort.Slice(items, func(i, j int) bool {
		a, b := items[i].CreationTimestamp, items[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return items[i].Name < items[j].Name
	})
	newest := items[len(items)-1].DeepCopy()
	newest.APIVersion, newest.Kind = "v1", "Pod"
	newest.ManagedFields = nil
	if err := writeJSON(s.o.Dir, FileDriverPod, newest); err != nil {
		return err
	}
	for i := range items {
		name := FileDriverLog
		if i < len(items)-1 {
			name = "sortie-" + items[i].Name + ".log"
		}
		if err := s.savePodLog(ctx, &items[i], s.o.Env.DriverContainer, name); err != nil {
			return err
		}
	}
	return nil
}

// saveEngines writes engines-end.tsv and each engine pod's log.
func (s *saver) saveEngines(ctx context.Context) error {
	if s.o.Env.EngineSelector == "" {
		s.log.Warn("run.env has no ENGINE_SELECTOR: no engine logs are saved")
		return nil
	}
	pods, err := s.cs.CoreV1().Pods(s.o.Env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: s.o.Env.EngineSelector})
	if err != nil {
		s.problem("the engine pods could not be listed: %v", err)
		return nil
	}
	items := pods.Items
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	var rows []string
	for _, p := range items {
		var restarts int32
		for _, cs := range p.Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%d", orDash(p.Status.PodIP), orDash(p.Spec.NodeName), p.Name, restarts))
	}
	// Sorted by the whole line, so by IP first: the report names backends
	// by address.
	sort.Strings(rows)
	var tsv strings.Builder
	for _, r := range rows {
		tsv.WriteString(r + "\n")
	}
	if err := writeFile(s.o.Dir, FileEnginesEnd, []byte(tsv.String())); err != nil {
		return err
	}
	if len(items) == 0 {
		s.problem("no engine pod matches %q", s.o.Env.EngineSelector)
	}
	for i := range items {
		if err := s.savePodLog(ctx, &items[i], s.o.Env.EngineContainer, "engine-"+items[i].Name+".log"); err != nil {
			return err
		}
	}
	return nil
}

// savePodLog saves one container's log as name, and the log of the
// container before its last restart as <name without .log>.previous.log. A
// log that broke off is kept as <name>.partial and never replaces a whole
// one. The error is only for a local write.
func (s *saver) savePodLog(ctx context.Context, pod *corev1.Pod, container, name string) error {
	if container == "" && len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	if err := s.saveLog(ctx, pod.Name, container, false, name); err != nil {
		return err
	}
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == container && st.RestartCount > 0 {
			return s.saveLog(ctx, pod.Name, container, true, strings.TrimSuffix(name, ".log")+".previous.log")
		}
	}
	return nil
}

func (s *saver) saveLog(ctx context.Context, pod, container string, previous bool, name string) error {
	t, err := createTemp(s.o.Dir, name)
	if err != nil {
		return err
	}
	n, rerr := s.readLog(ctx, pod, container, previous, t)
	if rerr == nil {
		return t.Commit()
	}
	if n == 0 {
		t.Abort()
		s.problem("log of pod/%s not saved: %v", pod, rerr)
		return nil
	}
	s.problem("log of pod/%s broke off after %d bytes (%v): kept as %s.partial", pod, n, rerr, name)
	return t.CommitAs(filepath.Join(s.o.Dir, name+".partial"))
}

// readLog copies a whole log into w; an error means it is not whole.
func (s *saver) readLog(ctx context.Context, pod, container string, previous bool, w io.Writer) (int64, error) {
	rc, err := s.logs.Logs(ctx, s.o.Env.Namespace, pod, container, previous)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(w, rc)
}

// problem records something that could not be saved and logs it.
func (s *saver) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.res.Problems = append(s.res.Problems, msg)
	s.log.Warn(msg)
}

// finish writes times.tsv and SAVED (only with a report that parsed) and
// prints the closing line.
func (s *saver) finish() (Result, error) {
	dir := s.o.Dir
	res := &s.res
	reportPath := filepath.Join(dir, FileReport)
	var rep *record.Report
	if res.Job != JobActive {
		src, err := readReportFile(reportPath)
		switch {
		case err == nil:
			rep = src.Report()
			if !s.reportDone {
				res.ReportKept = true
				s.log.Warn("the report copy failed; the report.json saved earlier is kept", "why", s.reportWhy)
			}
		case !errors.Is(err, os.ErrNotExist):
			s.log.Warn("report.json in the run directory does not parse", "err", err)
		}
	}
	// The stream saved now, or one kept from an earlier save.
	var streamExecs []record.Execution
	var streamRefused error
	streamConfigured := s.o.Env.Stream != ""
	if streamConfigured {
		src, saved, err := readStreamFile(filepath.Join(dir, FileStream))
		res.StreamSaved = saved
		switch {
		case saved && err == nil:
			streamExecs = record.Plain(src.All)
			res.StreamExecutions, res.StreamSkipped = len(src.All), len(src.Skipped)
		case saved:
			streamRefused = err
		}
	}

	if rep != nil {
		if err := writeFile(dir, FileTimes, TimesTSV(rep.Executions)); err != nil {
			return *res, err
		}
		if err := writeFile(dir, FileSaved, []byte(s.clk.Now().UTC().Format(time.RFC3339)+"\n")); err != nil {
			return *res, err
		}
		sum := summarize(rep.Executions)
		res.Saved, res.Pass = true, rep.Pass
		res.Executions, res.Passed, res.NotRun, res.Window = sum.executions, sum.passed, sum.notRun, sum.window
		fmt.Fprintf(s.out, "SORTIE_SAVED dir=%s job=%s executions=%d pass=%t not_run=%d window=%s stream_executions=%d stream_skipped=%d passed=%d\n",
			dir, res.Job, sum.executions, rep.Pass, sum.notRun, sum.window, res.StreamExecutions, res.StreamSkipped, sum.passed)
		return *res, nil
	}

	// No report: SAVED must not stand from an earlier save.
	if _, err := os.Stat(filepath.Join(dir, FileSaved)); err == nil {
		s.log.Warn("removing a SAVED without a report beside it")
		os.Remove(filepath.Join(dir, FileSaved))
	}
	if res.StreamExecutions > 0 {
		if err := writeFile(dir, FileTimes, TimesTSV(streamExecs)); err != nil {
			return *res, err
		}
	}
	streamPath := filepath.Join(dir, FileStream)
	if res.Job == JobActive {
		late := s.clk.Now().Sub(s.plannedEnd(nil))
		what := "the logs are saved"
		if res.StreamExecutions > 0 {
			what = fmt.Sprintf("the logs and the results stream so far (%d executions, %s) are saved", res.StreamExecutions, streamPath)
		}
		fmt.Fprintf(s.out, "SORTIE_SAVE_INCOMPLETE job/%s is still running %ds past its planned end: gave up waiting; %s, no report yet; run sortie-save --dir %s again once the Job has ended\n",
			s.o.Env.Job, int64(late/time.Second), what, dir)
		return *res, nil
	}
	why := s.reportWhy
	if why == "" && res.Interrupted {
		why = "interrupted before the report was copied"
	}
	if why == "" {
		why = "the report was not copied"
	}
	if res.StreamExecutions > 0 {
		skipped := ""
		if res.StreamSkipped > 0 {
			skipped = fmt.Sprintf(", %d line(s) that do not parse skipped", res.StreamSkipped)
		}
		fmt.Fprintf(s.out, "SORTIE_SAVE_FAILED no report (%s), but the results stream IS saved: %d execution(s) the run recorded%s; grade it with sortie-gate --stream %s; both files are still on pvc/%s: do not delete it\n",
			oneLine(why, 300), res.StreamExecutions, skipped, streamPath, s.o.Env.PVC)
		return *res, nil
	}
	streamWhy := "none configured"
	switch {
	case streamConfigured && streamRefused != nil:
		streamWhy = "results.jsonl is saved but holds nothing the gate grades: " + streamRefused.Error()
	case streamConfigured && s.streamWhy != "":
		streamWhy = s.streamWhy
	case streamConfigured:
		streamWhy = "not copied"
	}
	fmt.Fprintf(s.out, "SORTIE_SAVE_FAILED no report (%s) and no results stream (%s); the logs are saved in %s, and whatever the run wrote is still on pvc/%s (%s): do not delete it\n",
		oneLine(why, 300), oneLine(streamWhy, 200), dir, s.o.Env.PVC, s.o.Env.Report)
	return *res, nil
}
