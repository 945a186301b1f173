package oneshot

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
)

// TestIntegrationBurstLoopback runs the client mode as the pod runs it
// (flags, stdout, --exit) against real servers on loopback: one that
// answers 200, one that answers 503 to every third request, one that
// hangs past the timeout, one that closes the connection under the
// request, and a port nothing listens on. Every request lands in exactly
// one class, and the line parses back to the same tally.
func TestIntegrationBurstLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers on loopback")
	}
	var agents sync.Map
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents.Store(r.UserAgent(), true)
	}))
	defer ok.Close()
	var n atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%3 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer flaky.Close()
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // until the client gives up
	}))
	defer hang.Close()
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	defer reset.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()

	args := []string{"--step", "sa-new-1", "--node", "w1", "--requests", "6", "--rate", "100", "--timeout", "2s", "--exit",
		"--target", "ok=" + ok.URL + "/", "--target", "flaky=" + flaky.URL + "/x",
		"--target", "hang=" + hang.URL, "--target", "reset=" + reset.URL, "--target", "closed=http://" + closed + "/"}
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	want := "SORTIE_NEWSA_FINAL step=sa-new-1 node=w1 ok:ok=6,non2xx=0,connerr=0,codes=- flaky:ok=4,non2xx=2,connerr=0,codes=503x2" +
		" hang:ok=0,non2xx=0,connerr=6,codes=err_timeoutx6 reset:ok=0,non2xx=0,connerr=6,codes=err_resetx6" +
		" closed:ok=0,non2xx=0,connerr=6,codes=err_connectx6\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout\n got %s\nwant %s", got, want)
	}
	f, found, err := FindFinal("log line\n" + stdout.String())
	if err != nil || !found || f.String()+"\n" != want || f.Clean() || !f.Dests[0].Clean() {
		t.Errorf("read back: %+v found=%v err=%v", f, found, err)
	}
	if _, seen := agents.Load("aether-soak-newsa/sa-new-1"); !seen {
		t.Error("the default User-Agent was not sent")
	}
}

// recorder answers every request with 200 and notes when, on the fake
// clock, each target was asked.
type recorder struct {
	clk *clock.Fake
	mu  sync.Mutex
	at  map[string][]time.Duration
	t0  time.Time
	got chan struct{}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.at[req.URL.Host] = append(r.at[req.URL.Host], r.clk.Now().Sub(r.t0))
	r.mu.Unlock()
	r.got <- struct{}{}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestBurstPacing: request i of each target goes out at i/rate after the
// start, on the clock, and no more than --requests of them.
func TestBurstPacing(t *testing.T) {
	start := time.Date(2026, 10, 5, 3, 20, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	rec := &recorder{clk: clk, at: map[string][]time.Duration{}, t0: start, got: make(chan struct{}, 100)}
	o := DefaultOptions()
	o.Step, o.Requests, o.Rate = "s", 5, 4
	o.Targets = []Target{{"a", "http://a.test/"}, {"b", "http://b.test/"}}
	done := make(chan error, 1)
	var f Final
	go func() {
		var err error
		f, err = Burst(context.Background(), clk, rec, o)
		done <- err
	}()
	// The clock moves only once both targets' request i is in and both
	// pacers wait again, so each request is stamped with its own moment.
	for i := range o.Requests {
		<-rec.got
		<-rec.got
		if i < o.Requests-1 {
			if err := clk.WaitForSleepers(context.Background(), 2); err != nil {
				t.Fatal(err)
			}
			clk.Advance(250 * time.Millisecond)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second}
	for _, host := range []string{"a.test", "b.test"} {
		if diff := cmp.Diff(want, rec.at[host]); diff != "" {
			t.Errorf("%s due times (-want +got):\n%s", host, diff)
		}
	}
	if got := f.Tally(); got != "a:ok=5,non2xx=0,connerr=0,codes=- b:ok=5,non2xx=0,connerr=0,codes=-" {
		t.Errorf("tally %s", got)
	}
	if o.Bound() != time.Second+o.Timeout {
		t.Errorf("bound %v", o.Bound())
	}
}

// TestBurstCancelled: a burst cut short prints no tally and says why.
func TestBurstCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&cli.SignalError{Signal: syscallTERM})
	var stdout, stderr bytes.Buffer
	err := RunClock(ctx, clock.NewFake(time.Unix(0, 0)), []string{"--step", "s", "--target", "a=http://a.test/", "--requests", "3"}, &stdout, &stderr)
	if cli.Code(err) != cli.ExitTerminated || stdout.Len() != 0 {
		t.Errorf("exit %d, stdout %q", cli.Code(err), stdout.String())
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		errs []string
	}{
		{args: []string{"--step", "s", "--target", "a=http://x/"}},
		{args: []string{"--step", "s"}, errs: []string{"at least one --target"}},
		{args: []string{"--target", "a=http://x/"}, errs: []string{`--step ""`}},
		{args: []string{"--step", "s", "--target", "a=ftp://x/", "--target", "a:b=http://x/", "--requests", "0", "--rate", "0", "--timeout", "0"},
			errs: []string{`target a: "ftp://x/"`, `target name "a:b"`, "--requests 0", "--rate 0", "--timeout 0s"}},
		{args: []string{"--step", "s", "--target", "a=http://x/", "--target", "a=http://y/"}, errs: []string{"target a given twice"}},
		{args: []string{"--step", "s", "--target", "nourl"}, errs: []string{`"nourl": want name=url`}},
	} {
		o, _, _, err := parseFlags(tc.args, &bytes.Buffer{})
		if len(tc.errs) == 0 {
			if err != nil || o.Timeout != 5*time.Second || o.UserAgent != "aether-soak-newsa/s" {
				t.Errorf("%q: %+v %v", tc.args, o, err)
			}
			continue
		}
		for _, want := range tc.errs {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: error %v, want it to say %q", tc.args, err, want)
			}
		}
	}
	o, _, _, err := parseFlags([]string{"--step", "s", "--target", "a=http://x/", "--timeout", "7"}, &bytes.Buffer{})
	if err != nil || o.Timeout != 7*time.Second {
		t.Errorf("bare seconds: %v %v", o.Timeout, err)
	}
}
