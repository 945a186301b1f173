package engine

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// runDirect runs one execution without the gRPC layer, so that a test can
// look at its workers afterwards.
func runDirect(t *testing.T, r *enginev1.ExecuteRequest) *execution {
	t.Helper()
	sp, err := parseSpec(r, time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	x := newExecution(sp, context.Background())
	if err := x.build(newSleeper); err != nil {
		t.Fatal(err)
	}
	x.start()
	<-x.done
	checkAccounting(t, x.result(""))
	return x
}

// answerServer answers every request after delay, on a raw connection, and
// sends on written when each answer's one write returned.
type answerServer struct {
	*rawServer
	written chan time.Time
}

func newAnswerServer(t *testing.T, delay time.Duration) *answerServer {
	t.Helper()
	s := &answerServer{written: make(chan time.Time, 1000)}
	s.rawServer = newRawServer(t, func(c net.Conn, _ int64) {
		br := bufio.NewReader(c)
		for readRequest(br) == nil {
			time.Sleep(delay)
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
			s.written <- time.Now()
		}
	})
	return s
}

// checkLatencyEndsAtArrival checks x's latency_2xx against what the
// server did, by relations that hold however loaded the machine is:
//
//   - every latency is at least delay: the server read the request after
//     it was due and waited delay before answering;
//   - every latency ends no later than the server's write of the answer
//     returned: on loopback the kernel stamps a segment (SO_TIMESTAMPNS)
//     as the sender's write queues it.
//
// A latency measured when the engine read or collected the answer, rather
// than from the kernel's stamp, breaks the second relation whenever the
// read came after the write, which deferring a response to the pacer's next
// wake makes the rule. x has one connection, so the k-th answer written is
// the answer to request k, due at x.base + Offset(k).
func checkLatencyEndsAtArrival(t *testing.T, x *execution, srv *answerServer, delay time.Duration) {
	t.Helper()
	if x.spec.connections != 1 {
		t.Fatalf("%d connections: answers cannot be matched to requests", x.spec.connections)
	}
	var bound time.Duration // the longest due-to-write of an answer
	for k := range x.spec.pacer.Planned() {
		// The engine may have its answer before the server goroutine
		// notes the write; the wait is only a bound on a hang.
		var w time.Time
		select {
		case w = <-srv.written:
		case <-time.After(30 * time.Second):
			t.Fatalf("the server wrote %d answers for %d requests", k, x.spec.pacer.Planned())
		}
		bound = max(bound, w.Sub(x.base)-x.spec.pacer.Offset(k))
	}
	lat := statsByID(x.result(""))[record.Latency2xx]
	// The histogram keeps three significant digits; a wall clock slewed
	// against the monotonic one moves a stamp by microseconds.
	slack := func(d time.Duration) time.Duration { return d/500 + 100*time.Microsecond }
	if min := time.Duration(lat.GetMin()); min < delay-slack(delay) {
		t.Errorf("latency min %v, below the server's delay %v", min, delay)
	}
	if max := time.Duration(lat.GetMax()); max > bound+slack(bound) {
		t.Errorf("latency max %v, later than the server's write of an answer (%v after its due time): measured at the read, not at arrival", max, bound)
	}
}

// A slow open-loop worker leaves each response to its pacer's next wake
// (conn.deferred): every response is still counted, and its latency ends
// when it reached the socket, not when the pacer collected it a second
// later.
func TestDeferredResponses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("responses are deferred on Linux only")
	}
	t.Parallel()
	const answerAfter = 80 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(answerAfter)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)

	t.Run("open loop", func(t *testing.T) {
		t.Parallel()
		// Requests at 0, 1 and 2 s: the first two answers wait for the
		// pacer's wakes at 1 and 2 s, the last for its drain.
		answers := newAnswerServer(t, answerAfter)
		r := req("deferred", answers.url(), 1, 3*time.Second)
		r.Connections, r.MaxPendingRequests = 1, 3
		x := runDirect(t, r)
		wantCounters(t, x.result(""), map[string]uint64{record.HTTP2xx: 3})
		if got := x.workers[0].collected; got < 2 {
			t.Errorf("the pacer collected %d responses, want at least 2", got)
		}
		checkLatencyEndsAtArrival(t, x, answers, answerAfter)
	})
	t.Run("slower than the pacer", func(t *testing.T) {
		t.Parallel()
		// 20 rps on one connection: answers are not back by the pacer's
		// next wake, 50 ms later; they then wake the engine themselves
		// (and requests queue behind them, which the latency includes).
		answers := newAnswerServer(t, answerAfter)
		r := req("slow", answers.url(), 20, time.Second)
		r.Connections, r.MaxPendingRequests = 1, 20
		x := runDirect(t, r)
		wantCounters(t, x.result(""), map[string]uint64{record.HTTP2xx: 20})
		checkLatencyEndsAtArrival(t, x, answers, answerAfter)
	})
	t.Run("full pool", func(t *testing.T) {
		t.Parallel()
		// One connection, a queue of one, answers slower than the
		// requests come: the pacer collects before it refuses one, and
		// what it cannot place is counted as an overflow.
		r := req("full", srv.URL, 100, 300*time.Millisecond)
		r.Connections, r.MaxPendingRequests = 1, 1
		x := runDirect(t, r)
		got := x.result("").GetCounters()
		if got[record.HTTP2xx] == 0 || got[record.PoolOverflow] == 0 || got[record.HTTP2xx]+got[record.PoolOverflow] != 30 {
			t.Errorf("2xx %d + overflow %d, want 30 with both above 0 (all: %v)", got[record.HTTP2xx], got[record.PoolOverflow], got)
		}
	})
	t.Run("large body", func(t *testing.T) {
		t.Parallel()
		// Far more than a socket buffer: the rest of the body comes after
		// the pacer collected the first bytes.
		body := strings.Repeat("x", 4<<20)
		big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(big.Close)
		x := runDirect(t, req("big", big.URL, 5, time.Second))
		wantCounters(t, x.result(""), map[string]uint64{record.HTTP2xx: 5})
	})
	t.Run("closed loop", func(t *testing.T) {
		t.Parallel()
		r := req("waits", srv.URL, 2, time.Second)
		r.OpenLoop = false
		x := runDirect(t, r)
		wantCounters(t, x.result(""), map[string]uint64{record.HTTP2xx: 2})
		if got := x.workers[0].collected; got != 0 {
			t.Errorf("a closed-loop worker deferred %d responses, want none", got)
		}
	})
}

// result merges the workers' histograms into new ones: calling it again
// gives the same Result (it used to merge into the first worker's
// histogram, so a second call counted the other workers twice).
func TestResultIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	r := req("twice", srv.URL, 20, 500*time.Millisecond)
	r.Workers = 3
	x := runDirect(t, r) // the first result
	second, third := x.result("node-a"), x.result("node-a")
	if diff := cmp.Diff(second, third, protocmp.Transform()); diff != "" {
		t.Errorf("result changed from one call to the next (-second +third):\n%s", diff)
	}
	checkAccounting(t, third)
	wantCounters(t, third, map[string]uint64{record.HTTP2xx: 30})
}
