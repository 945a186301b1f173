package saver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const (
	ns         = "soak"
	jobName    = "sortie-run"
	readerName = "sortie-run-reader"
	pvcName    = "sortie-report"
	reportPath = "runs/r1/report.json"
	streamPath = "runs/r1/results.jsonl"
)

var (
	// loadStart is the run's LOAD_START; the planned end is 15 minutes on.
	loadStart  = time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC)
	plannedEnd = loadStart.Add(900 * time.Second)
	podsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	jobsGVR    = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
)

// logAction records a log read in the fake clientset's action list, so the
// transcript shows it in order with the API calls.
type logAction struct {
	k8stesting.ActionImpl
	name, container string
	previous        bool
}

func (a logAction) DeepCopy() k8stesting.Action { return a }

// logScript is what one log read returns: data, then err instead of EOF
// (a download that broke off); openErr fails the read before any byte.
type logScript struct {
	data    []byte
	err     error
	openErr error
}

// fixture is a fake cluster with a finished sortie run on it.
type fixture struct {
	t   *testing.T
	cs  *fake.Clientset
	clk *clock.Fake
	dir string
	env RunEnv

	mu sync.Mutex
	// podLogs by pod name (pod+"#previous" for the previous instance);
	// fileLogs by the PVC file a reader pod prints.
	podLogs  map[string]logScript
	fileLogs map[string]logScript
	// readerStatus scripts the reader pod's status on each get, by file;
	// the last entry repeats. Unscripted files succeed at once.
	readerStatus map[string][]corev1.PodStatus
	readerGets   map[string]int
	// onReaderGet runs on every get of a reader pod (file, 0-based count).
	onReaderGet func(file string, n int)
	// jobAfter scripts the Job: it reads as active until the n-th get.
	jobActiveGets int
	jobGets       int
	jobFinal      batchv1.JobConditionType
	// stuckDelete makes the API accept deletes of the reader pod without
	// ever removing it (a node that does not answer).
	stuckDelete bool
	// pvcDir holds the PVC's files for a reader pod that runs sortie cat
	// with --offset: its log is what record.WriteChunk prints of the real
	// file, passed through chunkHook when one is set.
	pvcDir     string
	chunkHook  func(a chunkArgs, out []byte) []byte
	chunkBytes int64
	// oldCat makes every chunk reader pod fail as the sortie cat of an
	// image from before chunks does: usage, exit 2.
	oldCat bool
	// catBin, when set, is a built sortie binary that prints the chunks
	// as a reader pod runs it, instead of record.WriteChunk in-process.
	catBin string
}

// chunkArgs is what a chunk reader pod was asked.
type chunkArgs struct {
	file           string
	offset, length int64
	sum            bool
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	fx := &fixture{
		t:            t,
		clk:          clock.NewFake(plannedEnd.Add(20 * time.Second)),
		dir:          t.TempDir(),
		podLogs:      map[string]logScript{},
		fileLogs:     map[string]logScript{},
		readerStatus: map[string][]corev1.PodStatus{},
		readerGets:   map[string]int{},
		jobFinal:     batchv1.JobComplete,
		env: RunEnv{
			Namespace:       ns,
			Job:             jobName,
			PVC:             pvcName,
			Report:          reportPath,
			Stream:          streamPath,
			PlannedDuration: 900 * time.Second,
			LoadStart:       loadStart,
			EngineSelector:  "app.kubernetes.io/component=engine",
			ReaderImage:     "registry.example/reader:1@sha256:0000",
		},
	}
	fx.podLogs["sortie-run-7xk2p"] = logScript{data: []byte("PASS steady/alpha\nFAIL steady/beta\n")}
	fx.podLogs["sortie-engine-4fz9q"] = logScript{data: []byte("engine on node-a\n")}
	fx.podLogs["sortie-engine-8wq2m"] = logScript{data: []byte("engine on node-b, second life\n")}
	fx.podLogs["sortie-engine-8wq2m#previous"] = logScript{data: []byte("engine on node-b, killed\n")}
	fx.fileLogs[streamPath] = logScript{data: readFixture(t, "results.jsonl")}
	fx.fileLogs[reportPath] = logScript{data: readFixture(t, "report.json")}
	return fx
}

