package lab

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/clock"
)

func TestWaitForTimesOut(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	notYet := errors.New("not yet")
	done := make(chan error, 1)
	go func() {
		_, err := WaitFor(context.Background(), clk, "thing", 5*time.Second, func(context.Context) error { return notYet })
		done <- err
	}()
	err, ended := clk.Drive(pollInterval, 1000, done)
	if !ended {
		t.Fatal("WaitFor did not end")
	}
	var te *TimeoutError
	if !errors.As(err, &te) || te.What != "thing" || te.After != 5*time.Second || !errors.Is(err, notYet) {
		t.Errorf("err = %v; want a TimeoutError for thing after 5s wrapping the last reason", err)
	}
}

func TestWaitForSucceeds(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	calls := 0
	done := make(chan error, 1)
	var waited time.Duration
	go func() {
		var err error
		waited, err = WaitFor(context.Background(), clk, "thing", time.Minute, func(context.Context) error {
			calls++
			if calls < 4 {
				return errors.New("not yet")
			}
			return nil
		})
		done <- err
	}()
	if err, ended := clk.Drive(pollInterval, 1000, done); !ended || err != nil {
		t.Fatalf("WaitFor = %v (ended %v)", err, ended)
	}
	if calls != 4 || waited != 3*pollInterval {
		t.Errorf("calls %d waited %s; want 4 calls over 3 polls", calls, waited)
	}
}

func TestAliveFailsFastForDeadProcess(t *testing.T) {
	l := Layout{State: t.TempDir(), Nodes: 1}
	p, err := StartDaemon(l, nil, Daemon{Name: "quick", Path: "/bin/true"})
	if err != nil {
		t.Skip("no /bin/true")
	}
	if _, err := WaitFor(context.Background(), clock.Real{}, "exit", time.Minute, func(context.Context) error {
		if p.alive() {
			return errors.New("running")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err = Alive(l, "quick", func(context.Context) error { return errors.New("never ready") })(context.Background())
	var de *DiedError
	if !errors.As(err, &de) || de.Name != "quick" {
		t.Errorf("err = %v; want a DiedError for quick", err)
	}
}

func TestJumpsTo(t *testing.T) {
	listing := "-P FORWARD ACCEPT\n" +
		`-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD` + "\n" +
		"-A FORWARD -j KUBE-ROUTER-FORWARD-X\n"
	if !jumpsTo(listing, "KUBE-ROUTER-FORWARD") {
		t.Error("the jump to KUBE-ROUTER-FORWARD is not found")
	}
	if jumpsTo(listing, "KUBE-ROUTER-INPUT") || jumpsTo("-N KUBE-ROUTER-INPUT\n", "KUBE-ROUTER-INPUT") {
		t.Error("a chain nothing jumps to is found jumped to")
	}
}
