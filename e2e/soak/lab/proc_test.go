package lab

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/clock"
)

func TestParsePidFile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PidFile
		ok   bool
	}{
		{"123 456\n", PidFile{123, 456}, true},
		{"123", PidFile{}, false},
		{"1 5", PidFile{}, false}, // never pid 1
		{"x 5", PidFile{}, false},
		{"12 -5", PidFile{}, false},
		{"12 5 6", PidFile{}, false},
	} {
		got, err := ParsePidFile([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePidFile(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	p := PidFile{PID: 42, Start: 7}
	if got, err := ParsePidFile(p.Format()); err != nil || got != p {
		t.Errorf("round trip of %v: %v, %v", p, got, err)
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc shows it.
	line := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615"
	got, err := ParseProcStat(line)
	if err != nil || got.State != 'S' || got.Start != 987654 {
		t.Errorf("ParseProcStat = %+v, %v; want state S start 987654", got, err)
	}
	if _, err := ParseProcStat("4242 (x) S 1 2"); err == nil {
		t.Error("a short line parsed")
	}
	if _, err := ParseProcStat("no parenthesis"); err == nil {
		t.Error("a line without a command name parsed")
	}
}

// TestDaemonStartStop starts a real process as a daemon, finds it in the
// pid files, and stops it with SIGTERM.
func TestDaemonStartStop(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	l := Layout{State: t.TempDir(), Nodes: 1}
	p, err := StartDaemon(l, os.Environ(), Daemon{Name: "sleeper", Path: sleep, Args: []string{"300"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartDaemon(l, os.Environ(), Daemon{Name: "sleeper", Path: sleep, Args: []string{"300"}}); err == nil {
		t.Error("a second start of a running daemon succeeded")
	}
	procs, err := Procs(l)
	if err != nil || len(procs) != 1 || !procs[0].Alive || procs[0].PidFile != p {
		t.Fatalf("Procs = %+v, %v; want the one live sleeper %+v", procs, err, p)
	}
	stopped, err := StopDaemon(context.Background(), clock.Real{}, l, "sleeper", 30*time.Second)
	if err != nil || !stopped {
		t.Fatalf("StopDaemon = %v, %v", stopped, err)
	}
	if p.alive() {
		t.Errorf("pid %d still alive after stop", p.PID)
	}
	if _, err := os.Stat(pidPath(l, "sleeper")); !os.IsNotExist(err) {
		t.Errorf("pid file left: %v", err)
	}
	if stopped, err := StopDaemon(context.Background(), clock.Real{}, l, "sleeper", time.Second); err != nil || stopped {
		t.Errorf("second stop = %v, %v; want nothing to do", stopped, err)
	}
}

// TestStopDaemonLeavesOtherProcess: a pid file whose start time is not the
// process's names a pid the kernel gave to another process; stop must not
// signal it.
func TestStopDaemonLeavesOtherProcess(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command")
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	l := Layout{State: t.TempDir(), Nodes: 1}
	st, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.Pids(), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := PidFile{PID: cmd.Process.Pid, Start: st.Start + 1}
	if err := os.WriteFile(pidPath(l, "old"), stale.Format(), 0o644); err != nil {
		t.Fatal(err)
	}
	stopped, err := StopDaemon(context.Background(), clock.Real{}, l, "old", time.Second)
	if err != nil || stopped {
		t.Errorf("StopDaemon = %v, %v; want nothing stopped", stopped, err)
	}
	if st2, err := readProcStat(cmd.Process.Pid); err != nil || st2.State == 'Z' {
		t.Errorf("the other process was signalled: %+v, %v", st2, err)
	}
}

func TestStartDaemonLogs(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	l := Layout{State: t.TempDir(), Nodes: 1}
	p, err := StartDaemon(l, nil, Daemon{Name: "echo", Path: sh, Args: []string{"-c", "echo out; echo err >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WaitFor(context.Background(), clock.Real{}, "exit", time.Minute, func(context.Context) error {
		if p.alive() {
			return os.ErrExist
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(LogPath(l, "echo"))
	if got := string(b); !strings.Contains(got, "out\n") || !strings.Contains(got, "err\n") {
		t.Errorf("log %q lacks stdout and stderr", got)
	}
}
