package engine

// The HTTP/2 client of an execution with protocol HTTP2: h2 negotiated by
// ALPN over TLS for an https url, h2c with prior knowledge for an http url.
//
// It is golang.org/x/net/http2's ClientConn, one per connection, in a pool
// of the worker's own rather than net/http's Transport. Two reasons. The
// Transport retries a request that a GOAWAY refused on another connection,
// and the engine never re-sends a request; a ClientConn does not retry.
// And x/net returns its failures as exported types (StreamError with the
// RST_STREAM code, GoAwayError, ConnectionError), which is what tells the
// reset reasons apart; net/http's bundled copy keeps them unexported. The
// pool is small: at most connections per worker, at most
// max_concurrent_streams requests on each (and never more than the
// server's SETTINGS_MAX_CONCURRENT_STREAMS, which CanTakeNewRequest
// reads), and max_pending_requests more waiting for a stream.
//
// The pacer is the HTTP/1.1 one (worker.run); only dispatch differs. Each
// request is a goroutine from hand-over to outcome, since HTTP/2 carries
// many on one connection; its outcome goes into the same counters, classes
// and timeline as an HTTP/1.1 request's, so the conservation law is one:
// planned = the outcome classes + unsent.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http2"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/httpwire"
	"github.com/sortie-soak/sortie/record"
)

// defaultStreams caps the requests in flight on one connection when the
// plan sets no max_concurrent_streams: HTTP/2's recommended least value of
// SETTINGS_MAX_CONCURRENT_STREAMS. The server's own setting caps it too.
const defaultStreams = 100

// h2Spec is what an HTTP/2 request is made of, prepared once.
type h2Spec struct {
	method  string
	url     *url.URL
	host    string // :authority
	header  http.Header
	body    []byte
	streams int // per connection
	// grpc: each request is a gRPC unary call, body its framed message.
	grpc bool
}

// parseH2 prepares the HTTP/2 request of req (target u, whose headers
// buildRequest already checked).
func parseH2(req *enginev1.ExecuteRequest, u *url.URL) *h2Spec {
	h := &h2Spec{method: req.GetMethod(), url: u, host: u.Host, header: http.Header{}, body: req.GetBody()}
	if h.method == "" {
		h.method = http.MethodGet
	}
	h.header.Set("User-Agent", defaultUserAgent)
	for _, hd := range req.GetHeaders() {
		name, value := hd.GetName(), strings.TrimSpace(hd.GetValue())
		switch strings.ToLower(name) {
		case "host":
			h.host = value
		case "user-agent":
			if value == "" {
				h.header.Del("User-Agent")
			} else {
				h.header.Set("User-Agent", value)
			}
		default:
			h.header.Add(name, value)
		}
	}
	if req.GetGrpc().GetMode() == enginev1.GRPC_UNARY {
		// A unary call: one length-prefixed message (uncompressed, the
		// 4-byte big-endian length), and the headers gRPC requires.
		h.grpc = true
		h.method = http.MethodPost
		framed := make([]byte, 5+len(h.body))
		binary.BigEndian.PutUint32(framed[1:5], uint32(len(h.body)))
		copy(framed[5:], h.body)
		h.body = framed
		h.header.Set("Content-Type", "application/grpc")
		h.header.Set("Te", "trailers")
	}
	h.streams = int(req.GetMaxConcurrentStreams())
	if h.streams == 0 {
		h.streams = defaultStreams
	}
	return h
}

// h2Conn is one HTTP/2 connection of a worker's pool.
type h2Conn struct {
	cc       *http2.ClientConn
	nc       net.Conn
	inflight int // requests on it now, under the worker's lock
	// What a failure sample says of it (see conn.describe).
	remote  netip.AddrPort
	since   int64
	carried uint64
}

// h2Pool is a worker's HTTP/2 state, under the worker's lock.
type h2Pool struct {
	t       *http2.Transport
	conns   []*h2Conn
	dialing int
	// n is the requests handed over and not yet counted: in flight or
	// waiting for a stream.
	n int
	// freed wakes requests waiting for a stream.
	freed chan struct{}
	// ctx is cancelled when the drain ends (expire): requests in flight
	// return at once.
	ctx    context.Context
	cancel context.CancelFunc
}

