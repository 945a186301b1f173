package lab

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Exec runs the host commands the lab needs (ip, iptables, apt-get, go,
// ctr). Tests that check what would run replace it.
type Exec interface {
	// Run runs args[0] with the other args and returns its combined output.
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// HostExec runs commands on this machine with Env as their environment.
type HostExec struct {
	Env []string
	// Dir is the working directory ("" for the lab's own).
	Dir string
}

var _ Exec = HostExec{}

// Run runs the command and returns its combined output.
func (h HostExec) Run(ctx context.Context, args ...string) ([]byte, error) {
	if len(args) == 0 {
		return nil, errors.New("exec: no command")
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = h.Env
	cmd.Dir = h.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// runAll runs each command, stopping at the first that fails.
func runAll(ctx context.Context, x Exec, cmds [][]string) error {
	for _, c := range cmds {
		if out, err := x.Run(ctx, c...); err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