// objects are the cluster's objects at the end of a run.
func (fx *fixture) objects() []runtime.Object {
	started := metav1.NewTime(loadStart.Add(-30 * time.Second))
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: ns, CreationTimestamp: started},
		Status:     batchv1.JobStatus{StartTime: &started},
	}
	driver := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sortie-run-7xk2p", Namespace: ns, CreationTimestamp: started,
			Labels: map[string]string{"job-name": jobName}},
		Spec:   corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "sortie"}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded},
	}
	engine := func(name, ip, node string, restarts int32) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels: map[string]string{"app.kubernetes.io/component": "engine"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "engine"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
				ContainerStatuses: []corev1.ContainerStatus{{Name: "engine", RestartCount: restarts}}},
		}
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: pvcName, Namespace: ns}}
	return []runtime.Object{job, driver, engine("sortie-engine-8wq2m", "10.20.1.9", "node-b", 1),
		engine("sortie-engine-4fz9q", "10.20.0.7", "node-a", 0), pvc}
}

// start builds the clientset from objs and installs the reactors.
func (fx *fixture) start(objs []runtime.Object) {
	fx.cs = fake.NewClientset(objs...)
	fx.cs.PrependReactor("get", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := fx.cs.Tracker().Get(jobsGVR, ns, jobName)
		if err != nil {
			return true, nil, err
		}
		fx.mu.Lock()
		fx.jobGets++
		n := fx.jobGets
		fx.mu.Unlock()
		job := obj.(*batchv1.Job).DeepCopy()
		if n > fx.jobActiveGets {
			job.Status.Conditions = []batchv1.JobCondition{{Type: fx.jobFinal, Status: corev1.ConditionTrue}}
		} else {
			job.Status.Active = 1
		}
		return true, job, nil
	})
	fx.cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ga, ok := a.(k8stesting.GetAction)
		if !ok || ga.GetName() != readerName || ga.GetSubresource() != "" {
			return false, nil, nil
		}
		obj, err := fx.cs.Tracker().Get(podsGVR, ns, readerName)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		file := readerFile(pod)
		fx.mu.Lock()
		n := fx.readerGets[file]
		fx.readerGets[file]++
		seq := fx.readerStatus[file]
		hook := fx.onReaderGet
		fx.mu.Unlock()
		pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded}
		if len(seq) > 0 {
			pod.Status = seq[min(n, len(seq)-1)]
		}
		if _, isChunk := chunkOf(pod); isChunk && fx.oldCat {
			pod.Status = failed(2)
		}
		if hook != nil {
			hook(file, n)
		}
		return true, pod, nil
	})
	fx.cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if fx.stuckDelete && a.(k8stesting.DeleteAction).GetName() == readerName {
			return true, nil, nil
		}
		return false, nil, nil
	})
}

// readerFile is the PVC file a reader pod prints.
func readerFile(p *corev1.Pod) string {
	if len(p.Spec.Containers) == 0 || len(p.Spec.Containers[0].Command) == 0 {
		return ""
	}
	cmd := p.Spec.Containers[0].Command
	return strings.TrimPrefix(cmd[len(cmd)-1], readerMount+"/")
}

// Logs implements LogReader from the scripts.
func (fx *fixture) Logs(ctx context.Context, namespace, pod, container string, previous bool) (io.ReadCloser, error) {
	fx.cs.Invokes(logAction{
		ActionImpl: k8stesting.ActionImpl{Verb: "get", Namespace: namespace, Resource: podsGVR, Subresource: "log"},
		name:       pod, container: container, previous: previous,
	}, nil)
	fx.mu.Lock()
	defer fx.mu.Unlock()
	var sc logScript
	var ok bool
	if pod == readerName {
		obj, err := fx.cs.Tracker().Get(podsGVR, namespace, pod)
		if err != nil {
			return nil, err
		}
		if a, isChunk := chunkOf(obj.(*corev1.Pod)); isChunk {
			if fx.oldCat {
				return io.NopCloser(strings.NewReader("sortie: usage: sortie cat FILE\n")), nil
			}
			return io.NopCloser(bytes.NewReader(fx.printChunk(a))), nil
		}
		sc, ok = fx.fileLogs[readerFile(obj.(*corev1.Pod))]
	} else {
		key := pod
		if previous {
			key += "#previous"
		}
		sc, ok = fx.podLogs[key]
	}
	if !ok {
		return nil, apierrors.NewNotFound(podsGVR.GroupResource(), pod)
	}
	if sc.openErr != nil {
		return nil, sc.openErr
	}
	return io.NopCloser(io.MultiReader(bytes.NewReader(sc.data), errReader{sc.err})), nil
}

var _ LogReader = (*fixture)(nil)

// chunkOf reads a chunk reader pod's arguments.
func chunkOf(p *corev1.Pod) (chunkArgs, bool) {
	a := chunkArgs{file: readerFile(p)}
	cmd := p.Spec.Containers[0].Command
	isChunk := false
	for i, w := range cmd {
		switch w {
		case "--offset":
			a.offset, _ = strconv.ParseInt(cmd[i+1], 10, 64)
			isChunk = true
		case "--length":
			a.length, _ = strconv.ParseInt(cmd[i+1], 10, 64)
		case "--sum":
			a.sum = true
		}
	}
	return a, isChunk
}

