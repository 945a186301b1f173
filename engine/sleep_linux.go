//go:build linux

package engine

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// sleeper blocks a pacer until its next due time. On Linux it is a
// timerfd read through the runtime's network poller: the timer has
// nanosecond precision (the runtime's own timers wake an idle process on
// millisecond boundaries, which would make most sends of a slow pacer up to
// a millisecond late), the waiting goroutine parks like any network read
// without holding a thread in a system call, and pacers due at the same
// instant (executions of a stage share their start) wake together.
type sleeper struct {
	f   *os.File
	fd  int
	its unix.ItimerSpec
	buf [8]byte

	// woken is set by wake: a sleep that armed the timer after wake did
	// would otherwise lose the wake (arming resets the timer).
	woken atomic.Bool

	mu     sync.Mutex // guards the fd against a wake after close
	closed bool
}

func newSleeper() (*sleeper, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	return &sleeper{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}, nil
}

// sleep blocks for d (d > 0), or until wake.
func (s *sleeper) sleep(d time.Duration) {
	s.its.Value = unix.NsecToTimespec(int64(d))
	if err := unix.TimerfdSettime(s.fd, 0, &s.its, nil); err != nil {
		time.Sleep(d)
		return
	}
	if s.woken.Load() {
		return
	}
	_, _ = s.f.Read(s.buf[:])
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
	_ = unix.TimerfdSettime(s.fd, 0, &its, nil)
}

func (s *sleeper) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		_ = s.f.Close()
	}
}

// shortSleep blocks the thread for d with nanosleep.
func shortSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil)
}
