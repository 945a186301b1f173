//go:build lab

package lab_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/e2e/soak/lab"
	"github.com/sortie-soak/sortie/internal/kube"
)

// runResult is what a soak run in the background ended with.
type runResult struct {
	out string
	err error
}

// bgRun is a soak run started in the background: started is closed when
// the load started (its STEP line), done receives the run's end.
type bgRun struct {
	started chan struct{}
	done    chan runResult
}

// startRun starts `soak args...` in the background, its output in logFile.
func startRun(t *testing.T, ctx context.Context, logFile string, args ...string) *bgRun {
	t.Helper()
	sig := &lineSignal{re: regexp.MustCompile(`^STEP load started`), hit: make(chan struct{})}
	b := &bgRun{started: sig.hit, done: make(chan runResult, 1)}
	go func() {
		out, err := soakRun(t, ctx, logFile, sig, args...)
		b.done <- runResult{out, err}
	}()
	return b
}

// startFaultRun starts the run every fault test strikes mid-load: a 60 s
// `soak run e2e` on the lab (the watchdog sampling every watchInterval)
// into a run directory of its own, its output in NAME.txt beside it, and
// waits until its load started. It returns the run and its directory,
// which is torn down after the test.
func startFaultRun(t *testing.T, ctx context.Context, m lab.Manifest, name, watchInterval string) (*bgRun, string) {
	t.Helper()
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	t.Cleanup(func() { teardown(t, run) })
	b := startRun(t, ctx, filepath.Join(dir, name+".txt"),
		append(runArgs(m), "--duration", "60s", "--settle", "5s", "--watch-interval", watchInterval, "--dir", run)...)
	b.waitLoad(t)
	return b, run
}

// waitLoad waits until the run's load started, and fails the test if the
// run ended before.
func (b *bgRun) waitLoad(t *testing.T) {
	t.Helper()
	select {
	case <-b.started:
	case r := <-b.done:
		logVerdicts(t, r.out)
		t.Fatalf("the run ended before its load started: %v", r.err)
	}
}

// labClient is a client of the lab's API server.
func labClient(t *testing.T, m lab.Manifest) kubernetes.Interface {
	t.Helper()
	cs, err := kube.NewClient(m.Kubeconfig, m.Context, "sortie-lab-test")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// enginePod is the engine pod of the run's release on node.
func enginePod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, node string) corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=engine", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("engine pods on %s: %v, %v; want one", node, pods, err)
	}
	return pods.Items[0]
}

// containerPIDs are the host's pids of the processes of the pod's running
// container name, found by the container's id in their cgroup paths (the
// kubelet's cgroupfs layout ends each container's cgroup with its id).
func containerPIDs(t *testing.T, pod corev1.Pod, name string) []int {
	t.Helper()
	var id string
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name == name && c.State.Running != nil {
			_, id, _ = strings.Cut(c.ContainerID, "://")
		}
	}
	if id == "" {
		t.Fatalf("pod %s has no running container %s: %+v", pod.Name, name, pod.Status.ContainerStatuses)
	}
	dirs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range dirs {
		if inCgroup(f, id) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no process in the cgroup of container %s (%s) of pod %s", name, id, pod.Name)
	}
	return pids
}

// inCgroup says whether the /proc/<pid>/cgroup file f names a cgroup of
// the container id (a process gone meanwhile is in none).
func inCgroup(f, id string) bool {
	fh, err := os.Open(f)
	if err != nil {
		return false
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), "/"+id) {
			return true
		}
	}
	return false
}

// signalAll sends sig to every pid.
func signalAll(t *testing.T, pids []int, sig syscall.Signal) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Errorf("%v to pid %d: %v", sig, pid, err)
		}
	}
}

// labProc is the running lab process name (kubelet-2, ...).
func labProc(t *testing.T, m lab.Manifest, name string) int {
	t.Helper()
	procs, err := lab.Procs(lab.Layout{State: filepath.Dir(m.Kubeconfig), Nodes: len(m.Nodes)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Name == name && p.Alive {
			return p.PidFile.PID
		}
	}
	t.Fatalf("the lab has no running %s: %+v", name, procs)
	return 0
}

// waitFor polls cond every 500 ms until it holds or d passes; it fails
// the test then, saying what.
func waitFor(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s (last error: %v)", what, d, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// mustMatch fails the test for every pattern no line of out matches.
func mustMatch(t *testing.T, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("no line matches %s", p)
		}
	}
}

// stamp is a time as the tests log it.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
