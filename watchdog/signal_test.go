package watchdog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/internal/kube"
)

// apiServer is a loopback stand-in for the API server: it answers pod lists
// until the hang-th one, which it holds open until the client goes away, and
// calls onHang when that request arrives.
type apiServer struct {
	*httptest.Server
	mu        sync.Mutex
	lists     int
	hang      int
	onHang    func()
	abandoned chan struct{} // closed when the held request's client gave up
}

func newAPIServer(t *testing.T, hang int, onHang func()) *apiServer {
	s := &apiServer{hang: hang, onHang: onHang, abandoned: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/pods") {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		s.lists++
		n := s.lists
		s.mu.Unlock()
		if n == s.hang {
			s.onHang()
			select {
			case <-r.Context().Done():
				close(s.abandoned)
			case <-time.After(time.Minute): // a guard against a hung test only
			}
			return
		}
		ns := strings.Split(r.URL.Path, "/")[4]
		l := corev1.PodList{Items: []corev1.Pod{pod(ns, "p-"+ns, "uid-"+ns, ctr{name: "app"})}}
		l.APIVersion, l.Kind = "v1", "PodList"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&l)
	}))
	t.Cleanup(s.Close)
	return s
}

// kubeconfig writes a kubeconfig for url and returns its path.
func kubeconfig(t *testing.T, url string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: loop, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: loop, context: {cluster: loop, user: u}}]
current-context: loop
`, url)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSignalMidRequest sends the signal while a real HTTP list request is in
// flight: the request must be abandoned (its context cancelled), not waited
// for, and the run must end with the summary and 143.
func TestSignalMidRequest(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	// Call 5 is the second namespace of the first sample.
	srv := newAPIServer(t, 5, func() { cancel(&cli.SignalError{Signal: syscall.SIGTERM}) })
	clk := clock.NewFake(t0)
	env := Env{
		NewClient: func(path, context string) (kubernetes.Interface, error) {
			return kube.NewClient(path, context, "sortie-watchdog-test")
		},
		Clock: clk,
	}
	var stdout bytes.Buffer
	done := make(chan error, 1)
	args := []string{"--kubeconfig", kubeconfig(t, srv.URL), "--namespaces", "a,b,c", "--interval", "2m", "--duration", "6m"}
	go func() { done <- RunEnv(ctx, env, args, &stdout, &bytes.Buffer{}) }()
	code := cli.Code(drive(t, clk, 10*time.Second, done))
	// The server notices the closed request a moment after the client
	// gave up; the bound only guards a hang.
	select {
	case <-srv.abandoned:
	case <-time.After(30 * time.Second):
		t.Error("the in-flight request was not cancelled")
	}
	want := "SUMMARY restart-watch verdict=UNPROVEN reason=cut-short,no-samples new_restarts=0 containers=0 samples=0 error_samples=0 baseline=0 ended=TERM"
	if code != cli.ExitTerminated || !strings.Contains(stdout.String(), want) {
		t.Errorf("exit %d, output:\n%s\nwant 143 and %q", code, stdout.String(), want)
	}
}

// TestIntegrationBinarySignal builds sortie-watchdog and sends it a real
// SIGTERM and SIGINT while it waits for an API answer.
func TestIntegrationBinarySignal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "sortie-watchdog")
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/sortie-watchdog")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
		end  string
	}{
		{syscall.SIGTERM, 143, "ended=TERM"},
		{syscall.SIGINT, 130, "ended=INT"},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			arrived := make(chan struct{})
			var once sync.Once
			srv := newAPIServer(t, 4, func() { once.Do(func() { close(arrived) }) })
			logPath := filepath.Join(t.TempDir(), "watch.log")
			cmd := exec.Command(bin, "--kubeconfig", kubeconfig(t, srv.URL), "--namespaces", "a,b",
				"--interval", "1s", "--duration", "1h", "--log", logPath)
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-arrived:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				t.Fatal("the watchdog never made its fourth call")
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Errorf("exit %d (%v), want %d", got, err, tc.code)
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "SUMMARY restart-watch verdict=UNPROVEN") || !strings.Contains(last, tc.end) {
				t.Errorf("last line %q", last)
			}
			logged, _ := os.ReadFile(logPath)
			if string(logged) != stdout.String() {
				t.Errorf("log differs from stdout:\n%s", logged)
			}
		})
	}
}
