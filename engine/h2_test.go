package engine

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/httpwire"
	"github.com/sortie-soak/sortie/record"
)

// h2Server is a loopback HTTP/2 server: /<code> answers that status,
// /reset resets the stream before any header, /hang answers nothing until
// the client gives up. It counts the requests that came as HTTP/2 and
// those that did not.
type h2Server struct {
	*httptest.Server
	h2, other atomic.Int64
}

func newH2Server(t *testing.T, tlsOn bool) *h2Server {
	s := &h2Server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && (!tlsOn || r.TLS.NegotiatedProtocol == "h2") {
			s.h2.Add(1)
		} else {
			s.other.Add(1)
		}
		switch p := r.URL.Path[1:]; p {
		case "reset":
			// net/http resets the stream (RST_STREAM) for this panic.
			panic(http.ErrAbortHandler)
		case "hang":
			<-r.Context().Done()
		default:
			code, _ := strconv.Atoi(p)
			w.WriteHeader(code)
			_, _ = fmt.Fprintln(w, "body")
		}
	}))
	if tlsOn {
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		// h2c with prior knowledge only: an HTTP/1.1 request would fail,
		// so every answer proves the engine spoke HTTP/2.
		s.Config.Protocols = new(http.Protocols)
		s.Config.Protocols.SetUnencryptedHTTP2(true)
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func h2Req(id, url string) *enginev1.ExecuteRequest {
	r := req(id, url, 20, 500*time.Millisecond)
	r.Protocol = enginev1.Protocol_HTTP2
	return r
}

// TestH2Outcomes drives h2c with prior knowledge and classifies each of
// the server's answers into exactly one outcome class per request
// (mustResult checks conservation): statuses, a RST_STREAM before headers,
// a response past request_timeout.
func TestH2Outcomes(t *testing.T) {
	t.Parallel()
	srv := newH2Server(t, false)
	te := startEngine(t, Options{})
	t.Cleanup(func() {
		if n := srv.other.Load(); n != 0 {
			t.Errorf("%d requests did not come as HTTP/2", n)
		}
		if n := srv.h2.Load(); n != 40 {
			t.Errorf("server saw %d HTTP/2 requests, want 40", n)
		}
	})
	for _, c := range []struct {
		path string
		want map[string]uint64
	}{
		{"200", map[string]uint64{record.HTTP2xx: 10}},
		{"503", map[string]uint64{record.HTTP5xx: 10}},
		{"reset", map[string]uint64{
			record.StreamResets: 10, record.ResetsBeforeHeaders: 10,
			record.StreamResetsPrefix + record.ReasonRemoteReset: 10,
		}},
		{"hang", map[string]uint64{record.RequestTimeout: 10}},
	} {
		t.Run(c.path, func(t *testing.T) {
			t.Parallel()
			r := h2Req("h2-"+c.path, srv.URL+"/"+c.path)
			r.RequestTimeout = durationpb.New(100 * time.Millisecond)
			res := te.execute(t, r).mustResult(t)
			wantCounters(t, res, c.want)
		})
	}
}

// TestH2StreamCap: one connection of one stream and one pending slot hold
// two requests; the rest of an open-loop schedule overflows, and the two
// the server never answers are lost when the drain ends.
func TestH2StreamCap(t *testing.T) {
	t.Parallel()
	srv := newH2Server(t, false)
	te := startEngine(t, Options{})
	r := h2Req("h2-cap", srv.URL+"/hang")
	r.Connections, r.MaxConcurrentStreams, r.MaxPendingRequests = 1, 1, 1
	r.Timeout = durationpb.New(300 * time.Millisecond)
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.InflightLost: 2, record.PoolOverflow: 8})
	if n := srv.h2.Load(); n != 1 {
		t.Errorf("server saw %d requests, want 1: the stream cap holds the second back", n)
	}
}

// TestH2TLS negotiates h2 by ALPN over TLS.
func TestH2TLS(t *testing.T) {
	t.Parallel()
	srv := newH2Server(t, true)
	te := startEngine(t, Options{})
	r := h2Req("h2-tls", srv.URL+"/200")
	r.Tls = &enginev1.TLS{InsecureSkipVerify: true}
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP2xx: 10})
	if h2, other := srv.h2.Load(), srv.other.Load(); h2 != 10 || other != 0 {
		t.Errorf("server saw %d h2 and %d other requests, want 10 and 0", h2, other)
	}
}