func newH2Pool() *h2Pool {
	p := &h2Pool{
		// DisableCompression: the engine asks for what the plan says,
		// no Accept-Encoding of its own. MaxHeaderListSize: the bound
		// of HTTP/1.1 responses' headers (httpwire), advertised to the
		// server; a response over it breaks its stream.
		t:     &http2.Transport{AllowHTTP: true, DisableCompression: true, MaxHeaderListSize: httpwire.MaxHeaderBytes},
		freed: make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// dispatchH2 hands the request due at due to a goroutine of its own, or
// counts it pool_overflow (open loop) or waits for room (closed loop)
// when the worker holds connections x streams in flight and
// max_pending_requests more already. false: cancelled while waiting.
func (w *worker) dispatchH2(due int64) bool {
	s, p := w.spec, w.h2
	limit := s.connections*s.h2.streams + s.maxPending
	for {
		w.mu.Lock()
		if p.n < limit {
			p.n++
			w.mu.Unlock()
			w.sent(due)
			w.wg.Add(1)
			go w.h2Request(due)
			return true
		}
		if ended, ok := w.noRoom(due); ended {
			return ok
		}
	}
}

// h2Request carries the request due at due to its outcome.
func (w *worker) h2Request(due int64) {
	defer w.wg.Done()
	c, carried, ok := w.h2Acquire(due)
	if !ok {
		w.h2Done(nil)
		return
	}
	inHand := w.now()
	ctx, cancel := w.h2.ctx, context.CancelFunc(func() {})
	if rt := w.spec.requestTimeout; rt > 0 {
		ctx, cancel = context.WithTimeout(ctx, rt)
	}
	code, status, headersDone, err := w.h2RoundTrip(ctx, c)
	cancel()
	end := w.now()
	// What a sample says of the connection: as it was when the request
	// took its stream (c.carried moves under the lock meanwhile).
	d := conn{remote: c.remote, since: c.since, carried: carried}
	if err != nil {
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
		w.roundTripFailure(&d, due, timedOut, headersDone, h2ResetReason(err, w.aborted.Load()))
	} else if w.spec.h2.grpc {
		w.stats.grpcAnswer(code, status, due, end, inHand, &d)
	} else {
		w.stats.response(code, due, end, inHand, &d)
	}
	w.h2Done(c)
}

// h2RoundTrip sends the request on c and reads its response to the end:
// its status code and, of a gRPC call, its grpc-status (-1: none).
func (w *worker) h2RoundTrip(ctx context.Context, c *h2Conn) (int, int, bool, error) {
	h := w.spec.h2
	req := &http.Request{
		Method:        h.method,
		URL:           h.url,
		Host:          h.host,
		Header:        h.header,
		ContentLength: int64(len(h.body)),
		Body:          http.NoBody,
	}
	if len(h.body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(h.body))
	}
	req = req.WithContext(ctx)
	resp, err := c.cc.RoundTrip(req)
	if err != nil {
		return 0, -1, false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return 0, -1, true, err
	}
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		return 0, -1, true, http2.ConnectionError(http2.ErrCodeProtocol)
	}
	status := -1
	if h.grpc {
		status = grpcStatus(resp)
	}
	return resp.StatusCode, status, true, nil
}

// grpcStatus reads a gRPC answer's grpc-status: the trailer, or the header
// of a trailers-only answer; -1 when it has none or one that is not a
// code of 0..16.
func grpcStatus(resp *http.Response) int {
	v, ok := resp.Trailer["Grpc-Status"]
	if !ok {
		v = resp.Header["Grpc-Status"]
	}
	if len(v) != 1 {
		return -1
	}
	// Only the canonical decimal spelling: "01", "+1" or "-0" is not a
	// status gRPC sends.
	n, err := strconv.Atoi(v[0])
	if err != nil || n < 0 || n > record.GRPCMaxStatus || strconv.Itoa(n) != v[0] {
		return -1
	}
	return n
}

// h2Acquire finds the request a stream: on a connection with room, on a
// new one while the pool has fewer than connections, or, waiting, on the
// first that frees one, with the requests the connection carried before.
// false: it was counted (a dial failure, or lost when the drain ended
// while it waited).
func (w *worker) h2Acquire(due int64) (*h2Conn, uint64, bool) {
	p := w.h2
	w.mu.Lock()
	for {
		if w.expired.Load() || w.aborted.Load() {
			w.mu.Unlock()
			w.stats.fail(failSample{due: due, at: w.now(), class: uint8(cInflightLost), reason: noDetail, phase: noDetail})
			return nil, 0, false
		}
		live := p.conns[:0]
		var found *h2Conn
		for _, c := range p.conns {
			if c.inflight == 0 && !c.cc.CanTakeNewRequest() {
				// Closed, or told to go away: no new stream on it.
				_ = c.cc.Close()
				continue
			}
			live = append(live, c)
			if found == nil && c.inflight < w.spec.h2.streams && c.cc.CanTakeNewRequest() {
				found = c
			}
		}
		clear(p.conns[len(live):])
		p.conns = live
		if found != nil {
			found.inflight++
			carried := found.carried
			w.mu.Unlock()
			return found, carried, true
		}
		if len(p.conns)+p.dialing < w.spec.connections {
			p.dialing++
			w.mu.Unlock()
			c, ok := w.h2Dial(due)
			return c, 0, ok
		}
		freed := p.freed
		w.mu.Unlock()
		<-freed
		w.mu.Lock()
	}
}

