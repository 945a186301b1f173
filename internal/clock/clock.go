// Package clock lets long-running programs wait on time without sleeping
// for real in tests: programs take a Clock, main passes Real, and tests
// pass a Fake they advance by hand. A program that waits for time or for
// something else, whichever comes first, selects on a Timer's channel.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is the time source of a program.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, and returns ctx.Err() in the
	// latter case.
	Sleep(ctx context.Context, d time.Duration) error
	// NewTimer starts a timer that delivers the clock's time on its
	// channel once, d from now (at once for d <= 0).
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	// C delivers the time the timer fired; it is buffered, so a timer
	// nobody reads never blocks the clock.
	C() <-chan time.Time
	// Stop keeps the timer from firing. It reports whether it did: false
	// when the timer had already fired or been stopped.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Sleep waits for d on a timer, or until ctx is done.
func (Real) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// NewTimer starts a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

var _ Clock = Real{}

// Fake is a clock that moves only when told. Sleepers wake, and timers
// fire, when Advance moves the time to or past their deadline; a pending
// timer counts as a sleeper (its owner waits on it).
type Fake struct {
	mu       sync.Mutex
	now      time.Time
	sleepers []*sleeper
	// changed is closed and replaced whenever a sleeper is added, so a test
	// can wait until the program under test is blocked.
	changed chan struct{}
}

// sleeper is a goroutine in Sleep (done is closed to wake it) or a pending
// timer (c receives the time).
type sleeper struct {
	until time.Time
	done  chan struct{}
	c     chan time.Time
}

func (s *sleeper) wake(now time.Time) {
	if s.c != nil {
		s.c <- now // buffered, and fired once
		return
	}
	close(s.done)
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake clock at t.
func NewFake(t time.Time) *Fake {
	return &Fake{now: t, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Sleep blocks until Advance reaches now+d or ctx is done.
func (f *Fake) Sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	if d <= 0 {
		f.mu.Unlock()
		return ctx.Err()
	}
	s := &sleeper{until: f.now.Add(d), done: make(chan struct{})}
	f.add(s)
	f.mu.Unlock()
	select {
	case <-ctx.Done():
		f.mu.Lock()
		f.remove(s)
		f.mu.Unlock()
		return ctx.Err()
	case <-s.done:
		return nil
	}
}

// add registers a sleeper and tells WaitForSleepers; f.mu is held.
func (f *Fake) add(s *sleeper) {
	f.sleepers = append(f.sleepers, s)
	close(f.changed)
	f.changed = make(chan struct{})
}

// remove unregisters a sleeper that has not woken; f.mu is held. It
// reports whether s was still waiting.
func (f *Fake) remove(s *sleeper) bool {
	for i, o := range f.sleepers {
		if o == s {
			f.sleepers = append(f.sleepers[:i], f.sleepers[i+1:]...)
			return true
		}
	}
	return false
}

// NewTimer starts a timer that fires when Advance reaches now+d; for
// d <= 0 it has fired already.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &sleeper{until: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		s.c <- f.now
		return &fakeTimer{f: f, s: s}
	}
	f.add(s)
	return &fakeTimer{f: f, s: s}
}

type fakeTimer struct {
	f *Fake
	s *sleeper
}

func (t *fakeTimer) C() <-chan time.Time { return t.s.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.remove(t.s)
}

// Advance moves the clock forward by d and wakes every sleeper (and fires
// every timer) whose deadline has come, earliest first.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	sort.SliceStable(f.sleepers, func(i, j int) bool { return f.sleepers[i].until.Before(f.sleepers[j].until) })
	kept := f.sleepers[:0]
	for _, s := range f.sleepers {
		if !s.until.After(f.now) {
			s.wake(f.now)
			continue
		}
		kept = append(kept, s)
	}
	f.sleepers = kept
}

// Sleepers returns how many goroutines are blocked in Sleep, plus the
// timers that have not fired nor been stopped.
func (f *Fake) Sleepers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sleepers)
}

// WaitForSleepers blocks until at least n goroutines are blocked in Sleep
// (or timers pending), or ctx is done. Tests call it before Advance so the program under test is
// known to be waiting.
func (f *Fake) WaitForSleepers(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.sleepers) >= n {
			f.mu.Unlock()
			return nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Drive advances the clock by step each time a goroutine sleeps on it,
// until done delivers the program's result. It gives up after steps
// advances, so a test of a program that never ends fails instead of
// hanging: ended is false then.
func (f *Fake) Drive(step time.Duration, steps int, done <-chan error) (err error, ended bool) {
	for range steps {
		wctx, cancel := context.WithCancel(context.Background())
		sleeping := make(chan error, 1)
		go func() { sleeping <- f.WaitForSleepers(wctx, 1) }()
		select {
		case err := <-done:
			cancel()
			return err, true
		case <-sleeping:
			cancel()
			f.Advance(step)
		}
	}
	return nil, false
}
