package bench

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"
)

// cpuSet is a Linux cpu_set_t for up to 1024 CPUs.
type cpuSet [16]uint64

func (s *cpuSet) set(cpu int) { s[cpu/64] |= 1 << (uint(cpu) % 64) }

func (s *cpuSet) has(cpu int) bool {
	return cpu >= 0 && cpu < 64*len(s) && s[cpu/64]&(1<<(uint(cpu)%64)) != 0
}

// threadAffinity returns the CPUs the calling thread may run on.
func threadAffinity() (cpuSet, error) {
	var s cpuSet
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(s), uintptr(unsafe.Pointer(&s)))
	if e != 0 {
		return s, fmt.Errorf("sched_getaffinity: %w", e)
	}
	return s, nil
}

// setThreadAffinity restricts the calling thread to s.
func setThreadAffinity(s cpuSet) error {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(s), uintptr(unsafe.Pointer(&s)))
	if e != 0 {
		return fmt.Errorf("sched_setaffinity: %w", e)
	}
	return nil
}

// cpuAllowed says whether this process may run on cpu at all.
func cpuAllowed(cpu int) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := threadAffinity()
	return err == nil && s.has(cpu)
}

// startPinned starts cmd with every one of its threads allowed on cpu
// only (none: cpu < 0) and at nice value nice. A child inherits the CPU mask of the thread that forks it, and
// exec keeps it, so the forking thread is pinned for the duration of
// Start; pinning the child afterwards would miss the threads its runtime
// already started. The Go runtime creates no thread from a locked thread
// (it hands that to its template thread), so no bench thread inherits the
// mask meanwhile.
//
// The nice value is per thread on Linux and inherited the same way, so it
// is set on the forking thread too.
func startPinned(cmd *exec.Cmd, cpu, nice int) error {
	if cpu < 0 && nice == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var restore []func() error
	defer func() {
		for _, f := range restore {
			// Failing to undo leaves this thread pinned or reniced;
			// it cannot happen with a mask and a nice value the
			// thread had a moment ago.
			_ = f()
		}
	}()
	if cpu >= 0 {
		old, err := threadAffinity()
		if err != nil {
			return err
		}
		var one cpuSet
		one.set(cpu)
		if err := setThreadAffinity(one); err != nil {
			return fmt.Errorf("pin to cpu %d: %w", cpu, err)
		}
		restore = append(restore, func() error { return setThreadAffinity(old) })
	}
	if nice != 0 {
		tid := syscall.Gettid()
		// getpriority's raw result is 20 - nice.
		raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
		if err != nil {
			return fmt.Errorf("getpriority: %w", err)
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("nice %d: %w", nice, err)
		}
		restore = append(restore, func() error { return syscall.Setpriority(syscall.PRIO_PROCESS, tid, 20-raw) })
	}
	return cmd.Start()
}

// childAttr makes a child die with the bench, so a killed bench leaves no
// load running.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