// printChunk is what sortie cat prints for a: the real chunk of the file
// in pvcDir, or its error as the pod's log.
func (fx *fixture) printChunk(a chunkArgs) []byte {
	var out bytes.Buffer
	var err error
	if fx.catBin != "" {
		args := []string{"cat", "--offset", strconv.FormatInt(a.offset, 10), "--length", strconv.FormatInt(a.length, 10)}
		if a.sum {
			args = append(args, "--sum")
		}
		cmd := exec.Command(fx.catBin, append(args, filepath.Join(fx.pvcDir, a.file))...)
		cmd.Stdout = &out
		err = cmd.Run()
	} else {
		var f *os.File
		if f, err = os.Open(filepath.Join(fx.pvcDir, a.file)); err == nil {
			defer f.Close()
			_, err = record.WriteChunk(&out, f, a.offset, a.length, a.sum)
		}
	}
	if err != nil {
		return []byte("sortie: " + err.Error() + "\n")
	}
	if fx.chunkHook != nil {
		return fx.chunkHook(a, out.Bytes())
	}
	return out.Bytes()
}

// errReader ends a log with err instead of EOF.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

func (fx *fixture) options(out io.Writer) Options {
	o := DefaultOptions()
	o.Dir = fx.dir
	o.Env = fx.env
	o.Logs = fx
	o.Out = out
	if fx.chunkBytes != 0 {
		o.ChunkBytes = fx.chunkBytes
	}
	return o
}

// save runs Save while a goroutine moves the fake clock a second at a time
// whenever Save sleeps, so nothing sleeps for real.
func (fx *fixture) save(ctx context.Context, out io.Writer) (Result, error) {
	return fx.saveWith(ctx, fx.cs, out)
}

// saveWith is save through cs, a client that wraps the fixture's.
func (fx *fixture) saveWith(ctx context.Context, cs kubernetes.Interface, out io.Writer) (Result, error) {
	tick, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for fx.clk.WaitForSleepers(tick, 1) == nil {
			fx.clk.Advance(time.Second)
		}
	}()
	res, err := Save(ctx, cs, fx.clk, fx.options(out))
	stop()
	wg.Wait()
	return res, err
}

// transcript renders the recorded actions one per line, a run of equal
// lines folded into one with its count.
func transcript(actions []k8stesting.Action) []string {
	var lines []string
	for _, a := range actions {
		res := a.GetResource().Resource
		var l string
		switch a := a.(type) {
		case logAction:
			l = fmt.Sprintf("get pods/log %s container=%s", a.name, a.container)
			if a.previous {
				l += " previous"
			}
		case k8stesting.CreateAction:
			m, _ := metaName(a.GetObject())
			l = "create " + res + " " + m
		case k8stesting.DeleteActionImpl:
			l = "delete " + res + " " + a.GetName()
			if g := a.DeleteOptions.GracePeriodSeconds; g != nil {
				l += fmt.Sprintf(" grace=%d", *g)
			}
		case k8stesting.ListAction:
			l = "list " + res + " " + a.GetListRestrictions().Labels.String()
		case k8stesting.GetAction:
			l = "get " + res + " " + a.GetName()
		default:
			l = a.GetVerb() + " " + res
		}
		if n := len(lines); n > 0 {
			prev, count := lines[n-1], 1
			if i := strings.LastIndex(prev, " (x"); i >= 0 {
				fmt.Sscanf(prev[i:], " (x%d)", &count)
				prev = prev[:i]
			}
			if prev == l {
				lines[n-1] = fmt.Sprintf("%s (x%d)", l, count+1)
				continue
			}
		}
		lines = append(lines, l)
	}
	return lines
}

func metaName(o runtime.Object) (string, error) {
	type named interface{ GetName() string }
	if n, ok := o.(named); ok {
		return n.GetName(), nil
	}
	return "", errors.New("no name")
}

