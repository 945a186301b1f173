package driver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/clock"
)

// Resolver looks up the A and AAAA records of a dns pool. *net.Resolver
// implements it; tests pass their own.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// Options tunes a run. Flags fill some of the fields; the rest are defaults
// that tests shrink. Zero values are not defaults: start from
// DefaultOptions.
type Options struct {
	// Resolver resolves dns pools. Nil means net.DefaultResolver.
	Resolver Resolver
	// ResolveInterval is the wait between two lookups of a dns pool whose
	// answer was empty (or failed).
	ResolveInterval time.Duration
	// ResolveTimeout is how long a dns pool may stay empty before the run
	// gives up (exit 2, before any load).
	ResolveTimeout time.Duration

	// StartLead is added to the dispatch time to make the stage's shared
	// start time: long enough for every Execute call to reach its engine.
	StartLead time.Duration
	// Drain is the time an engine is allowed after duration + timeout to
	// gather its last outcomes and answer.
	Drain time.Duration
	// Grace is the slack on top of duration + timeout + drain before a
	// backend's deadline.
	Grace time.Duration
	// AnswerWindow is how long after its deadline a backend's answer is
	// still awaited before the execution is cancelled on it.
	AnswerWindow time.Duration
	// CancelWait is how long a cancelled execution is given to answer
	// before its backend is named silent. Its default is derived from
	// the engine's bounded drain after a cancel (DefaultCancelWait); a
	// shorter wait may name silent an engine whose target stalls.
	CancelWait time.Duration
	// InterruptWait bounds the wait for answers after a run is interrupted
	// (SIGINT, SIGTERM) and every running execution was cancelled; the
	// same default.
	InterruptWait time.Duration
	// InfoTimeout bounds each Info call that reads what an engine is (the
	// report's made_by).
	InfoTimeout time.Duration
	// StatusTick is how often the engines report their counters while a
	// live status is shown (--status): the status moves at this pace, and
	// the progress lines keep their own --progress.
	StatusTick time.Duration
	// StatusRedraw is the shortest time between two redraws of the status
	// block on a terminal.
	StatusRedraw time.Duration
	// ClockSlack is how much later than asked a wait may wake before the
	// driver concludes it was itself stopped (SIGSTOP, a paused VM) and
	// restarts its pending deadlines from the moment it woke.
	ClockSlack time.Duration

	// RejoinInterval is how often the driver looks for an engine of a
	// lost backend's node that came back (a dns pool looked up again, a
	// services address dialled again), until the execution's last
	// request is due.
	RejoinInterval time.Duration
	// MaxRejoins bounds how many times an engine of one node may come
	// back within one execution: each rejoin is a segment the driver
	// keeps (a call and its timeline sums) and an entry of the run
	// manifest, and a node whose engine restarts this often is crash
	// looping. At the next loss the node is lost for the rest of the
	// execution, as without rejoin.
	MaxRejoins int

	// Clock is the driver's time: dispatch and start times, every
	// deadline phase and the timers that wait for them, the waits between
	// lookups of a dns pool. Nil means the wall clock (clock.Real).
	Clock clock.Clock
	// Pause, when set, is called by a stage's deadline loop before each
	// wait. Tests block in it to stand for a driver process that was
	// stopped while its engines answered.
	Pause func()
	// Logger receives diagnostics (not the run's output lines). Nil means
	// a text logger on stderr at warning level.
	Logger *slog.Logger

	// EngineTLS is the driver's side of the engines' mutual TLS
	// (runca.ClientConfig: the run's client certificate, the run's CA);
	// the flags --client-cert, --client-key and --engine-ca fill it.
	// InsecurePlaintext (--insecure-plaintext) speaks plaintext to engines
	// started with --insecure-plaintext instead. A run needs one of them.
	EngineTLS         *tls.Config
	InsecurePlaintext bool
}

