package local

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
)

// These tests run soak local's driver step with the test binary as the
// driver (a fake one, see fakeDriver): real child processes, no engines,
// no targets, no load.

// driverLocal is a soak local run with only what its driver step needs.
func driverLocal(t *testing.T, mode string, faults ...Fault) *local {
	t.Helper()
	t.Setenv(childEnv, mode)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultLocalOptions()
	o.Faults = faults
	l := &local{
		o: o, self: self, dir: t.TempDir(), stderr: io.Discard,
		log:      slog.New(slog.DiscardHandler),
		services: map[string]frontend{},
		replicas: map[string]*replica{},
	}
	t.Cleanup(l.stopAll)
	return l
}

// TestLocalDriverRefusesPlan: a plan the driver refuses is unusable input,
// exit 2, as the README and the message say.
func TestLocalDriverRefusesPlan(t *testing.T) {
	l := driverLocal(t, driverRefuses)
	err := l.runDriver(context.Background())
	if code := cli.Code(err); code != cli.ExitUsage {
		t.Fatalf("exit %d (%v), want %d", code, err, cli.ExitUsage)
	}
	if !strings.Contains(err.Error(), "refused the rendered plan (exit 2)") {
		t.Errorf("error %q does not say the driver refused the plan", err)
	}
}

// TestLocalDriverEndsBeforeItsFaults: the driver ends while the faults it
// was given are still scheduled; the step waits for every scheduled fault
// to be called off. Under -race, arming a fault after the step began to
// wait for them is a reported race on the WaitGroup.
func TestLocalDriverEndsBeforeItsFaults(t *testing.T) {
	l := driverLocal(t, driverEndsEarly,
		Fault{Kind: EngineKill, Subject: "node-a", At: 50 * time.Second},
		Fault{Kind: EngineFreeze, Subject: "node-b", At: 40 * time.Second, For: time.Second})
	if err := l.runDriver(context.Background()); err != nil {
		t.Fatalf("runDriver: %v", err)
	}
}

// cancelOn cancels when a line with prefix is written to it.
type cancelOn struct {
	prefix string
	cancel context.CancelFunc
	mu     sync.Mutex
	buf    bytes.Buffer
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	for _, l := range strings.Split(c.buf.String(), "\n") {
		if strings.HasPrefix(l, c.prefix) {
			c.cancel()
		}
	}
	return len(p), nil
}

// copyRun copies run directory files into dir. testdata/local holds two
// runs as the gate's fixtures have them: clean (every target passes) and
// cancelled (the report of an interrupted run).
func copyRun(t *testing.T, from, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(from, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocalInterruptedIsGraded: Ctrl-C during the load stops the driver,
// which writes the report of the cancelled run; that report is graded and
// its verdict printed, and the run exits with the gate's code.
func TestLocalInterruptedIsGraded(t *testing.T) {
	fixture := filepath.Join("testdata", "local", "cancelled")
	t.Setenv(reportEnv, filepath.Join(fixture, "report.json"))
	l := driverLocal(t, driverWritesOnStop)
	copyRun(t, fixture, l.dir, sharesFile, enginesFile)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.stderr = &cancelOn{prefix: "running ", cancel: cancel}
	if err := l.runDriver(ctx); err != nil {
		t.Fatalf("runDriver: %v", err)
	}
	if ctx.Err() == nil {
		t.Fatal("the run was not interrupted")
	}
	var stdout, stderr bytes.Buffer
	err := l.grade(ctx, &stdout, &stderr)
	if code := cli.Code(err); code != cli.ExitFail {
		t.Errorf("exit %d (%v), want the gate's 1", code, err)
	}
	if !strings.Contains(stdout.String(), "VERDICT FAIL") || !strings.Contains(stdout.String(), "the run was cancelled") {
		t.Errorf("the interrupted run's report was not graded:\n%s\n%s", stdout.String(), stderr.String())
	}
}

// TestLocalInterruptedNeverPasses: a run interrupted after its report was
// whole still exits 1: it did not run to its end.
func TestLocalInterruptedNeverPasses(t *testing.T) {
	l := driverLocal(t, "")
	copyRun(t, filepath.Join("testdata", "local", "clean"), l.dir, reportFile, sharesFile, enginesFile)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout bytes.Buffer
	err := l.grade(ctx, &stdout, io.Discard)
	if code := cli.Code(err); code != cli.ExitFail {
		t.Errorf("exit %d (%v), want 1", code, err)
	}
	if !strings.Contains(stdout.String(), "VERDICT PASS") {
		t.Errorf("the report was not graded:\n%s", stdout.String())
	}
	// Not interrupted, the same directory passes.
	stdout.Reset()
	if err := l.grade(context.Background(), &stdout, io.Discard); err != nil {
		t.Errorf("grade: %v\n%s", err, stdout.String())
	}
}

// TestLocalFaultPostIsBounded: a target-down fault posts to the target's
// control endpoint; one that takes the request and never answers must not
// hold the fault's goroutine, which the run's end waits for.
func TestLocalFaultPostIsBounded(t *testing.T) {
	if got := (&local{}).control().Timeout; got != defaultControlTimeout || got <= 0 {
		t.Errorf("control client timeout %s, want %s", got, defaultControlTimeout)
	}
	answered := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers; ends when the client gives up
		close(answered)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	l := &local{
		log:            slog.New(slog.NewTextHandler(&logs, nil)),
		replicas:       map[string]*replica{"svc-1": {control: srv.Listener.Addr().String()}},
		controlTimeout: 50 * time.Millisecond,
	}
	l.inject(context.Background(), Fault{Kind: TargetDown, Subject: "svc-1", For: time.Second})
	<-answered
	if !strings.Contains(logs.String(), "fault: control endpoint") {
		t.Errorf("the unanswered post was not logged as a failed fault:\n%s", logs.String())
	}
}