// snapshot renders everything a case shows: the API transcript, the
// program's lines, the result, and the run directory.
func (fx *fixture) snapshot(res Result, err error, out string) string {
	var b strings.Builder
	b.WriteString("== actions\n")
	for _, l := range transcript(fx.cs.Actions()) {
		b.WriteString(l + "\n")
	}
	b.WriteString("== stdout\n")
	b.WriteString(strings.ReplaceAll(out, fx.dir, "RUNDIR"))
	b.WriteString("== result\n")
	fmt.Fprintf(&b, "err=%v\njob=%s saved=%t report_kept=%t pass=%t executions=%d passed=%d not_run=%d window=%s\n",
		err, res.Job, res.Saved, res.ReportKept, res.Pass, res.Executions, res.Passed, res.NotRun, res.Window)
	fmt.Fprintf(&b, "stream_saved=%t stream_executions=%d stream_skipped=%d interrupted=%t\n",
		res.StreamSaved, res.StreamExecutions, res.StreamSkipped, res.Interrupted)
	for _, p := range res.Problems {
		b.WriteString("problem: " + strings.ReplaceAll(p, fx.dir, "RUNDIR") + "\n")
	}
	b.WriteString("== files\n")
	ents, _ := os.ReadDir(fx.dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		st, _ := os.Stat(filepath.Join(fx.dir, n))
		fmt.Fprintf(&b, "%s %d\n", n, st.Size())
	}
	for _, n := range []string{FileEnginesEnd, FileTimes, FileSaved} {
		if data, err := os.ReadFile(filepath.Join(fx.dir, n)); err == nil {
			fmt.Fprintf(&b, "== %s\n%s", n, data)
		}
	}
	return b.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", path, diff)
	}
}

func pending(reason string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "reader", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "waiting for " + reason}},
	}}}
}

func phase(p corev1.PodPhase) corev1.PodStatus { return corev1.PodStatus{Phase: p} }

func failed(code int32) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "reader", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}},
	}}}
}