// cancelAnswerMargin is what a cancelled engine's Result may take beyond
// its drain: the way back to the driver, from a node under load.
const cancelAnswerMargin = 3 * time.Second

// DefaultCancelWait is how long a cancelled execution is awaited by
// default: the engine's bounded drain after a cancel, enginev1.CancelDrain
// (2 s), then cancelAnswerMargin (3 s) for its answer. A healthy engine
// answers within it however its target stalls; a driver on SIGTERM is
// done in seconds.
const DefaultCancelWait = enginev1.CancelDrain + cancelAnswerMargin

// DefaultMaxRejoins is how many times an engine of one node may come back
// within one execution by default: a pod restarting once an hour through
// an 8 h 30 min soak is 9; more than 16 in one execution is a crash loop.
const DefaultMaxRejoins = 16

// DefaultOptions returns the options of a production run.
func DefaultOptions() Options {
	return Options{
		ResolveInterval: time.Second,
		ResolveTimeout:  30 * time.Second,
		StartLead:       500 * time.Millisecond,
		Drain:           5 * time.Second,
		Grace:           2 * time.Minute,
		AnswerWindow:    10 * time.Second,
		CancelWait:      DefaultCancelWait,
		InterruptWait:   DefaultCancelWait,
		InfoTimeout:     5 * time.Second,
		ClockSlack:      500 * time.Millisecond,
		StatusTick:      time.Second,
		StatusRedraw:    250 * time.Millisecond,
		RejoinInterval:  time.Second,
		MaxRejoins:      DefaultMaxRejoins,
	}
}

// Validate returns every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, not %v", name, d))
		}
	}
	nonneg := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, not %v", name, d))
		}
	}
	// The waits add up to a backend's deadline on top of the plan's span
	// (at most plan.MaxSpan): a day each keeps that sum far from
	// overflowing, and no wait of the driver needs more.
	atMostDay := func(name string, d time.Duration) {
		if d > 24*time.Hour {
			errs = append(errs, fmt.Errorf("%s must be at most 24h, not %v", name, d))
		}
	}
	for _, w := range []struct {
		name string
		d    time.Duration
	}{{"drain", o.Drain}, {"deadline grace", o.Grace}, {"answer window", o.AnswerWindow}, {"cancel wait", o.CancelWait}, {"interrupt wait", o.InterruptWait}} {
		atMostDay(w.name, w.d)
	}
	pos("resolve interval", o.ResolveInterval)
	nonneg("resolve timeout", o.ResolveTimeout)
	nonneg("start lead", o.StartLead)
	nonneg("drain", o.Drain)
	nonneg("deadline grace", o.Grace)
	nonneg("answer window", o.AnswerWindow)
	pos("cancel wait", o.CancelWait)
	pos("interrupt wait", o.InterruptWait)
	pos("info timeout", o.InfoTimeout)
	pos("clock slack", o.ClockSlack)
	// The engine refuses a progress interval under 10ms.
	if o.StatusTick < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("status tick must be at least 10ms, not %v", o.StatusTick))
	}
	pos("status redraw", o.StatusRedraw)
	pos("rejoin interval", o.RejoinInterval)
	if o.MaxRejoins < 0 {
		errs = append(errs, fmt.Errorf("max rejoins must not be negative, not %d", o.MaxRejoins))
	}
	return errors.Join(errs...)
}

// engineCreds are the transport credentials of every engine connection.
func (o Options) engineCreds() credentials.TransportCredentials {
	if o.EngineTLS != nil {
		return credentials.NewTLS(o.EngineTLS)
	}
	return insecure.NewCredentials()
}

func (o Options) clock() clock.Clock {
	if o.Clock != nil {
		return o.Clock
	}
	return clock.Real{}
}

func (o Options) now() time.Time { return o.clock().Now() }

func (o Options) resolver() Resolver {
	if o.Resolver != nil {
		return o.Resolver
	}
	return net.DefaultResolver
}

func (o Options) logger(stderr io.Writer) *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "driver")
}
