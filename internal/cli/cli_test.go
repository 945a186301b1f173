package cli

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestNotifyContextNamesTheSignal(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{
		{syscall.SIGTERM, ExitTerminated},
		{syscall.SIGINT, ExitInterrupted},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			ctx, stop := NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if got := Signal(ctx); got != nil {
				t.Fatalf("Signal before any signal = %v, want nil", got)
			}
			if err := syscall.Kill(os.Getpid(), tc.sig); err != nil {
				t.Fatal(err)
			}
			// The delivery is asynchronous; the bound only guards a hang.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("context not cancelled by the signal")
			}
			sig := Signal(ctx)
			if sig != tc.sig {
				t.Fatalf("Signal = %v, want %v", sig, tc.sig)
			}
			if got := SignalCode(sig); got != tc.code {
				t.Fatalf("SignalCode(%v) = %d, want %d", sig, got, tc.code)
			}
			if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), context.Canceled) {
				t.Fatalf("err %v cause %v: want both to be context.Canceled", ctx.Err(), context.Cause(ctx))
			}
		})
	}
}

func TestSignalOtherCancellations(t *testing.T) {
	ctx, stop := NotifyContext(context.Background(), syscall.SIGTERM)
	stop()
	if got := Signal(ctx); got != nil {
		t.Fatalf("Signal after stop = %v, want nil", got)
	}
	plain, cancel := context.WithCancel(context.Background())
	cancel()
	if got := Signal(plain); got != nil {
		t.Fatalf("Signal of a plain cancel = %v, want nil", got)
	}
	caused, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(&SignalError{Signal: syscall.SIGTERM})
	child, cancelChild := context.WithTimeout(caused, time.Hour)
	defer cancelChild()
	if got := Signal(child); got != syscall.SIGTERM {
		t.Fatalf("Signal of a derived context = %v, want SIGTERM", got)
	}
}

func TestSignalCode(t *testing.T) {
	for _, tc := range []struct {
		sig  os.Signal
		want int
	}{
		{os.Interrupt, 130},
		{syscall.SIGTERM, 143},
		{syscall.SIGHUP, 129},
		{nil, ExitFail},
	} {
		if got := SignalCode(tc.sig); got != tc.want {
			t.Errorf("SignalCode(%v) = %d, want %d", tc.sig, got, tc.want)
		}
	}
}

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("x"), 1},
		{Usage(errors.New("x")), 2},
		{Silent(143), 143},
	} {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("Code(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
