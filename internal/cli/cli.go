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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
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
