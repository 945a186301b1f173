package watchdog

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/internal/kube/kubetest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// t0 is when every test's watch starts.
var t0 = time.Date(2026, 10, 5, 3, 20, 0, 0, time.UTC)

// namespaces and the flags of a short watch: 3 samples, 2 minutes apart.
var (
	namespaces = []string{"aether-system", "aether-ingress", "aether-test"}
	shortWatch = []string{"--namespaces", strings.Join(namespaces, ","), "--interval", "2m", "--duration", "6m"}
)

// ctr describes one container status of a test pod.
type ctr struct {
	name     string
	init     bool
	restarts int32
	reason   string // last termination reason; "" when it never terminated
	exit     int32
	finished string // RFC 3339
	state    string // running, waiting:<reason>, terminated:<reason>
}

func pod(ns, name, uid string, cs ...ctr) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	p.Status.Phase = corev1.PodRunning
	for _, c := range cs {
		s := corev1.ContainerStatus{Name: c.name, RestartCount: c.restarts}
		if c.reason != "" {
			fin, err := time.Parse(time.RFC3339, c.finished)
			if err != nil {
				panic(err)
			}
			s.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
				Reason: c.reason, ExitCode: c.exit, FinishedAt: metav1.NewTime(fin),
			}
		}
		kind, reason, _ := strings.Cut(c.state, ":")
		switch kind {
		case "waiting":
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
		case "terminated":
			s.State.Terminated = &corev1.ContainerStateTerminated{Reason: reason}
		default:
			s.State.Running = &corev1.ContainerStateRunning{}
		}
		if c.init {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, s)
		} else {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, s)
		}
	}
	return p
}

// answer is one reply to a pod list: the pods, or an error.
type answer struct {
	pods []corev1.Pod
	err  error
}

// script gives, per namespace, the replies to its successive list calls;
// the last reply repeats.
type script map[string][]answer

func pods(p ...corev1.Pod) answer { return answer{pods: p} }

// The cluster of the tests: an agent that restarted twice before the watch,
// a proxy, an ingress and two test workloads.
var (
	agent      = pod("aether-system", "aether-agent-7ddgc", "uid-agent-1", ctr{name: "agent", restarts: 2, reason: "OOMKilled", exit: 137, finished: "2026-10-04T21:13:07Z"})
	proxy      = pod("aether-system", "aether-proxy-k2x9q", "uid-proxy-1", ctr{name: "proxy"})
	edge       = pod("aether-ingress", "aether-edge-6c9f-2mkx8", "uid-edge-1", ctr{name: "edge"})
	prober     = pod("aether-test", "prober-7f5lh", "uid-prober-1", ctr{name: "prober"})
	svc1       = pod("aether-test", "svc-1-5d8c-q4r7t", "uid-svc1-1", ctr{name: "identity-ready", init: true, state: "terminated:Completed"}, ctr{name: "app"})
	cleanScene = script{
		"aether-system":  {pods(agent, proxy)},
		"aether-ingress": {pods(edge)},
		"aether-test":    {pods(prober, svc1)},
	}
)

// restartScene: the agent is OOMKilled once more in sample 1, then rolled
// away (its replacement starts at zero); the proxy crash-loops from sample 2;
// svc-1 is rolled and its new pod's init container fails once.
func restartScene() script {
	agentAgain := pod("aether-system", "aether-agent-7ddgc", "uid-agent-1", ctr{name: "agent", restarts: 3, reason: "OOMKilled", exit: 137, finished: "2026-10-05T03:21:12Z"})
	agentNew := pod("aether-system", "aether-agent-q8w2n", "uid-agent-2", ctr{name: "agent"})
	proxyLoop := pod("aether-system", "aether-proxy-k2x9q", "uid-proxy-1", ctr{name: "proxy", restarts: 4, reason: "Error", exit: 1, finished: "2026-10-05T03:23:02Z", state: "waiting:CrashLoopBackOff"})
	svc1New := pod("aether-test", "svc-1-7b44-x7k2p", "uid-svc1-2",
		ctr{name: "identity-ready", init: true, restarts: 1, reason: "Error", exit: 1, finished: "2026-10-05T03:23:30Z", state: "terminated:Completed"},
		ctr{name: "app"})
	return script{
		"aether-system": {
			pods(agent, proxy),
			pods(agentAgain, proxy),
			pods(agentNew, proxyLoop),
		},
		"aether-ingress": {pods(edge)},
		"aether-test": {
			pods(prober, svc1),
			pods(prober, svc1),
			pods(prober, svc1New),
		},
	}
}

