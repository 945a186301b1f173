package driver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binaries built once per test run, for the tests that kill, stop and
// resume real processes.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if testTLSRun.dir != "" {
		os.RemoveAll(testTLSRun.dir)
	}
	os.Exit(code)
}

// binary builds (once) and returns the path of sortie-engine or sortie.
func binary(t *testing.T, name string) string {
	t.Helper()
	if os.Getenv("TEST_SRCDIR") != "" {
		// Bazel's sandbox has neither the go command nor the module; go
		// test, the toolchain of record, runs the process tests.
		t.Skip("under bazel: no go command to build the binaries with")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the binaries with")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "sortie-driver-test-bin-")
		if buildErr != nil {
			return
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		for bin, pkg := range map[string]string{
			"sortie-engine": "github.com/sortie-soak/sortie/engine/cmd/sortie-engine",
			"sortie":        "github.com/sortie-soak/sortie/driver/cmd/sortie",
		} {
			out, err := exec.Command(goBin, "build", "-o", filepath.Join(binDir, bin), pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// proc is a child process with its stderr kept.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr strings.Builder
	lines  chan string // stderr lines, for waiting on one
	done   chan struct{}
	err    error // from Wait, once done is closed
}

func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitLine waits for a stderr line holding s.
func (p *proc) waitLine(t *testing.T, s string, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("process ended before a line with %q:\n%s", s, p.Stderr())
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no line with %q within %v:\n%s", s, within, p.Stderr())
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("process still running after %v:\n%s", within, p.Stderr())
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("wait: %v", p.err)
	return -1
}

// start runs a child process. It is resumed (if stopped) and killed at the
// end of the test.
func start(t *testing.T, stdout io.Writer, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), lines: make(chan string, 1024), done: make(chan struct{})}
	if stdout != nil {
		p.cmd.Stdout = stdout
	}
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
	})
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		close(p.lines)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// startEngineProc runs sortie-engine on 127.0.0.1:0 and returns its address.
func startEngineProc(t *testing.T, args ...string) (string, *proc) {
	t.Helper()
	pr, pw := io.Pipe()
	p := start(t, pw, binary(t, "sortie-engine"), append(append([]string{"--listen", "127.0.0.1:0"}, engineTLSArgs()...), args...)...)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				addr <- a
			}
		}
	}()
	t.Cleanup(func() { pw.Close() })
	select {
	case a := <-addr:
		return a, p
	case <-time.After(20 * time.Second):
		t.Fatalf("engine did not say where it listens:\n%s", p.Stderr())
	}
	return "", nil
}

// waitServed waits until the target has served n requests.
func waitServed(t *testing.T, tg *target, n int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for tg.served.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("target served %d of %d requests within %v", tg.served.Load(), n, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runDriverAsync runs runDriver on a goroutine.
func runDriverAsync(t *testing.T, o Options, planPath string, extra ...string) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- runDriver(t, context.Background(), o, planPath, extra...) }()
	return ch
}
