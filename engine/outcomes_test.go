package engine

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sortie-soak/sortie/record"
)

// Each test below makes a real loopback server behave one way and checks
// the exact outcome counters, and (in mustResult) conservation.

func TestOutcomeStatusClasses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Path[1:])
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "body\n")
	}))
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{BackendName: "node-a"})
	for _, c := range []struct {
		code    int
		counter string
	}{
		{200, record.HTTP2xx},
		{404, record.HTTP4xx},
		{503, record.HTTP5xx},
		{302, record.HTTP3xx},
	} {
		t.Run(strconv.Itoa(c.code), func(t *testing.T) {
			t.Parallel()
			res := te.execute(t, req(fmt.Sprint("status-", c.code), srv.URL+"/"+strconv.Itoa(c.code), 20, 500*time.Millisecond)).mustResult(t)
			wantCounters(t, res, map[string]uint64{c.counter: 10})
			if res.GetPlanned() != 10 || res.GetCancelled() {
				t.Errorf("planned %d cancelled %v", res.GetPlanned(), res.GetCancelled())
			}
			if res.GetBackendName() != "node-a" {
				t.Errorf("backend name %q", res.GetBackendName())
			}
			if c.code != 200 {
				id := record.LatencyPrefix + strconv.Itoa(c.code/100) + "xx"
				if st := statsByID(res)[id]; st == nil || st.GetCount() != 10 {
					t.Errorf("%s = %v, want count 10", id, st)
				}
			}
		})
	}
}

func TestOutcomeConnectionRefused(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // a closed port: the kernel answers with a reset
	te := startEngine(t, Options{})
	res := te.execute(t, req("refused", "http://"+addr+"/", 20, 500*time.Millisecond)).mustResult(t)
	wantCounters(t, res, map[string]uint64{
		record.PoolConnectionFailure: 10,
		record.PoolFailureRemote:     10,
	})
}

func TestOutcomeLocalConnectionFailure(t *testing.T) {
	t.Parallel()
	// A name that cannot resolve: the request never leaves this host.
	te := startEngine(t, Options{})
	res := te.execute(t, req("local", "http://sortie-test.invalid:80/", 10, 300*time.Millisecond)).mustResult(t)
	wantCounters(t, res, map[string]uint64{
		record.PoolConnectionFailure: 3,
		record.PoolFailureLocal:      3,
	})
}

// keepAliveThenClose answers the first request of each connection, then
// reads the second and closes: with a FIN, or with an RST when rst is set.
func keepAliveThenClose(rst bool) func(c net.Conn, _ int64) {
	return func(c net.Conn, _ int64) {
		br := bufio.NewReader(c)
		if readRequest(br) != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		if readRequest(br) != nil {
			return
		}
		if rst {
			_ = c.(*net.TCPConn).SetLinger(0)
		}
		_ = c.Close()
	}
}

func TestOutcomeResetBeforeHeaders(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		rst    bool
		reason string
	}{
		{"fin", false, record.ReasonConnectionTermination},
		{"rst", true, record.ReasonRemoteReset},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newRawServer(t, keepAliveThenClose(c.rst))
			te := startEngine(t, Options{})
			r := req("reset-"+c.name, srv.url(), 20, 500*time.Millisecond)
			r.Connections = 1
			r.MaxPendingRequests = 10
			res := te.execute(t, r).mustResult(t)
			// Requests alternate: a fresh connection answers, the reused
			// one is closed under the next request, which is never re-sent.
			wantCounters(t, res, map[string]uint64{
				record.HTTP2xx:                       5,
				record.StreamResets:                  5,
				record.ResetsBeforeHeaders:           5,
				record.StreamResetsPrefix + c.reason: 5,
			})
			if n := srv.conns.Load(); n != 5 {
				t.Errorf("server saw %d connections, want 5", n)
			}
		})
	}
}

func TestOutcomeIncompleteBody(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, answerOnce("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b"))
	te := startEngine(t, Options{})
	res := te.execute(t, req("cut", srv.url(), 20, 500*time.Millisecond)).mustResult(t)
	wantCounters(t, res, map[string]uint64{
		record.StreamResets:         10,
		record.ResetsIncompleteBody: 10,
		record.StreamResetsPrefix + record.ReasonConnectionTermination: 10,
	})
}

