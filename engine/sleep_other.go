//go:build !linux

package engine

import "time"

// sleeper blocks a pacer until its next due time. Outside Linux it is a
// runtime timer, whose precision on an idle process is coarser.
type sleeper struct {
	t     *time.Timer
	woken chan struct{}
}

func newSleeper() (*sleeper, error) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &sleeper{t: t, woken: make(chan struct{}, 1)}, nil
}

// sleep blocks for d (d > 0), or until wake.
func (s *sleeper) sleep(d time.Duration) {
	s.t.Reset(d)
	select {
	case <-s.t.C:
	case <-s.woken:
		s.t.Stop()
	}
}

// wake ends a sleep in progress, or the next one, at once.
func (s *sleeper) wake() {
	select {
	case s.woken <- struct{}{}:
	default:
	}
}

func (s *sleeper) close() { s.t.Stop() }
