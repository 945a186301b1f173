package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process of soak local: an engine, a target replica or
// the driver. Children die with their parent (Pdeathsig), so a killed soak
// leaves nothing running.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	once sync.Once
}

// startProc runs `self args...` with stdout and stderr going to out.
func startProc(name, self string, out io.Writer, args ...string) (*proc, error) {
	return startProcSplit(name, self, out, out, args...)
}

// startProcSplit runs `self args...` with its own stdout and stderr.
func startProcSplit(name, self string, stdout, stderr io.Writer, args ...string) (*proc, error) {
	cmd := exec.Command(self, args...)
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// signal sends sig unless the process already ended.
func (p *proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s already exited", p.name)
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process or ctx, and returns its exit code (-1 when
// it did not exit normally).
func (p *proc) wait(ctx context.Context) (int, error) {
	select {
	case <-ctx.Done():
		return -1, ctx.Err()
	case <-p.done:
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode(), nil
	}
	if p.err != nil {
		return -1, p.err
	}
	return 0, nil
}

// stop ends the process: SIGCONT (it may be frozen), SIGTERM, and SIGKILL
// after grace. Idempotent.
func (p *proc) stop(grace time.Duration) {
	p.once.Do(func() {
		if p.exited() {
			return
		}
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// waitFile waits until path exists with content that has every line of want
// count, or the process exits, or the timeout passes; it returns the content.
func waitFile(ctx context.Context, p *proc, path string, lines int, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.Count(string(b), "\n") >= lines {
			return string(b), nil
		}
		if p.exited() {
			return "", fmt.Errorf("%s exited before writing %s", p.name, path)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s did not write %s within %s", p.name, path, timeout)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