func TestOutcomeProtocolError(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, answerOnce("SSH-2.0-OpenSSH_9.6\r\n\r\n"))
	te := startEngine(t, Options{})
	res := te.execute(t, req("garbage", srv.url(), 20, 500*time.Millisecond)).mustResult(t)
	wantCounters(t, res, map[string]uint64{
		record.StreamResets:                                    10,
		record.ResetsBeforeHeaders:                             10,
		record.StreamResetsPrefix + record.ReasonProtocolError: 10,
	})
}

// A response over httpwire's limits is a reset with reason overflow, not a
// protocol error: the bytes may be valid HTTP, the engine does not take
// that much.
func TestOutcomeOverflow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, head string
	}{
		// 70 header fields of 1,000 bytes: over httpwire.MaxHeaderBytes.
		{"header block", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Big: "+strings.Repeat("y", 1000)+"\r\n", 70) + "Content-Length: 0\r\n\r\n"},
		// One field longer than the engine's read buffer.
		{"header line", "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("y", readBufferSize) + "\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if len(c.head) <= readBufferSize {
				t.Fatalf("response of %d bytes fits the limits", len(c.head))
			}
			srv := newRawServer(t, answerOnce(c.head))
			te := startEngine(t, Options{})
			res := te.execute(t, req("overflow", srv.url(), 20, 500*time.Millisecond)).mustResult(t)
			wantCounters(t, res, map[string]uint64{
				record.StreamResets:                               10,
				record.ResetsBeforeHeaders:                        10,
				record.StreamResetsPrefix + record.ReasonOverflow: 10,
			})
		})
	}
}

func TestOutcomeInflightLost(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, func(c net.Conn, _ int64) {
		// Read, never answer, until the engine gives up and closes.
		_, _ = io.Copy(io.Discard, c)
	})
	te := startEngine(t, Options{})
	r := req("silent", srv.url(), 10, 500*time.Millisecond)
	r.Timeout = durationpb.New(300 * time.Millisecond)
	r.ProgressInterval = durationpb.New(100 * time.Millisecond)
	run := te.execute(t, r)
	res := run.mustResult(t)
	wantCounters(t, res, map[string]uint64{record.InflightLost: 5})
	// Lost on their connections: the samples name them.
	_, samples := checkTimeline(t, run, srv.lis.Addr().String())
	for _, s := range samples {
		if s.Class != record.InflightLost || s.Remote != srv.lis.Addr().String() || s.ConnRequests != 0 {
			t.Errorf("sample %+v, want in-flight lost on a fresh connection to %s", s, srv.lis.Addr())
		}
	}
	// The last outcome is the drain's end: after the last due time plus
	// the timeout. A lower bound, which no load can break: the drain
	// starts after the last send and its timer never fires early.
	if el := res.GetElapsed().AsDuration(); el < 700*time.Millisecond {
		t.Errorf("elapsed %v, want at least the last due time 400ms + timeout 300ms", el)
	}
	if n := srv.conns.Load(); n != 5 {
		t.Errorf("server saw %d connections, want 5 (one per request, none reused)", n)
	}
}

func TestOutcomeOverflowWhenNotAccepting(t *testing.T) {
	t.Parallel()
	// A listener that never accepts: the kernel completes the first
	// handshakes into its backlog, requests are written and never read.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	te := startEngine(t, Options{})
	r := req("stuck", "http://"+lis.Addr().String()+"/", 20, time.Second)
	r.Connections = 2
	r.MaxPendingRequests = 1
	r.Timeout = durationpb.New(300 * time.Millisecond)
	r.BucketWidth = durationpb.New(100 * time.Millisecond)
	r.ProgressInterval = durationpb.New(100 * time.Millisecond)
	got := te.execute(t, r)
	res := got.mustResult(t)
	// Two on connections and one queued are lost at the drain's end;
	// the other 17 found no room.
	wantCounters(t, res, map[string]uint64{
		record.PoolOverflow: 17,
		record.InflightLost: 3,
	})
	// The lost are the first three requests, due at 0, 50 and 100 ms:
	// buckets 0, 0 and 1 of 100 ms, whenever they were lost.
	buckets, samples := checkTimeline(t, got, lis.Addr().String())
	var lostIn []uint32
	for _, s := range samples {
		if s.Class == record.InflightLost {
			lostIn = append(lostIn, s.Bucket)
		}
	}
	slices.Sort(lostIn)
	lost := map[uint32]uint64{}
	for _, b := range buckets {
		lost[b.Index] = b.Counters[record.InflightLost]
	}
	if !slices.Equal(lostIn, []uint32{0, 0, 1}) || lost[0] != 2 || lost[1] != 1 {
		t.Errorf("lost requests in buckets %v, want their due times' 0, 0 and 1", lostIn)
	}
}