// h2Dial opens a connection for the request due at due; false when it
// failed (and was counted).
func (w *worker) h2Dial(due int64) (*h2Conn, bool) {
	p := w.h2
	ctx, cancel := context.WithTimeout(w.dialCtx, w.spec.timeout)
	defer cancel()
	c := &h2Conn{since: w.now()}
	nc, err := w.dialer.DialContext(ctx, "tcp", w.spec.addr)
	if err == nil {
		if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
			ap := a.AddrPort()
			c.remote = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		if w.spec.tls != nil {
			tc := tls.Client(nc, w.spec.tls)
			if err = tc.HandshakeContext(ctx); err == nil && tc.ConnectionState().NegotiatedProtocol != "h2" {
				err = errNoH2
			}
			nc = tc
		}
	}
	if err == nil {
		c.nc = nc
		c.cc, err = p.t.NewClientConn(nc)
	}
	w.mu.Lock()
	p.dialing--
	if err != nil || w.expired.Load() || w.aborted.Load() {
		w.h2FreedLocked()
		w.mu.Unlock()
		if nc != nil {
			_ = nc.Close()
		}
		if err != nil {
			w.dialFailure(due, err, ctx)
		} else {
			w.stats.fail(failSample{due: due, at: w.now(), class: uint8(cInflightLost), reason: noDetail, phase: noDetail})
		}
		return nil, false
	}
	c.inflight = 1
	p.conns = append(p.conns, c)
	w.mu.Unlock()
	return c, true
}

// errNoH2 is a TLS server that did not choose h2 by ALPN: it is the
// server's answer, so a remote connection failure.
var errNoH2 = fmt.Errorf("the server did not negotiate h2 by ALPN: %w", io.EOF)

// h2Done gives c's stream back (c nil: the request had none) and ends the
// request's hold on the worker.
func (w *worker) h2Done(c *h2Conn) {
	w.mu.Lock()
	if c != nil {
		c.inflight--
		c.carried++
	}
	w.h2.n--
	w.h2FreedLocked()
	w.signalRoomLocked()
	w.signalQuietLocked()
	w.mu.Unlock()
}

// h2FreedLocked wakes the requests waiting for a stream.
func (w *worker) h2FreedLocked() {
	close(w.h2.freed)
	w.h2.freed = make(chan struct{})
}

// h2ResetReason names why an HTTP/2 stream broke, with the reasons of an
// HTTP/1.1 reset: RST_STREAM from the server is remote_reset (but
// PROTOCOL_ERROR, protocol_error), headers over the engine's bound
// overflow, a GOAWAY that left the stream unanswered
// connection_termination, a connection error protocol_error.
func h2ResetReason(err error, aborted bool) counterID {
	var se http2.StreamError
	var ge http2.GoAwayError
	var ce http2.ConnectionError
	switch {
	case aborted:
		return cResetLocal
	case errors.As(err, &se):
		switch {
		case se.Cause != nil && se.Cause.Error() == errHeaderListSize:
			// The engine gave up on headers over its bound, as
			// httpwire does on an HTTP/1.1 response's.
			return cResetOverflow
		case se.Code == http2.ErrCodeProtocol:
			return cResetProtocol
		}
		return cResetRemote
	case errors.As(err, &ge):
		return cResetConnTermination
	case errors.As(err, &ce):
		return cResetProtocol
	}
	return resetReason(err, false)
}

// errHeaderListSize is x/net's message for response headers over
// Transport.MaxHeaderListSize, which it keeps in an unexported error;
// TestH2HeaderLimit notices if it changes.
const errHeaderListSize = "http2: response header list larger than advertised limit"

// h2Expire ends the drain for HTTP/2: requests in flight return at once
// and are counted by their goroutines (lost, or a local reset when
// aborted), as are those waiting for a stream.
func (w *worker) h2Expire() {
	w.h2.cancel()
	w.mu.Lock()
	w.h2FreedLocked()
	w.mu.Unlock()
}

// h2Close closes the pool's connections once no request is left.
func (w *worker) h2Close() {
	w.h2.cancel()
	w.mu.Lock()
	conns := w.h2.conns
	w.h2.conns = nil
	w.mu.Unlock()
	for _, c := range conns {
		_ = c.cc.Close()
	}
}
