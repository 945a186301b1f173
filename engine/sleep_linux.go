//go:build linux

package engine

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sleeper blocks a pacer until its next due time. On Linux it is a
// timerfd read through the runtime's network poller: the timer has
// nanosecond precision (the runtime's own timers wake an idle process on
// millisecond boundaries, which would make most sends of a slow pacer up to
// a millisecond late), the waiting goroutine parks like any network read
// without holding a thread in a system call, and pacers due at the same
// instant (executions of a stage share their start) wake together.
//
// Arming the timer is a raw system call (see rawSocket): it does not
// block, and a pacer that wakes once a millisecond would otherwise wake the
// runtime's monitor thread each time. The timer is never read (see done).
type sleeper struct {
	f      *os.File
	rc     syscall.RawConn
	readFn func(fd uintptr) bool // s.done, bound once
	until  int64                 // when the sleep in progress ends (nanotime)
	fd     int
	its    unix.ItimerSpec

	// woken is set by wake: a sleep that armed the timer after wake did
	// would otherwise lose the wake (arming resets the timer).
	woken atomic.Bool

	mu     sync.Mutex // guards the fd against a wake after close
	closed bool
}

// clockBase is the origin of nanotime.
var clockBase = time.Now()

// nanotime reads the monotonic clock, in ns since clockBase.
func nanotime() int64 { return int64(time.Since(clockBase)) }

func newSleeper() (*sleeper, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	s := &sleeper{f: f, rc: rc, fd: fd}
	s.readFn = s.done
	return s, nil
}

// settime arms the timer relative to now (a zero its disarms it).
func (s *sleeper) settime(its *unix.ItimerSpec) syscall.Errno {
	_, _, errno := syscall.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(s.fd), 0, uintptr(unsafe.Pointer(its)), 0, 0, 0)
	return errno
}

// sleep blocks for d (d > 0), or until wake.
func (s *sleeper) sleep(d time.Duration) {
	s.its.Value = unix.NsecToTimespec(int64(d))
	s.until = nanotime() + int64(d)
	if s.settime(&s.its) != 0 {
		time.Sleep(d)
		return
	}
	_ = s.rc.Read(s.readFn)
}

// done says the sleep is over. The timer is never read, which saves a
// system call per sleep: the runtime's poller is edge-triggered and
// reports every expiry as a new event, whatever the unread count, and the
// clock tells whether a wake-up is the one asked for (an event left from
// an earlier expiry, or from a wake, may come first).
func (s *sleeper) done(uintptr) bool {
	return s.woken.Load() || nanotime() >= s.until
}

// wake ends a sleep in progress, or the next one, at once. Any goroutine
// may call it.
func (s *sleeper) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.woken.Store(true)
	its := unix.ItimerSpec{Value: unix.Timespec{Nsec: 1}}
	_ = s.settime(&its)
}

func (s *sleeper) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		_ = s.f.Close()
	}
}