// errorScene: the API server refuses the ingress list in sample 1 and times
// out the test namespace's list in sample 2.
func errorScene() script {
	refused := errors.New(`Get "https://192.168.100.10:6443/api/v1/namespaces/aether-ingress/pods?limit=500": dial tcp 192.168.100.10:6443: connect: connection refused`)
	etcd := apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	return script{
		"aether-system":  {pods(agent, proxy)},
		"aether-ingress": {pods(edge), {err: refused}, pods(edge)},
		"aether-test":    {pods(prober, svc1), pods(prober, svc1), {err: etcd}, pods(prober, svc1)},
	}
}

// newClient returns a fake clientset that answers pod lists from s.
func newClient(s script) *fake.Clientset {
	cs := fake.NewClientset()
	calls := map[string]int{}
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ns := a.GetNamespace()
		replies, ok := s[ns]
		if !ok {
			return true, &corev1.PodList{}, nil
		}
		i := min(calls[ns], len(replies)-1)
		calls[ns]++
		if r := replies[i]; r.err != nil {
			return true, nil, r.err
		} else {
			return true, &corev1.PodList{Items: r.pods}, nil
		}
	})
	return cs
}

// run runs the program against client with a fake clock that a driver
// advances 10 s at a time whenever the program waits, and returns stdout
// and the exit code.
func run(t *testing.T, ctx context.Context, client kubernetes.Interface, args ...string) (string, int) {
	t.Helper()
	clk := clock.NewFake(t0)
	env := Env{
		NewClient: func(string, string) (kubernetes.Interface, error) { return client, nil },
		Clock:     clk,
	}
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- RunEnv(ctx, env, args, &stdout, &stderr) }()
	err := drive(t, clk, 10*time.Second, done)
	if stderr.Len() > 0 {
		t.Logf("stderr:\n%s", stderr.String())
	}
	return stdout.String(), cli.Code(err)
}

// drive advances clk by step each time the program sleeps, until it
// returns; the step count is bounded so a program that never ends fails
// the test instead of hanging it.
func drive(t *testing.T, clk *clock.Fake, step time.Duration, done <-chan error) error {
	t.Helper()
	err, ended := clk.Drive(step, 100000, done)
	if !ended {
		t.Fatal("the program did not end")
	}
	return err
}

// transcript is the golden form of a run: the output, the API calls in
// order and the exit code.
func transcript(stdout string, client *fake.Clientset, code int) string {
	return "== stdout\n" + stdout + "== actions\n" + kubetest.Transcript(client.Actions()) + fmt.Sprintf("== exit %d\n", code)
}

func TestWatchGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scene script
		args  []string
		code  int
		last  string // prefix of the SUMMARY line
	}{
		{"clean", cleanScene, shortWatch, 0, "SUMMARY restart-watch verdict=PASS new_restarts=0 containers=0 samples=3 error_samples=0 baseline=1 ended=complete"},
		{"restarts", restartScene(), shortWatch, 1, "SUMMARY restart-watch verdict=FAIL new_restarts=6 containers=3 samples=3 error_samples=0 baseline=1 ended=complete"},
		{"errors", errorScene(), shortWatch, 3, "SUMMARY restart-watch verdict=UNPROVEN reason=error-samples new_restarts=0 containers=0 samples=3 error_samples=2 baseline=1 ended=complete"},
		{"no-baseline", script{
			"aether-system":  {pods(agent, proxy)},
			"aether-ingress": {{err: apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(`User "system:serviceaccount:aether-test:soak" cannot list resource "pods" in API group "" in the namespace "aether-ingress"`))}},
			"aether-test":    {pods(prober, svc1)},
		}, shortWatch, 3, "SUMMARY restart-watch verdict=UNPROVEN reason=no-baseline new_restarts=0 containers=0 samples=0 error_samples=0 baseline=0 ended=complete"},
		{"baseline-retried", script{
			"aether-system":  {pods(agent, proxy)},
			"aether-ingress": {{err: apierrors.NewServiceUnavailable("the server is currently unable to handle the request")}, {err: apierrors.NewServiceUnavailable("the server is currently unable to handle the request")}, pods(edge)},
			"aether-test":    {pods(prober, svc1)},
		}, shortWatch, 0, "SUMMARY restart-watch verdict=PASS new_restarts=0 containers=0 samples=3 error_samples=0 baseline=1 ended=complete"},
		{"empty-namespace", script{
			"aether-system":  {pods(agent, proxy)},
			"aether-ingress": {pods()},
			"aether-test":    {pods(prober, svc1)},
		}, []string{"--namespaces", "aether-system,aether-ingress,aether-test", "--interval", "2m", "--duration", "3m"}, 0, "SUMMARY restart-watch verdict=PASS new_restarts=0 containers=0 samples=2 error_samples=0 baseline=1 ended=complete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := newClient(tc.scene)
			stdout, code := run(t, context.Background(), client, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, tc.last) {
				t.Errorf("last line\n%s\nwant prefix\n%s", last, tc.last)
			}
			kubetest.Golden(t, filepath.Join("testdata", tc.name+".golden"), transcript(stdout, client, code), *update)
		})
	}
}

