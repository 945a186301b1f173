package engine

import (
	"context"
	"io"
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
		x := runDirect(t, req("deferred", srv.URL, 1, 3*time.Second))
		res := x.result("")
		wantCounters(t, res, map[string]uint64{record.HTTP2xx: 3})
		if got := x.workers[0].collected; got < 2 {
			t.Errorf("the pacer collected %d responses, want at least 2", got)
		}
		// Measured at collection, the first two latencies would be about
		// a second (the pacer's period); the margin to that is wide.
		lat := statsByID(res)[record.LatencyPrefix+"2xx"]
		if max := time.Duration(lat.GetMax()); max < answerAfter || max > 500*time.Millisecond {
			t.Errorf("latency max %v, want about %v (the answer's delay)", max, answerAfter)
		}
	})
	t.Run("slower than the pacer", func(t *testing.T) {
		t.Parallel()
		// 20 rps: most answers are not back by the pacer's next wake,
		// 50 ms later; they then wake the engine themselves.
		x := runDirect(t, req("slow", srv.URL, 20, time.Second))
		res := x.result("")
		wantCounters(t, res, map[string]uint64{record.HTTP2xx: 20})
		lat := statsByID(res)[record.LatencyPrefix+"2xx"]
		if max := time.Duration(lat.GetMax()); max < answerAfter || max > 500*time.Millisecond {
			t.Errorf("latency max %v, want about %v (the answer's delay)", max, answerAfter)
		}
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