// TestSave drives whole saves against the fake cluster; each case's
// transcript, lines and files are a golden file.
func TestSave(t *testing.T) {
	goodReport := readFixture(t, "report.json")
	goodStream := readFixture(t, "results.jsonl")
	cases := []struct {
		name string
		// setup changes the fixture; objs may drop or add objects.
		setup func(fx *fixture, objs []runtime.Object) []runtime.Object
		// before writes files into the run directory before the save.
		before map[string][]byte
		saved  bool
		// keep names files whose content must be what `before` wrote.
		keep []string
		// check runs extra assertions.
		check func(t *testing.T, fx *fixture, res Result, out string)
	}{{
		name: "report-and-stream",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.readerStatus[streamPath] = []corev1.PodStatus{pending("ContainerCreating"), phase(corev1.PodRunning), phase(corev1.PodSucceeded)}
			return objs
		},
		saved: true,
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			got, _ := os.ReadFile(filepath.Join(fx.dir, FileReport))
			if !bytes.Equal(got, goodReport) {
				t.Error("report.json is not the report on the PVC")
			}
			if res.Executions != 3 || res.Passed != 1 || res.NotRun != 1 || res.StreamExecutions != 3 || res.StreamSkipped != 1 {
				t.Errorf("counts %+v", res)
			}
			if !strings.Contains(out, "SORTIE_SAVED dir="+fx.dir+" job=complete executions=3 pass=false not_run=1 window=2031-03-04T10:00:00.120Z..2031-03-04T10:15:00.532Z stream_executions=3") {
				t.Errorf("no SORTIE_SAVED line in %q", out)
			}
		},
	}, {
		// A report of the older sortie + Nighthawk stack with a failing
		// execution (failures[] as {backend, counters} objects) is saved
		// like ours: the saver reads it as the gate does.
		name: "older-stack-report",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.fileLogs[reportPath] = logScript{data: readFixture(t, "older-stack-failing.json")}
			return objs
		},
		saved: true,
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			if !strings.Contains(out, "SORTIE_SAVED dir="+fx.dir+" job=complete executions=2 pass=false not_run=0 ") || res.Passed != 1 {
				t.Errorf("no SORTIE_SAVED line for both executions, one passed, in %q", out)
			}
		},
	}, {
		name: "stream-only-report-missing",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.readerStatus[reportPath] = []corev1.PodStatus{phase(corev1.PodRunning), failed(1)}
			fx.fileLogs[reportPath] = logScript{data: []byte("cat: can't open '/report/runs/r1/report.json': No such file or directory\n")}
			return objs
		},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			want := "SORTIE_SAVE_FAILED no report (pod/" + readerName + " Failed"
			if !strings.Contains(out, want) || !strings.Contains(out, "the results stream IS saved: 3 execution(s)") ||
				!strings.Contains(out, "sortie-gate --stream "+filepath.Join(fx.dir, FileStream)) {
				t.Errorf("want %q and how to grade the stream, got %q", want, out)
			}
		},
	}, {
		// No report, and a stream of a release without started_at: the
		// gate refuses it (exit 2), so the saver must not tell the user to
		// grade it.
		name: "stream-only-older-format",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.readerStatus[reportPath] = []corev1.PodStatus{phase(corev1.PodRunning), failed(1)}
			fx.fileLogs[reportPath] = logScript{data: []byte("cat: can't open '/report/runs/r1/report.json': No such file or directory\n")}
			old := strings.ReplaceAll(string(goodStream), `"started_at":"2031-03-04T10:00:00.120Z",`, "")
			fx.fileLogs[streamPath] = logScript{data: []byte(old)}
			return objs
		},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			want := "and no results stream (results.jsonl is saved but holds nothing the gate grades: an older report format the gate does not grade (executions without started_at: steady/alpha, steady/beta)"
			if !strings.Contains(out, want) || strings.Contains(out, "sortie-gate --stream") || !res.StreamSaved || res.StreamExecutions != 0 {
				t.Errorf("want %q and no advice to grade the stream, got %q (%+v)", want, out, res)
			}
		},
	}, {
		name: "stream-only-report-unparseable",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			// The reader Succeeded and its log was whole, but the file on
			// the PVC is cut short (a driver killed while writing it the
			// old, non-atomic way, say).
			fx.fileLogs[reportPath] = logScript{data: goodReport[:700]}
			return objs
		},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			if !strings.Contains(out, "SORTIE_SAVE_FAILED no report (the copy (700 bytes) is not accepted: not a sortie JSON report") {
				t.Errorf("got %q", out)
			}
		},
	}, {
		name: "broken-download-keeps-earlier-copies",
		before: map[string][]byte{
			FileReport: goodReport,
			FileStream: goodStream,
			// SAVED and times.tsv come back from the kept report.
		},
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			// The stream's log breaks off half-way; the report's reader
			// Succeeds but its log read fails before the end.
			fx.fileLogs[streamPath] = logScript{data: goodStream[:300], err: io.ErrUnexpectedEOF}
			fx.fileLogs[reportPath] = logScript{data: goodReport[:1000], err: errors.New("http2: stream closed")}
			// An engine log that broke off is kept apart, never as the log.
			fx.podLogs["sortie-engine-4fz9q"] = logScript{data: []byte("engine on no"), err: io.ErrUnexpectedEOF}
			return objs
		},
		saved: true,
		keep:  []string{FileReport, FileStream},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			if !res.ReportKept {
				t.Error("ReportKept is false")
			}
			if _, err := os.Stat(filepath.Join(fx.dir, "sortie-engine-4fz9q.log")); err == nil {
				t.Error("a broken engine log was saved as the log")
			}
		},
	}, {
		name: "live-record-copied",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.env.Live = "runs/r1/results.live.jsonl"
			fx.fileLogs[fx.env.Live] = logScript{data: []byte(`{"type":"head","run_id":"r1"}` + "\n" + `{"type":"bucket","label":"steady/alpha","backend":"10.0.1.5:8443","index":0}` + "\n")}
			return objs
		},
		saved: true,
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			got, err := os.ReadFile(filepath.Join(fx.dir, FileLive))
			if want := fx.fileLogs[fx.env.Live].data; err != nil || !bytes.Equal(got, want) {
				t.Errorf("live.jsonl %q (%v), want the PVC's %q", got, err, want)
			}
		},
	}, {
		name:   "shorter-live-record-never-replaces-longer",
		before: map[string][]byte{FileLive: []byte("{\"type\":\"head\"}\n{\"type\":\"bucket\"}\n")},
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.env.Live = "runs/r1/results.live.jsonl"
			fx.fileLogs[fx.env.Live] = logScript{data: []byte("{\"type\":\"head\"}\n")}
			return objs
		},
		saved: true,
		keep:  []string{FileLive},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			if !strings.Contains(out, "live record not copied") && !strings.Contains(strings.Join(res.Problems, " "), "live record not copied") {
				t.Errorf("no problem names the live record copy that was refused: %q %+v", out, res)
			}
		},
	}, {
		name:   "shorter-stream-never-replaces-longer",
		before: map[string][]byte{FileStream: goodStream},
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			// A whole, successful copy that is shorter than the one saved
			// before cannot be the same append-only stream: kept out.
			fx.fileLogs[streamPath] = logScript{data: goodStream[:bytes.IndexByte(goodStream, '\n')+1]}
			return objs
		},
		saved: true,
		keep:  []string{FileStream},
	}, {
		name: "failed-stream-reader-keeps-earlier-copy",
		before: map[string][]byte{
			FileStream: goodStream[:bytes.IndexByte(goodStream, '\n')+1],
		},
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.readerStatus[streamPath] = []corev1.PodStatus{failed(137)}
			fx.fileLogs[streamPath] = logScript{data: goodStream[:200]}
			return objs
		},
		saved: true,
		keep:  []string{FileStream},
	}, {
		name: "stuck-reader-pod",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.readerStatus[reportPath] = []corev1.PodStatus{pending("ImagePullBackOff")}
			return objs
		},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			want := "SORTIE_SAVE_FAILED no report (pod/" + readerName + " did not finish within 3m0s: phase Pending, container reader waiting: ImagePullBackOff"
			if !strings.Contains(out, want) {
				t.Errorf("want %q, got %q", want, out)
			}
			// Bounded: the wait ended at the copy timeout, on the clock.
			if n := fx.readerGets[reportPath]; n < 80 || n > 100 {
				t.Errorf("%d gets of the stuck reader, want about 3m/2s", n)
			}
		},
	}, {
		name: "earlier-reader-pod-cannot-be-deleted",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.stuckDelete = true
			fx.readerStatus[streamPath] = []corev1.PodStatus{phase(corev1.PodRunning)}
			leftover := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: readerName, Namespace: ns},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "reader", Command: []string{"cat", readerMount + "/" + streamPath}}}},
			}
			return append(objs, leftover)
		},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			want := "an earlier pod/" + readerName + " could not be deleted within 1m30s (is the node that holds pvc/" + pvcName + " answering?)"
			if !strings.Contains(out, want) {
				t.Errorf("want %q, got %q", want, out)
			}
		},
	}, {
		name: "no-driver-pod",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			return dropNamed(objs, "sortie-run-7xk2p")
		},
		saved: true,
	}, {
		name: "job-gone",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			return dropNamed(objs, jobName, "sortie-run-7xk2p")
		},
		saved: true,
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			if _, err := os.Stat(filepath.Join(fx.dir, FileJob)); err == nil {
				t.Error("job.json written for a Job that is gone")
			}
		},
	}, {
		name: "job-failed-after-two-attempts",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.jobFinal = batchv1.JobFailed
			first := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "sortie-run-2abcd", Namespace: ns,
					CreationTimestamp: metav1.NewTime(loadStart.Add(-time.Hour)),
					Labels:            map[string]string{"job-name": jobName}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sortie"}}},
			}
			fx.podLogs["sortie-run-2abcd"] = logScript{data: []byte("first attempt\n")}
			return append(objs, first)
		},
		saved: true,
	}, {
		name: "pvc-gone",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			return dropNamed(objs, pvcName)
		},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			if !strings.Contains(out, "SORTIE_SAVE_FAILED no report (pvc/"+pvcName+" is gone") {
				t.Errorf("got %q", out)
			}
		},
	}, {
		name: "overdue-then-complete",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			// The saver starts 4 minutes past the planned end; the Job
			// ends on the 40th look, 10.5 minutes past it.
			fx.clk = clock.NewFake(plannedEnd.Add(4 * time.Minute))
			fx.jobActiveGets = 39
			return objs
		},
		saved: true,
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			var got []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "SORTIE_OVERDUE ") {
					got = append(got, l[:strings.Index(l, "s past")])
				}
			}
			want := []string{"SORTIE_OVERDUE job/sortie-run is still running 300", "SORTIE_OVERDUE job/sortie-run is still running 600"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("overdue lines (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "give-up-while-running",
		setup: func(fx *fixture, objs []runtime.Object) []runtime.Object {
			fx.clk = clock.NewFake(plannedEnd.Add(-time.Minute))
			fx.jobActiveGets = 1 << 30
			return objs
		},
		check: func(t *testing.T, fx *fixture, res Result, out string) {
			if res.Job != JobActive || !strings.Contains(out, "SORTIE_SAVE_INCOMPLETE job/sortie-run is still running 1200s past its planned end") {
				t.Errorf("job=%s, got %q", res.Job, out)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			objs := fx.objects()
			if tc.setup != nil {
				objs = tc.setup(fx, objs)
			}
			fx.start(objs)
			for name, data := range tc.before {
				if err := os.WriteFile(filepath.Join(fx.dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			res, err := fx.save(context.Background(), &out)
			if err != nil {
				t.Fatalf("Save: %v", err)
			}
			if res.Saved != tc.saved {
				t.Errorf("Saved = %t, want %t; stdout:\n%s", res.Saved, tc.saved, out.String())
			}
			_, serr := os.Stat(filepath.Join(fx.dir, FileSaved))
			if (serr == nil) != tc.saved {
				t.Errorf("SAVED exists = %t, want %t", serr == nil, tc.saved)
			}
			if tc.saved && !strings.HasPrefix(lastLine(out.String()), "SORTIE_SAVED ") {
				t.Errorf("last line %q, want SORTIE_SAVED", lastLine(out.String()))
			}
			if !tc.saved && !strings.HasPrefix(lastLine(out.String()), "SORTIE_SAVE_") {
				t.Errorf("last line %q, want SORTIE_SAVE_FAILED or _INCOMPLETE", lastLine(out.String()))
			}
			for _, name := range tc.keep {
				got, _ := os.ReadFile(filepath.Join(fx.dir, name))
				if !bytes.Equal(got, tc.before[name]) {
					t.Errorf("%s was replaced; the earlier copy must be kept", name)
				}
			}
			checkNoTemps(t, fx.dir)
			checkReaderGone(t, fx)
			if tc.check != nil {
				tc.check(t, fx, res, out.String())
			}
			checkGolden(t, tc.name, fx.snapshot(res, err, out.String()))
		})
	}
}

func dropNamed(objs []runtime.Object, names ...string) []runtime.Object {
	var kept []runtime.Object
	for _, o := range objs {
		n, _ := metaName(o)
		drop := false
		for _, d := range names {
			drop = drop || n == d
		}
		if !drop {
			kept = append(kept, o)
		}
	}
	return kept
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func checkNoTemps(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if record.IsAtomicTemp(e.Name()) {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// checkReaderGone asserts every reader pod the saver made was deleted
// (unless the cluster refuses deletes).
func checkReaderGone(t *testing.T, fx *fixture) {
	t.Helper()
	if fx.stuckDelete {
		return
	}
	if _, err := fx.cs.Tracker().Get(podsGVR, ns, readerName); !apierrors.IsNotFound(err) {
		t.Errorf("reader pod left behind (get: %v)", err)
	}
}

// TestSaveInterrupted sends the SIGTERM (a cancelled context) at three
// points: while waiting for the Job, during the stream's copy, during the
// report's. A copy in progress finishes; nothing is half-written; nothing
// new is started.
func TestSaveInterrupted(t *testing.T) {
	t.Run("while-waiting", func(t *testing.T) {
		fx := newFixture(t)
		fx.jobActiveGets = 1 << 30
		fx.start(fx.objects())
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			fx.clk.WaitForSleepers(context.Background(), 1)
			cancel()
		}()
		var out bytes.Buffer
		_, err := Save(ctx, fx.cs, fx.clk, fx.options(&out))
		if err == nil || !strings.Contains(err.Error(), "interrupted while waiting for job/sortie-run") {
			t.Fatalf("Save = %v, want interrupted while waiting", err)
		}
		if ents, _ := os.ReadDir(fx.dir); len(ents) != 0 {
			t.Errorf("%d files written by an interrupted wait", len(ents))
		}
		checkGolden(t, "interrupted-while-waiting", fx.snapshot(Result{}, err, out.String()))
	})
	for _, tc := range []struct {
		name, file string
		saved      bool
	}{
		{"during-stream-copy", streamPath, false},
		{"during-report-copy", reportPath, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The reader is slow: the signal lands while it runs, and the
			// saver must go on polling it on its detached context.
			fx.readerStatus[tc.file] = []corev1.PodStatus{phase(corev1.PodRunning), phase(corev1.PodRunning), phase(corev1.PodSucceeded)}
			fx.onReaderGet = func(file string, n int) {
				if file == tc.file && n == 0 {
					cancel()
				}
			}
			fx.start(fx.objects())
			var out bytes.Buffer
			res, err := fx.save(ctx, &out)
			if err != nil {
				t.Fatalf("Save: %v", err)
			}
			if !res.Interrupted || res.Saved != tc.saved {
				t.Errorf("interrupted=%t saved=%t, want true, %t", res.Interrupted, res.Saved, tc.saved)
			}
			name := FileStream
			if tc.file == reportPath {
				name = FileReport
			}
			got, _ := os.ReadFile(filepath.Join(fx.dir, name))
			if want := fx.fileLogs[tc.file].data; !bytes.Equal(got, want) {
				t.Errorf("%s holds %d bytes, want the whole %d", name, len(got), len(want))
			}
			checkNoTemps(t, fx.dir)
			checkReaderGone(t, fx)
			checkGolden(t, "interrupted-"+tc.name, fx.snapshot(res, err, out.String()))
		})
	}
}

// TestReaderPodHardened checks the reader pod a save creates.
func TestReaderPodHardened(t *testing.T) {
	fx := newFixture(t)
	fx.start(fx.objects())
	var created []*corev1.Pod
	fx.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		created = append(created, a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy())
		return false, nil, nil
	})
	if _, err := fx.save(context.Background(), io.Discard); err != nil {
		t.Fatal(err)
	}
	if len(created) != 2 {
		t.Fatalf("%d reader pods created, want 2 (stream, report)", len(created))
	}
	b, err := json.MarshalIndent(created[1], "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "reader-pod", string(b)+"\n")
	for i, p := range created {
		sc, c := p.Spec.SecurityContext, p.Spec.Containers[0]
		checks := map[string]bool{
			"restartPolicy Never":              p.Spec.RestartPolicy == corev1.RestartPolicyNever,
			"no service account token":         p.Spec.AutomountServiceAccountToken != nil && !*p.Spec.AutomountServiceAccountToken,
			"runAsNonRoot":                     sc.RunAsNonRoot != nil && *sc.RunAsNonRoot,
			"runAsUser 65532":                  sc.RunAsUser != nil && *sc.RunAsUser == 65532,
			"readOnlyRootFilesystem":           c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem,
			"no privilege escalation":          c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation,
			"drops ALL capabilities":           len(c.SecurityContext.Capabilities.Drop) == 1 && c.SecurityContext.Capabilities.Drop[0] == "ALL",
			"mount read-only":                  len(c.VolumeMounts) == 1 && c.VolumeMounts[0].ReadOnly,
			"claim read-only":                  p.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly && p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName == pvcName,
			"bounded lifetime":                 p.Spec.ActiveDeadlineSeconds != nil && *p.Spec.ActiveDeadlineSeconds > 0,
			"prints the file given in run.env": c.Command[len(c.Command)-1] == readerMount+"/"+[]string{streamPath, reportPath}[i],
			"image from run.env":               c.Image == fx.env.ReaderImage,
		}
		for what, ok := range checks {
			if !ok {
				t.Errorf("reader pod %d: not %s", i, what)
			}
		}
	}
}

// TestTimesTSV checks the rows of times.tsv from the fixture report.
func TestTimesTSV(t *testing.T) {
	execs, err := timesInput(readFixture(t, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := "steady/alpha\t2031-03-04T10:00:00.120Z\t2031-03-04T10:15:00.532Z\t900412\t10.20.0.7:8443\t2031-03-04T10:00:00.125Z\tpass\n" +
		"steady/alpha\t2031-03-04T10:00:00.120Z\t2031-03-04T10:15:00.532Z\t900412\t10.20.1.9:8443\t2031-03-04T10:00:00.131Z\tpass\n" +
		"steady/beta\t2031-03-04T10:00:00.120Z\t2031-03-04T10:15:00.510Z\t900390\t10.20.0.7:8443\t2031-03-04T10:00:00.126Z\tfail\n" +
		"steady/beta\t2031-03-04T10:00:00.120Z\t2031-03-04T10:15:00.510Z\t900390\t10.20.1.9:8443\t2031-03-04T10:00:00.133Z\tfail\n" +
		"stairs/alpha/stage-2\t-\t-\t0\t-\t-\tnot_run\n"
	if diff := cmp.Diff(want, string(TimesTSV(execs))); diff != "" {
		t.Errorf("times.tsv (-want +got):\n%s", diff)
	}
	// The stream gives the same rows: its torn last line is skipped.
	sexecs, err := timesInput(readFixture(t, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, string(TimesTSV(sexecs))); diff != "" {
		t.Errorf("times.tsv from the stream (-want +got):\n%s", diff)
	}
}

// FuzzTimesInput feeds arbitrary bytes to the --times reader: it must
// never panic, and what it accepts must render one row per execution at
// least, each with seven fields.
func FuzzTimesInput(f *testing.F) {
	f.Add(readFixtureF(f, "report.json"))
	f.Add(readFixtureF(f, "results.jsonl"))
	f.Add([]byte(`{"pass":true,"executions":[]}`))
	f.Add([]byte("{\"label\":\"a\\tb\",\"results\":[{\"backend\":\"x\\ny\"}]}\n"))
	f.Add([]byte(`{"pass":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		execs, err := timesInput(b)
		if err != nil {
			return
		}
		tsv := TimesTSV(execs)
		rows := strings.Split(strings.TrimSuffix(string(tsv), "\n"), "\n")
		if len(execs) > 0 && len(rows) < len(execs) {
			t.Fatalf("%d rows for %d executions", len(rows), len(execs))
		}
		for _, r := range rows {
			if r == "" && len(execs) == 0 {
				continue
			}
			if n := len(strings.Split(r, "\t")); n != 7 {
				t.Fatalf("row %q has %d fields", r, n)
			}
		}
	})
}

func readFixtureF(f *testing.F, name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}
