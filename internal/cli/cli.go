// Package cli holds what every sortie binary's main does: a context that a
// signal cancels, one call to the component's Run, and one printed error
// mapped to a stable exit code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes shared by the binaries.
const (
	ExitOK       = 0 // everything held
	ExitFail     = 1 // a threshold failed, an execution errored, a run was cancelled
	ExitUsage    = 2 // unusable input: plan, flags, report
	ExitUnproven = 3 // nothing was graded (the gate)
)

// ExitError carries the exit code a Run wants. Its message is printed once,
// by Main; an ExitError with a nil Err prints nothing (the program already
// said what it had to).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Usage wraps err as unusable input (exit 2).
func Usage(err error) error { return &ExitError{Code: ExitUsage, Err: err} }

// Fail wraps err as a failed run (exit 1).
func Fail(err error) error { return &ExitError{Code: ExitFail, Err: err} }

// Silent returns an error that only sets the exit code.
func Silent(code int) error { return &ExitError{Code: code} }

// Code maps an error from Run to an exit code: 0 for nil, the ExitError's
// code, else 1.
func Code(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitFail
}

// RunFunc is the signature of every component's Run.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main runs run with a context cancelled by SIGINT or SIGTERM, prints its
// error once as "<name>: <message>" on stderr, and exits with its code.
func Main(name string, run RunFunc) {
	ctx, stop := NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		}
	}
	os.Exit(Code(err))
}

// Exit codes of a program that stopped because of a signal, by the shell's
// convention of 128 + the signal number.
const (
	ExitInterrupted = 130 // SIGINT
	ExitTerminated  = 143 // SIGTERM
)

// SignalError is the cancel cause of a context cancelled by a signal. It
// matches context.Canceled under errors.Is, so code that only checks for
// cancellation keeps working.
type SignalError struct {
	Signal os.Signal
}

func (e *SignalError) Error() string { return e.Signal.String() + " signal received" }

// Is reports that a signal's cancellation is a context.Canceled.
func (e *SignalError) Is(target error) bool { return target == context.Canceled }

// NotifyContext is signal.NotifyContext with a typed cause: when one of
// signals arrives, the returned context is cancelled with a *SignalError
// naming it, so a Run can tell SIGTERM from SIGINT with Signal. Like
// signal.NotifyContext, later signals are swallowed until stop is called.
func NotifyContext(parent context.Context, signals ...os.Signal) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, signals...)
	if ctx.Err() == nil {
		go func() {
			select {
			case s := <-ch:
				cancel(&SignalError{Signal: s})
			case <-ctx.Done():
			}
		}()
	}
	return ctx, func() {
		cancel(nil)
		signal.Stop(ch)
	}
}

// Signal returns the signal that cancelled ctx (through NotifyContext or a
// cancel cause of type *SignalError), or nil if ctx is live or was cancelled
// for another reason.
func Signal(ctx context.Context) os.Signal {
	var se *SignalError
	if errors.As(context.Cause(ctx), &se) {
		return se.Signal
	}
	return nil
}

// SignalCode maps a signal to the exit code a shell reports for it: 130 for
// SIGINT, 143 for SIGTERM, 128 + the number for other syscall signals, and 1
// for anything else.
func SignalCode(sig os.Signal) int {
	switch sig {
	case os.Interrupt:
		return ExitInterrupted
	case syscall.SIGTERM:
		return ExitTerminated
	}
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return ExitFail
}
