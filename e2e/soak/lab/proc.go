package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

// Daemon is one long-running process of the lab.
type Daemon struct {
	// Name names its pid file and log file.
	Name string
	Path string
	Args []string
	// Env is added to the lab's own environment.
	Env []string
}

// PidFile is what the lab records of a process it started: the pid and
// the process's start time (field 22 of /proc/<pid>/stat), so that a pid
// the kernel has since given to another process is never signalled.
type PidFile struct {
	PID   int
	Start uint64
}

// ParsePidFile reads "<pid> <start time>".
func ParsePidFile(data []byte) (PidFile, error) {
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return PidFile{}, fmt.Errorf("pid file: want \"<pid> <start time>\", got %q", strings.TrimSpace(string(data)))
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 1 {
		return PidFile{}, fmt.Errorf("pid file: bad pid %q", f[0])
	}
	start, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return PidFile{}, fmt.Errorf("pid file: bad start time %q", f[1])
	}
	return PidFile{PID: pid, Start: start}, nil
}

// Format is the pid file's content.
func (p PidFile) Format() []byte { return fmt.Appendf(nil, "%d %d\n", p.PID, p.Start) }

// ProcStat is what the lab reads of /proc/<pid>/stat.
type ProcStat struct {
	State byte
	Start uint64
}

// ParseProcStat parses a /proc/<pid>/stat line. The command name, field 2,
// is in parentheses and may hold spaces and parentheses itself, so the
// fields are counted from the last ')'.
func ParseProcStat(line string) (ProcStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return ProcStat{}, errors.New("proc stat: no command name")
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return ProcStat{}, errors.New("proc stat: too few fields")
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("proc stat: start time: %w", err)
	}
	return ProcStat{State: f[0][0], Start: start}, nil
}

func readProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ProcStat{}, err
	}
	return ParseProcStat(string(b))
}

// alive reports whether p is still the process the lab started and has not
// exited (a zombie has exited).
func (p PidFile) alive() bool {
	st, err := readProcStat(p.PID)
	return err == nil && st.Start == p.Start && st.State != 'Z' && st.State != 'X'
}

func pidPath(l Layout, name string) string { return filepath.Join(l.Pids(), name+".pid") }

// LogPath is the log file of the lab's process name.
func LogPath(l Layout, name string) string { return filepath.Join(l.Logs(), name+".log") }

// StartDaemon starts d in a session of its own, detached from the lab's
// command (which exits long before it), with stdout and stderr appended to
// its log file, and records it in its pid file.
func StartDaemon(l Layout, env []string, d Daemon) (PidFile, error) {
	for _, dir := range []string{l.Pids(), l.Logs()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return PidFile{}, err
		}
	}
	if p, err := readPidFile(l, d.Name); err == nil && p.alive() {
		return PidFile{}, fmt.Errorf("start %s: already running as pid %d", d.Name, p.PID)
	}
	logf, err := os.OpenFile(LogPath(l, d.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return PidFile{}, err
	}
	defer logf.Close()
	cmd := exec.Command(d.Path, d.Args...)
	cmd.Env = append(append([]string(nil), env...), d.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = l.State
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return PidFile{}, fmt.Errorf("start %s: %w", d.Name, err)
	}
	pid := cmd.Process.Pid
	st, err := readProcStat(pid)
	if err != nil {
		return PidFile{}, fmt.Errorf("start %s: read its start time: %w", d.Name, err)
	}
	p := PidFile{PID: pid, Start: st.Start}
	if err := record.WriteFile(pidPath(l, d.Name), p.Format(), 0o644); err != nil {
		return p, err
	}
	// The daemon outlives this process: let it go without waiting for it.
	go cmd.Wait() //nolint:errcheck // reaps it if it dies while up still runs
	return p, nil
}

func readPidFile(l Layout, name string) (PidFile, error) {
	b, err := os.ReadFile(pidPath(l, name))
	if err != nil {
		return PidFile{}, err
	}
	p, err := ParsePidFile(b)
	if err != nil {
		return PidFile{}, fmt.Errorf("%s: %w", pidPath(l, name), err)
	}
	return p, nil
}

// Proc is a process the lab recorded.
type Proc struct {
	Name    string
	PidFile PidFile
	Alive   bool
}

// Procs lists the processes of the lab's pid files, by name.
func Procs(l Layout) ([]Proc, error) {
	ents, err := os.ReadDir(l.Pids())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok {
			continue
		}
		p, err := readPidFile(l, name)
		if err != nil {
			return nil, err
		}
		out = append(out, Proc{Name: name, PidFile: p, Alive: p.alive()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// StopDaemon stops the lab's process name: SIGTERM, then SIGKILL after
// grace. The pid file goes once the process is gone. A process whose start
// time no longer matches is not the lab's and is left alone.
func StopDaemon(ctx context.Context, clk clock.Clock, l Layout, name string, grace time.Duration) (stopped bool, err error) {
	p, err := readPidFile(l, name)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if p.alive() {
		if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return false, fmt.Errorf("stop %s (pid %d): %w", name, p.PID, err)
		}
		if !waitGone(ctx, clk, p, grace) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			if !waitGone(ctx, clk, p, 10*time.Second) {
				return false, fmt.Errorf("stop %s: pid %d survived SIGKILL", name, p.PID)
			}
		}
		stopped = true
	}
	return stopped, os.Remove(pidPath(l, name))
}

// waitGone polls until p has exited or d has passed.
func waitGone(ctx context.Context, clk clock.Clock, p PidFile, d time.Duration) bool {
	end := clk.Now().Add(d)
	for p.alive() {
		if !clk.Now().Before(end) || clk.Sleep(ctx, 100*time.Millisecond) != nil {
			return !p.alive()
		}
	}
	return true
}
