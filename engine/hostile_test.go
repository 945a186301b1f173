package engine

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// Targets that misbehave toward a request in flight: the engine's
// per-request response timeout (request_timeout).

// TestOutcomeRequestTimeout: a server that reads every request and never
// answers, or answers its head and then stalls the body (slowloris). With
// request_timeout each request is counted in benchmark.request_timeout
// when its time is up, on its own connection, long before the drain's 30 s
// timeout would have counted it lost in flight; without it (the default)
// the same requests are lost at the drain's end (TestOutcomeInflightLost).
func TestOutcomeRequestTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		handle func(c net.Conn, _ int64)
	}{
		{"silent", func(c net.Conn, _ int64) { _, _ = io.Copy(io.Discard, c) }},
		{"slow body", func(c net.Conn, _ int64) {
			if readRequest(bufio.NewReader(c)) != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst")
			_, _ = io.Copy(io.Discard, c)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newRawServer(t, c.handle)
			te := startEngine(t, Options{})
			r := req("request-timeout", srv.url(), 10, 500*time.Millisecond)
			r.RequestTimeout = durationpb.New(100 * time.Millisecond)
			r.ProgressInterval = durationpb.New(100 * time.Millisecond)
			got := te.execute(t, r)
			res := got.mustResult(t)
			wantCounters(t, res, map[string]uint64{record.RequestTimeout: 5})
			_, samples := checkTimeline(t, got, srv.lis.Addr().String())
			for _, s := range samples {
				if s.Class != record.RequestTimeout || s.Remote != srv.lis.Addr().String() {
					t.Errorf("sample %+v, want a request timeout on a connection to %s", s, srv.lis.Addr())
				}
				// From the due time: at least the timeout, since the
				// deadline runs from the write, which is not before
				// the due time.
				if s.LatencyNs < int64(100*time.Millisecond) {
					t.Errorf("sample %+v counted before its 100ms were up", s)
				}
			}
			// The connection of a timed-out request is closed, never
			// reused for the next one.
			if n := srv.conns.Load(); n != 5 {
				t.Errorf("server saw %d connections, want 5", n)
			}
		})
	}
}

// TestRequestTimeoutSparesAnswers: responses that come within the timeout
// are answers, on a connection kept alive.
func TestRequestTimeoutSparesAnswers(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, func(c net.Conn, _ int64) {
		br := bufio.NewReader(c)
		for readRequest(br) == nil {
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	te := startEngine(t, Options{})
	r := req("answered", srv.url(), 20, 500*time.Millisecond)
	r.RequestTimeout = durationpb.New(time.Minute)
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP2xx: 10})
	// The first requests may each open a connection while another
	// dials; after that they are reused, the deadline cleared.
	if n := srv.conns.Load(); n > 3 {
		t.Errorf("server saw %d connections for 10 requests, want them kept alive", n)
	}
}

// TestStrayBytesAreNotAnAnswer: a server that answers each request and
// then sends an unsolicited 503, in the same write as the answer or in a
// write of its own. The 503 is never taken as the next request's answer:
// the connection that received it is closed and the bytes counted in
// benchmark.connection_protocol_error; every request is answered 2xx on a
// connection of its own.
func TestStrayBytesAreNotAnAnswer(t *testing.T) {
	t.Parallel()
	const ok, stray = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
	for _, c := range []struct {
		name     string
		oneWrite bool
	}{{"same write", true}, {"own write", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newRawServer(t, func(conn net.Conn, _ int64) {
				br := bufio.NewReader(conn)
				for readRequest(br) == nil {
					if c.oneWrite {
						_, _ = io.WriteString(conn, ok+stray)
						continue
					}
					_, _ = io.WriteString(conn, ok)
					_, _ = io.WriteString(conn, stray)
				}
			})
			te := startEngine(t, Options{})
			// 20 rps: a connection is idle 50 ms between requests.
			r := req("stray", srv.url(), 20, 500*time.Millisecond)
			r.ProgressInterval = durationpb.New(100 * time.Millisecond)
			got := te.execute(t, r)
			res := got.mustResult(t)
			checkTimeline(t, got, srv.lis.Addr().String())
			n := res.GetCounters()[record.ConnectionProtocolError]
			// Each connection's stray bytes are seen before its next
			// request; the last connection's may come after the run.
			if n < 9 || n > 10 {
				t.Errorf("%s = %d, want 9 or 10", record.ConnectionProtocolError, n)
			}
			wantCounters(t, res, map[string]uint64{record.HTTP2xx: 10, record.ConnectionProtocolError: n})
			if conns := srv.conns.Load(); conns != 10 {
				t.Errorf("server saw %d connections, want 10 (none reused after its stray bytes)", conns)
			}
		})
	}
}

// TestCancelDrainIsBounded: an execution cancelled while its target holds
// every request unanswered, with a timeout of an hour, answers within
// enginev1.CancelDrain of the cancel: what was in flight is counted lost,
// the rest unsent. Before, the drain waited out the request timeout, and a
// driver stopping on SIGTERM named the healthy engine silent.
func TestCancelDrainIsBounded(t *testing.T) {
	t.Parallel()
	arrived := newSeen()
	srv := newRawServer(t, func(c net.Conn, _ int64) {
		br := bufio.NewReader(c)
		for readRequest(br) == nil {
			arrived.mark()
		}
	})
	te := startEngine(t, Options{})
	const planned = 20 * 60
	r := req("cancel-stalled", srv.url(), 20, time.Minute)
	r.Timeout = durationpb.New(time.Hour)
	// The bound only ends a hang: without the bounded drain the Result
	// would come an hour after the cancel.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := te.client.Execute(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	arrived.wait(t)
	if r, err := te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: "cancel-stalled"}); err != nil || !r.GetFound() {
		t.Fatalf("Cancel = %v, %v", r, err)
	}
	res := collectFrom(stream, run{}).mustResult(t)
	lost := res.GetCounters()[record.InflightLost]
	if !res.GetCancelled() || lost == 0 || lost+res.GetUnsent() != planned {
		t.Errorf("cancelled %v, %d lost + %d unsent, want the requests sent lost and the rest unsent of %d", res.GetCancelled(), lost, res.GetUnsent(), planned)
	}
	wantCounters(t, res, map[string]uint64{record.InflightLost: lost})
}
