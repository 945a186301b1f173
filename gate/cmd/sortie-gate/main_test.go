package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestIntegrationBinary builds sortie-gate and runs it on fixtures of the
// gate package: the exit codes and the one printed error are main's job.
func TestIntegrationBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if os.Getenv("TEST_SRCDIR") != "" {
		t.Skip("under bazel: the go command is not in the sandbox")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	bin := filepath.Join(t.TempDir(), "sortie-gate")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	td := filepath.Join("..", "..", "testdata")
	for _, tc := range []struct {
		args     []string
		code     int
		stdout   string
		stderr   string
		noStdout bool
	}{
		{args: []string{"--dir", filepath.Join(td, "clean")}, code: 0, stdout: "VERDICT PASS targets=3 "},
		{args: []string{"--dir", filepath.Join(td, "lost-nothing")}, code: 1, stdout: "VERDICT FAIL "},
		{args: []string{"--dir", filepath.Join(td, "garbage")}, code: 2, stderr: "sortie-gate: report ", noStdout: true},
		{args: []string{"--dir", filepath.Join(td, "empty")}, code: 3, stdout: "VERDICT UNOBSERVED "},
		{args: []string{"--report", "r.json", "--stream", "s.jsonl"}, code: 2, stderr: "sortie-gate: --report and --stream are exclusive", noStdout: true},
	} {
		cmd := exec.Command(bin, tc.args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s%s", tc.args, code, tc.code, stdout.String(), stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.stdout) {
			t.Errorf("%v: stdout lacks %q:\n%s", tc.args, tc.stdout, stdout.String())
		}
		if tc.noStdout && stdout.Len() > 0 {
			t.Errorf("%v: stdout should be empty, got %q", tc.args, stdout.String())
		}
		if !strings.HasPrefix(stderr.String(), tc.stderr) || strings.Count(stderr.String(), "sortie-gate:") > 1 {
			t.Errorf("%v: stderr %q, want one error starting %q", tc.args, stderr.String(), tc.stderr)
		}
		if tc.stderr == "" && stderr.Len() > 0 {
			t.Errorf("%v: unexpected stderr %q", tc.args, stderr.String())
		}
	}
	_ = os.Remove(bin)
}
