//go:build !linux

package bench

import (
	"errors"
	"os/exec"
	"syscall"
)

// cpuAllowed is false off Linux: the bench cannot pin there.
func cpuAllowed(int) bool { return false }

// startPinned is not available off Linux.
func startPinned(cmd *exec.Cmd, cpu, nice int) error {
	if cpu < 0 && nice == 0 {
		return cmd.Start()
	}
	return errors.New("cpu pinning and nice values need linux")
}

func childAttr() *syscall.SysProcAttr { return nil }
