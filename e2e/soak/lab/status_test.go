package lab

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
)

// TestStatusNamesDeadProcess: status lists each recorded process, and a
// recorded process that no longer runs makes it fail.
func TestStatusNamesDeadProcess(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	state := t.TempDir()
	l := Layout{State: state, Nodes: 1}
	if _, err := StartDaemon(l, os.Environ(), Daemon{Name: "etcd", Path: sleep, Args: []string{"300"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = StopDaemon(context.Background(), clock.Real{}, l, "etcd", time.Second) })
	var out, errb bytes.Buffer
	if err := Run(context.Background(), env(nil), []string{"status", "--state", state}, &out, &errb); err != nil {
		t.Fatalf("status of a running lab: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`(?m)^PROCESS etcd pid=\d+ running log=.*/logs/etcd\.log$`).MatchString(out.String()) ||
		!regexp.MustCompile(`(?m)^LAB UP processes=1$`).MatchString(out.String()) {
		t.Errorf("status:\n%s", out.String())
	}

	if err := os.WriteFile(pidPath(l, "kubelet-1"), PidFile{PID: 2, Start: 1}.Format(), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = Run(context.Background(), env(nil), []string{"status", "--state", state}, &out, &errb)
	if cli.Code(err) != cli.ExitFail || !regexp.MustCompile(`(?m)^PROCESS kubelet-1 pid=2 NOT RUNNING `).MatchString(out.String()) {
		t.Errorf("status with a dead process: %v\n%s", err, out.String())
	}
}