// TestRestartSemantics checks the rules a golden file could hide: a replaced
// pod is not a restart, a restart whose pod disappears stays listed as gone,
// and an init container's restart counts.
func TestRestartSemantics(t *testing.T) {
	stdout, _ := run(t, context.Background(), newClient(restartScene()), shortWatch...)
	for _, want := range []string{
		"RESTART aether-system/aether-agent-7ddgc/agent restarts=3 new=1 lastReason=OOMKilled exitCode=137 finishedAt=2026-10-05T03:21:12Z state=running seen=gone",
		"RESTART aether-system/aether-proxy-k2x9q/proxy restarts=4 new=4 lastReason=Error exitCode=1 finishedAt=2026-10-05T03:23:02Z state=waiting:CrashLoopBackOff seen=live",
		"RESTART aether-test/svc-1-7b44-x7k2p/identity-ready restarts=1 new=1 lastReason=Error exitCode=1 finishedAt=2026-10-05T03:23:30Z state=terminated:Completed seen=live",
	} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("missing line %q", want)
		}
	}
	if strings.Contains(stdout, "aether-agent-q8w2n") {
		t.Error("the agent's replacement pod is listed as a restart")
	}
	if strings.Contains(stdout, "RESTART aether-system/aether-agent-7ddgc/agent restarts=2") {
		t.Error("the agent's restarts before the baseline are counted")
	}
}

func TestLogAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "restart-watch.log")
	if err := os.WriteFile(path, []byte("earlier run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--log", path}, shortWatch...)
	first, _ := run(t, context.Background(), newClient(cleanScene), args...)
	second, _ := run(t, context.Background(), newClient(cleanScene), args...)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "earlier run\n" + first + second; string(got) != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
}

// TestSignalAtEveryCall stops the watch with a signal during each API call
// of a run in turn (the reactor cancels the context while the call is in
// flight) and during the waits, and checks the summary and the exit code
// each time.
func TestSignalAtEveryCall(t *testing.T) {
	for _, scene := range []struct {
		name  string
		scene func() script
	}{
		{"clean", func() script { return cleanScene }},
		{"restarts", restartScene},
		{"errors", errorScene},
	} {
		t.Run(scene.name, func(t *testing.T) {
			// The calls of an uninterrupted run: the baseline and 3 samples
			// of 3 namespaces.
			const calls = 12
			var golden strings.Builder
			for k := 1; k <= calls+1; k++ {
				for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
					if sig == syscall.SIGINT && k%4 != 1 {
						continue // INT differs only in its name and code
					}
					ctx, cancel := context.WithCancelCause(context.Background())
					client := newClient(scene.scene())
					n := 0
					client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
						n++
						if n == k {
							cancel(&cli.SignalError{Signal: sig})
						}
						return false, nil, nil
					})
					stdout, code := run(t, ctx, client, shortWatch...)
					cancel(nil)
					lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
					last := lines[len(lines)-1]
					wantCode, wantEnded := cli.ExitTerminated, "ended=TERM"
					if sig == syscall.SIGINT {
						wantCode, wantEnded = cli.ExitInterrupted, "ended=INT"
					}
					if k > calls {
						// No call left to interrupt: the run completed.
						wantEnded = "ended=complete"
						wantCode = map[string]int{"clean": 0, "restarts": 1, "errors": 3}[scene.name]
					}
					if code != wantCode || !strings.Contains(last, wantEnded) || !strings.HasPrefix(last, "SUMMARY restart-watch ") {
						t.Errorf("%v at call %d: exit %d, last line %q; want exit %d and %s", sig, k, code, last, wantCode, wantEnded)
					}
					if k <= calls && strings.Contains(last, "verdict=PASS") {
						t.Errorf("%v at call %d: a cut-short run passed: %s", sig, k, last)
					}
					if got := len(client.Actions()); got != min(k, calls) {
						t.Errorf("%v at call %d: %d calls made, want %d (no call after the signal)", sig, k, got, min(k, calls))
					}
					fmt.Fprintf(&golden, "%s at call %d: exit %d\n", sig, k, code)
					for _, l := range lines {
						if strings.HasPrefix(l, "SUMMARY") {
							fmt.Fprintf(&golden, "  %s\n", l)
						}
					}
				}
			}
			kubetest.Golden(t, filepath.Join("testdata", "signal-"+scene.name+".golden"), golden.String(), *update)
		})
	}
}

