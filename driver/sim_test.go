package driver

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

// sim runs the driver's deadline loop on a fake clock against scripted
// engines on loopback, and moves the time only when nothing else can
// happen first: the loop waits on its timer and has taken every event the
// engines sent, the engines handled every Cancel it sent, and every
// engine waits for a time or a cancel. A gRPC message in flight is never
// overtaken by the clock, however slow the machine, and no test waits for
// real time to pass.
//
// clock.Fake.Drive, which advances on any sleeper, cannot do this here:
// the loop sleeps on its timer while an answer is still on the wire.
type sim struct {
	clk  *clock.Fake
	mu   sync.Mutex
	cond *sync.Cond

	// waiting and loop come from the deadline loop (runner.onWait);
	// waiting is cleared when the time is moved to the loop's timer.
	waiting bool
	loop    waitState
	// sent counts the events the engines put on the wire (Started, a
	// Result, the end of a stream without one); cancels the Cancel RPCs
	// they handled; busy their goroutines that neither wait nor ended.
	sent, cancels, busy int
	gates               []*gate
	finished            bool
}

// gate is what a scripted engine waits for: a time on the fake clock, or
// (at zero) a Cancel.
type gate struct {
	at      time.Time
	ch      chan struct{}
	opened  bool
	waiting bool
}

// simStart is the fake time a sim starts at: the stage's dispatch.
var simStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newSim() *sim {
	s := &sim{clk: clock.NewFake(simStart)}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// onWait is the runner's hook: the loop is about to block.
func (s *sim) onWait(w waitState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting, s.loop = true, w
	s.cond.Broadcast()
}

func (s *sim) quiet() bool {
	return s.waiting && s.loop.unstarted == 0 && s.loop.probing == 0 && s.loop.taken == s.sent && s.loop.cancels == s.cancels && s.busy == 0
}

// settle waits until the run is quiet, or over: it reports false then.
func (s *sim) settle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.finished && !s.quiet() {
		s.cond.Wait()
	}
	return !s.finished
}

// step moves the clock to the next thing due, the loop's timer or an
// engine's time, and opens the engines' gates that are due.
func (s *sim) step(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.loop.next
	for _, g := range s.gates {
		if !g.opened && g.at.Before(next) {
			next = g.at
		}
	}
	if now := s.clk.Now(); next.After(now) {
		if !s.loop.next.After(next) {
			s.waiting = false // the loop wakes on its timer
		}
		s.clk.Advance(next.Sub(now))
	}
	s.openDue()
}

// jump moves the clock by d at once, as a driver process that was not
// running sees it: the loop's timer fires late; no gate is opened.
func (s *sim) jump(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = false
	s.clk.Advance(d)
}

// openDue opens every time gate that is due; s.mu is held.
func (s *sim) openDue() {
	now := s.clk.Now()
	kept := s.gates[:0]
	for _, g := range s.gates {
		if g.at.After(now) {
			kept = append(kept, g)
			continue
		}
		s.open(g)
	}
	s.gates = kept
}

// open wakes whoever waits at g, counting it busy first; s.mu is held.
func (s *sim) open(g *gate) {
	if g.opened {
		return
	}
	g.opened = true
	if g.waiting {
		s.busy++
	}
	close(g.ch)
	s.cond.Broadcast()
}

// wait blocks an engine goroutine at g until it opens or ctx is done.
func (s *sim) wait(ctx context.Context, g *gate) error {
	s.mu.Lock()
	if g.opened {
		s.mu.Unlock()
		return nil
	}
	g.waiting = true
	s.busy--
	s.cond.Broadcast()
	s.mu.Unlock()
	select {
	case <-g.ch:
		return nil // open counted it busy
	case <-ctx.Done():
		s.mu.Lock()
		if !g.opened {
			g.waiting = false
			s.busy++
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// until blocks an engine goroutine until the fake clock reads at.
func (s *sim) until(ctx context.Context, at time.Time) error {
	g := &gate{at: at, ch: make(chan struct{})}
	s.mu.Lock()
	if !at.After(s.clk.Now()) {
		s.mu.Unlock()
		return nil
	}
	s.gates = append(s.gates, g)
	s.mu.Unlock()
	return s.wait(ctx, g)
}

func newCancelGate() *gate { return &gate{ch: make(chan struct{})} }

// cancelled records a Cancel RPC, opening the execution's gate (nil when
// the engine does not know the execution).
func (s *sim) cancelled(g *gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g != nil {
		s.open(g)
	}
	s.cancels++
	s.cond.Broadcast()
}

// emit counts an event an engine is about to put on the wire.
func (s *sim) emit() { s.add(&s.sent, 1) }

// enter and leave bracket an engine goroutine's work.
func (s *sim) enter() { s.add(&s.busy, 1) }
func (s *sim) leave() { s.add(&s.busy, -1) }

// expect counts an event no scripted engine sends (a backend nothing
// listens on fails its stream once).
func (s *sim) expect(n int) { s.add(&s.sent, n) }

func (s *sim) add(p *int, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*p += n
	s.cond.Broadcast()
}

// run runs the scenarios on the sim's clock, moving it as they need, and
// returns the report and the driver's output lines.
func (s *sim) run(t *testing.T, ctx context.Context, o Options, scenarios []*scenarioRun) (*record.Report, string) {
	t.Helper()
	wait := s.start(t, ctx, o, scenarios)
	s.drive(t)
	return wait()
}

// start starts the scenarios on the sim's clock; wait returns the report
// and the driver's output lines once the run is over.
func (s *sim) start(t *testing.T, ctx context.Context, o Options, scenarios []*scenarioRun) (wait func() (*record.Report, string)) {
	t.Helper()
	o.Clock = s.clk
	var lines bytes.Buffer
	r := &runner{opts: o, log: o.Logger, lines: &lineWriter{w: &lines}, runID: "test", onWait: s.onWait}
	type ran struct {
		rep *record.Report
		err error
	}
	done := make(chan ran, 1)
	go func() {
		defer r.close()
		rep, err := r.run(ctx, scenarios, nil)
		s.mu.Lock()
		s.finished = true
		s.cond.Broadcast()
		s.mu.Unlock()
		done <- ran{rep, err}
	}()
	return func() (*record.Report, string) {
		t.Helper()
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		return res.rep, lines.String()
	}
}

// drive moves the clock, each time the run is quiet, until it is over.
func (s *sim) drive(t *testing.T) {
	t.Helper()
	for s.settle() {
		s.step(t)
	}
}
