package clock

import (
	"context"
	"testing"
	"time"
)

func TestFakeWakesSleepersInOrder(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx := context.Background()
	woke := make(chan time.Duration, 2)
	for _, d := range []time.Duration{2 * time.Second, time.Second} {
		go func() {
			if err := f.Sleep(ctx, d); err == nil {
				woke <- d
			}
		}()
	}
	if err := f.WaitForSleepers(ctx, 2); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Second)
	if got := <-woke; got != time.Second {
		t.Fatalf("first wake %v, want 1s", got)
	}
	if n := f.Sleepers(); n != 1 {
		t.Fatalf("sleepers after 1s = %d, want 1", n)
	}
	f.Advance(time.Second)
	if got := <-woke; got != 2*time.Second {
		t.Fatalf("second wake %v, want 2s", got)
	}
	if got := f.Now(); !got.Equal(time.Unix(2, 0)) {
		t.Fatalf("now = %v", got)
	}
}

func TestFakeSleepCancelled(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- f.Sleep(ctx, time.Hour) }()
	if err := f.WaitForSleepers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("Sleep = %v, want context.Canceled", err)
	}
	if n := f.Sleepers(); n != 0 {
		t.Fatalf("sleepers = %d after cancel", n)
	}
}

func TestFakeDrive(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 3; i++ {
			f.Sleep(context.Background(), time.Minute)
		}
		done <- nil
	}()
	if _, ended := f.Drive(time.Minute, 10, done); !ended {
		t.Fatal("Drive gave up on a program that ends")
	}
	if got := f.Now(); !got.Equal(time.Unix(180, 0)) {
		t.Fatalf("now = %v after three one-minute sleeps, want 3m", got)
	}
	never := make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Sleep(ctx, time.Hour*1000)
	if _, ended := f.Drive(time.Hour, 3, never); ended {
		t.Fatal("Drive reported an end that never came")
	}
}

func TestFakeTimer(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	if n := f.Sleepers(); n != 1 {
		t.Fatalf("sleepers = %d with a pending timer, want 1", n)
	}
	f.Advance(999 * time.Millisecond)
	select {
	case at := <-tm.C():
		t.Fatalf("fired at %v, before its deadline", at)
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case at := <-tm.C():
		if !at.Equal(time.Unix(1, 0)) {
			t.Errorf("fired with %v, want 1s", at)
		}
	default:
		t.Fatal("did not fire at its deadline")
	}
	if tm.Stop() {
		t.Error("Stop of a fired timer reported true")
	}
	if n := f.Sleepers(); n != 0 {
		t.Errorf("sleepers = %d after the timer fired", n)
	}
}

func TestFakeTimerStop(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	if n := f.Sleepers(); n != 0 {
		t.Fatalf("sleepers = %d after Stop", n)
	}
	f.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if tm.Stop() {
		t.Error("second Stop reported true")
	}
	// A timer of no duration has fired when it is made.
	select {
	case at := <-f.NewTimer(0).C():
		if !at.Equal(time.Unix(3600, 0)) {
			t.Errorf("zero timer fired with %v", at)
		}
	default:
		t.Error("a zero timer did not fire at once")
	}
}

func TestFakeDriveWakesTimers(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan error, 1)
	go func() {
		tm := f.NewTimer(time.Minute)
		<-tm.C()
		done <- nil
	}()
	if _, ended := f.Drive(time.Minute, 10, done); !ended {
		t.Fatal("Drive did not fire the timer a goroutine waits on")
	}
}

func TestRealTimer(t *testing.T) {
	tm := Real{}.NewTimer(time.Hour)
	if !tm.Stop() {
		t.Error("Stop of a pending real timer reported false")
	}
	<-Real{}.NewTimer(0).C()
}