// TestH2NotNegotiated: a TLS server that does not offer h2 fails every
// connection (the engine never falls back to HTTP/1.1).
func TestH2NotNegotiated(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	r := h2Req("h2-no-alpn", srv.URL+"/")
	r.Tls = &enginev1.TLS{InsecureSkipVerify: true}
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.PoolConnectionFailure: 10, record.PoolFailureRemote: 10})
}

// TestH2GoAway: a server that answers a request's HEADERS with a GOAWAY
// naming no stream, and closes, leaves each request unanswered: a reset
// before headers with reason connection_termination, never re-sent.
func TestH2GoAway(t *testing.T) {
	t.Parallel()
	var streams atomic.Int64
	srv := newRawServer(t, func(c net.Conn, _ int64) {
		defer c.Close()
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c, preface); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		if fr.WriteSettings() != nil {
			return
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if _, ok := f.(*http2.HeadersFrame); ok {
				streams.Add(1)
				_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
				return
			}
		}
	})
	te := startEngine(t, Options{})
	res := te.execute(t, h2Req("h2-goaway", srv.url())).mustResult(t)
	wantCounters(t, res, map[string]uint64{
		record.StreamResets: 10, record.ResetsBeforeHeaders: 10,
		record.StreamResetsPrefix + record.ReasonConnectionTermination: 10,
	})
	if n := streams.Load(); n != 10 {
		t.Errorf("server saw %d requests, want 10: none re-sent", n)
	}
}

// TestH2HeaderLimit: a response whose headers pass the bound of an
// HTTP/1.1 response's (httpwire.MaxHeaderBytes) breaks its stream, a
// reset before headers with reason overflow, as over HTTP/1.1.
func TestH2HeaderLimit(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("x", httpwire.MaxHeaderBytes))
		w.WriteHeader(200)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	res := te.execute(t, h2Req("h2-big", srv.URL+"/")).mustResult(t)
	wantCounters(t, res, map[string]uint64{
		record.StreamResets: 10, record.ResetsBeforeHeaders: 10,
		record.StreamResetsPrefix + record.ReasonOverflow: 10,
	})
}

// TestH2ClosedLoopWaits: closed loop, one connection of one stream and one
// pending slot: the pacer waits for room instead of overflowing, and says
// so in its late sends.
func TestH2ClosedLoopWaits(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	r := h2Req("h2-closed", srv.URL+"/")
	r.OpenLoop = false
	r.Connections, r.MaxConcurrentStreams, r.MaxPendingRequests = 1, 1, 1
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP2xx: 10})
	// Request 3, due at 100 ms, waits until the first answer (150 ms at
	// the soonest) frees the pending slot: a lower bound on lateness.
	if st := statsByID(res)[record.SendLateness]; st.GetCount() != 10 || st.GetMax() < int64(40*time.Millisecond) {
		t.Errorf("send_lateness = %v, want 10 sends, the latest over 40ms late", st)
	}
}

// TestH2StopDeadlineAbortsInFlight: a Stop whose deadline passes cuts the
// HTTP/2 requests in flight short: each is a local reset, and the result
// still conserves every planned request.
func TestH2StopDeadlineAbortsInFlight(t *testing.T) {
	t.Parallel()
	inFlight := newSeen()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.mark()
		<-r.Context().Done()
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	r := req("h2-aborted", srv.URL+"/", 20, 20*time.Second)
	r.Protocol = enginev1.Protocol_HTTP2
	ch := startStream(t, te, r)
	inFlight.wait(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	te.stopChecked.Store(true)
	if err := te.e.Stop(ctx); err == nil {
		t.Error("Stop past its deadline returned nil")
	}
	res := (<-ch).mustResult(t)
	c := res.GetCounters()
	if c[record.StreamResetsPrefix+record.ReasonLocalReset] == 0 || c[record.StreamResets] != c[record.StreamResetsPrefix+record.ReasonLocalReset] {
		t.Errorf("counters %v, want every in-flight request a local reset", c)
	}
}