func TestBodiesAndKeepAlive(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			for i := 0; i < 3; i++ {
				_, _ = io.WriteString(w, "chunk of a body\n")
				w.(http.Flusher).Flush()
			}
		case "/length":
			w.Header().Set("Content-Length", "11")
			_, _ = io.WriteString(w, "hello world")
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	for _, c := range []struct {
		path  string
		conns int64
	}{
		{"/chunked", 1}, // one connection carries all: bodies were read to their end
		{"/length", 1},
		{"/close", 10}, // Connection: close honoured
	} {
		before := conns.Load()
		r := req("body"+c.path[1:], srv.URL+c.path, 20, 500*time.Millisecond)
		r.Connections = 1
		r.MaxPendingRequests = 10
		res := te.execute(t, r).mustResult(t)
		wantCounters(t, res, map[string]uint64{record.HTTP2xx: 10})
		if n := conns.Load() - before; n != c.conns {
			t.Errorf("%s: server saw %d connections, want %d", c.path, n, c.conns)
		}
	}
}

func TestHTTP10(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, answerOnce("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nbody until close"))
	te := startEngine(t, Options{})
	r := req("http10", srv.url(), 20, 500*time.Millisecond)
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP2xx: 10})
	if n := srv.conns.Load(); n != 10 {
		t.Errorf("server saw %d connections, want 10", n)
	}
}

func TestClosedLoopWaitsInsteadOfOverflowing(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond)
	}))
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	r := req("closed", srv.URL, 20, 500*time.Millisecond)
	r.OpenLoop = false
	r.Connections = 1
	r.MaxPendingRequests = 1
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP2xx: 10})
	// One connection at 150 ms per request cannot keep 50 ms spacing: the
	// worker waited, and says so. Request 3, due at 150 ms, waits for the
	// queue to free, which the second answer does no sooner than 300 ms:
	// a lower bound on lateness that holds on any load.
	if res.GetCounters()[record.LateSends] == 0 {
		t.Errorf("no late sends counted in %v", res.GetCounters())
	}
	if st := statsByID(res)[record.SendLateness]; st.GetCount() != 10 || st.GetMax() < int64(100*time.Millisecond) {
		t.Errorf("send_lateness = %v, want 10 sends, the latest over 100ms late", st)
	}
}

func TestIdleConnectionClosedEarlierIsReplaced(t *testing.T) {
	t.Parallel()
	// The server answers keep-alive and closes the connection at once;
	// requests come a second apart, so each finds its idle connection
	// closed long before (the engine checks a connection idle for over
	// 100 ms). It notices before writing and dials anew: no reset, and
	// nothing re-sent.
	srv := newRawServer(t, answerOnce("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	te := startEngine(t, Options{})
	res := te.execute(t, req("stale", srv.url(), 1, 3*time.Second)).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP2xx: 3})
	if n := srv.conns.Load(); n != 3 {
		t.Errorf("server saw %d connections, want 3 (each closed idle one replaced)", n)
	}
}

func TestOutcomeConnectTimeout(t *testing.T) {
	t.Parallel()
	// A listener with an accept queue of one that never accepts: the first
	// handshake completes into the queue, the kernel drops every later SYN,
	// so those connects time out.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	te := startEngine(t, Options{})
	r := req("connect-timeout", fmt.Sprintf("http://127.0.0.1:%d/", port), 10, 500*time.Millisecond)
	r.Timeout = durationpb.New(300 * time.Millisecond)
	r.ProgressInterval = durationpb.New(100 * time.Millisecond)
	got := te.execute(t, r)
	res := got.mustResult(t)
	// Timeouts have a sample each, without a remote: no connection.
	checkTimeline(t, got, fmt.Sprintf("127.0.0.1:%d", port))
	c := res.GetCounters()
	// How many handshakes the kernel completes into a queue of "0" is its
	// own business (one, or two); each of those requests is written and
	// lost at the drain's end, every other connect times out.
	if lost := c[record.InflightLost]; lost < 1 || lost > 2 || c[record.PoolFailureTimeout] != 5-lost {
		t.Errorf("counters %v, want 1-2 lost and the rest pool_failure_timeout", c)
	}
	wantCounters(t, res, map[string]uint64{
		record.InflightLost:       c[record.InflightLost],
		record.PoolFailureTimeout: c[record.PoolFailureTimeout],
	})
}