// TestSignalWhileWaiting stops the watch during each of its waits.
func TestSignalWhileWaiting(t *testing.T) {
	for wait := 1; wait <= 3; wait++ {
		ctx, cancel := context.WithCancelCause(context.Background())
		client := newClient(cleanScene)
		clk := clock.NewFake(t0)
		env := Env{NewClient: func(string, string) (kubernetes.Interface, error) { return client, nil }, Clock: clk}
		var stdout bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- RunEnv(ctx, env, shortWatch, &stdout, &bytes.Buffer{}) }()
		for i := 1; i <= wait; i++ {
			if err := clk.WaitForSleepers(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			if i < wait {
				clk.Advance(2 * time.Minute)
			}
		}
		cancel(&cli.SignalError{Signal: syscall.SIGTERM})
		code := cli.Code(<-done)
		reason := "cut-short"
		if wait == 1 {
			reason = "cut-short,no-samples"
		}
		want := fmt.Sprintf("SUMMARY restart-watch verdict=UNPROVEN reason=%s new_restarts=0 containers=0 samples=%d error_samples=0 baseline=1 ended=TERM", reason, wait-1)
		if code != 143 || !strings.Contains(stdout.String(), want) {
			t.Errorf("TERM in wait %d: exit %d, output:\n%s\nwant exit 143 and %q", wait, code, stdout.String(), want)
		}
	}
}

func TestPreflight(t *testing.T) {
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		forbid  string // namespace whose pods may not be listed
		code    int
	}{
		{"preflight-pass", []runtime.Object{ns("aether-system"), ns("aether-ingress"), ns("aether-test")}, "", 0},
		{"preflight-fail", []runtime.Object{ns("aether-system"), ns("aether-test")}, "aether-test", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objects...)
			client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetNamespace() == tc.forbid {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC: access denied"))
				}
				return false, nil, nil
			})
			stdout, code := run(t, context.Background(), client, "--preflight", "--namespaces", strings.Join(namespaces, ","))
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			kubetest.Golden(t, filepath.Join("testdata", tc.name+".golden"), transcript(stdout, client, code), *update)
		})
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // substring of the error; "" for none
	}{
		{[]string{"--namespaces", "a,b"}, ""},
		{[]string{}, "--namespaces is required"},
		{[]string{"--namespaces", "a,,b"}, "empty name"},
		{[]string{"--namespaces", "a,a"}, "listed twice"},
		{[]string{"--namespaces", "Bad_NS"}, "namespace \"Bad_NS\""},
		{[]string{"--namespaces", "a", "--interval", "0s", "--duration", "-1h"}, "--interval must be positive"},
		{[]string{"--namespaces", "a", "--duration", "0s"}, "--duration must be positive"},
		{[]string{"--namespaces", "a", "extra"}, "unexpected arguments"},
		{[]string{"--nope"}, "flag provided but not defined"},
	} {
		_, help, err := parseFlags(tc.args, &bytes.Buffer{})
		if help {
			t.Errorf("%v: taken as --help", tc.args)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	// Bare integers are seconds, as restart-watch.sh's --interval took them.
	o, _, err := parseFlags([]string{"--namespaces", "a", "--interval", "120", "--duration", "30600"}, &bytes.Buffer{})
	if err != nil || o.Interval != 2*time.Minute || o.Duration != 8*time.Hour+30*time.Minute {
		t.Errorf("--interval 120 --duration 30600: %v %v, %v; want 2m0s 8h30m0s", o.Interval, o.Duration, err)
	}
	o, _, err = parseFlags([]string{"--namespaces", "a, b", "--interval", "30s", "--duration", "1h", "--log", "x.log", "--context", "kind-soak"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintln(o.Namespaces, o.Interval, o.Duration, o.LogPath, o.Context, o.BaselineAttempts, o.BaselineRetry); got != "[a b] 30s 1h0m0s x.log kind-soak 5 10s\n" {
		t.Errorf("options %s", got)
	}
	// A flag error and --help: the latter exits 0 and documents the lines.
	var stderr bytes.Buffer
	err = RunEnv(context.Background(), Env{}, []string{"--help"}, &bytes.Buffer{}, &stderr)
	if err != nil || !strings.Contains(stderr.String(), "SUMMARY restart-watch verdict=PASS|FAIL|UNPROVEN") {
		t.Errorf("--help: %v\n%s", err, stderr.String())
	}
	if code := cli.Code(RunEnv(context.Background(), Env{}, nil, &bytes.Buffer{}, &bytes.Buffer{})); code != 2 {
		t.Errorf("no flags: exit %d, want 2", code)
	}
}
