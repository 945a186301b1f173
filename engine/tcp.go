package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// tcpConns is a worker's raw TCP echo mode: a fixed set of connections,
// opened before the first message is due and never reopened (a connection
// the peer closed is unavailable from then on, as in the sortie +
// Nighthawk stack), each with a writer and a reader goroutine. The pacer
// hands each message due to the next connection, round-robin; the writer
// writes it, the reader matches the echoes in order.
//
// Every message due has exactly one outcome: not sent (tcp_deferred,
// tcp_unavailable) or sent (tcp_messages_sent); a message sent then has
// exactly one fate, with an echo expected: tcp_messages_received,
// tcp_echo_mismatch, tcp_inflight_lost or tcp_drain_incomplete. Without an
// echo a message written is done, one whose write failed or never
// happened is tcp_inflight_lost or tcp_drain_incomplete.
type tcpConns struct {
	w *worker
	// The mode's settings and counters: the TCP mode's, or the WebSocket
	// mode's (ws not nil: each connection upgraded, messages framed).
	ids         connIDs
	n           int
	maxInflight int
	echo        bool
	drainFor    time.Duration
	ws          *wsSpec

	conns []*tcpConn
	next  int
	// quiet is signalled whenever a connection has nothing outstanding.
	quiet chan struct{}
	wg    sync.WaitGroup
}

// tcpConn is one connection. mu guards inflight (due times of the
// messages handed to it and not yet ended, in write order), state and
// queued.
type tcpConn struct {
	t  *tcpConns
	nc net.Conn
	// br reads a WebSocket connection (what followed the upgrade's 101
	// included); nil in TCP mode.
	br *bufio.Reader
	// kick wakes the writer; queued (under mu) is how many messages of
	// inflight, the last ones, it has not written yet.
	kick chan struct{}

	mu       sync.Mutex
	inflight []int64
	queued   int
	open     bool
	// closedUncounted: the peer closed it while nothing was in flight;
	// tcp_connection_closed is counted when the pacer next picks it.
	closedUncounted bool
	// strayUncounted: bytes no message asked for came while nothing was
	// in flight (benchmark.connection_protocol_error), counted the same way.
	strayUncounted bool
	closeOnce      sync.Once
	local          atomic.Bool // the engine closed it
}

// connIDs are the counters of a connection mode (see record.TCPDetails
// and record.StreamDetails): outcome classes, fates of a message sent,
// connection events.
type connIDs struct {
	sent, deferred, unavailable                      counterID
	received, mismatch, lost, drainIncomplete        counterID
	opened, connectFailures, rejected, closed, stray counterID
}

var (
	tcpIDs = connIDs{cTCPSent, cTCPDeferred, cTCPUnavailable,
		cTCPReceived, cTCPMismatch, cTCPLost, cTCPDrainIncomplete,
		cTCPOpened, cTCPConnectFailures, cTCPConnectFailures, cTCPClosed, cConnProtocol}
	wsIDs = connIDs{cWSSent, cWSDeferred, cWSUnavailable,
		cWSReceived, cWSUnexpected, cWSLost, cWSDrainIncomplete,
		cWSOpened, cWSOpenFailures, cWSUpgradeRejected, cWSEarlyClose, cWSProtocolErrors}
)

func newTCPConns(w *worker) *tcpConns {
	o := w.spec.tcp
	return &tcpConns{w: w, ids: tcpIDs, n: o.connections, maxInflight: o.maxInflight, echo: o.echo, drainFor: o.drain,
		quiet: make(chan struct{}, 1)}
}

// newWSConns is the WebSocket mode's: TCP echo over upgraded connections.
func newWSConns(w *worker) *tcpConns {
	o := w.spec.ws
	return &tcpConns{w: w, ids: wsIDs, n: o.streams, maxInflight: o.maxInflight, echo: true, drainFor: o.drain, ws: o,
		quiet: make(chan struct{}, 1)}
}

// open dials every connection at once and waits for them, each bounded
// by the execution's timeout.
func (t *tcpConns) open(first int64) {
	t.conns = make([]*tcpConn, t.n)
	var wg sync.WaitGroup
	var opened, failed, rejected atomic.Uint32
	for i := range t.conns {
		c := &tcpConn{t: t, kick: make(chan struct{}, 1)}
		t.conns[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, br, err := t.dial()
			switch {
			case errors.Is(err, errUpgradeRejected):
				rejected.Add(1)
				return
			case err != nil:
				failed.Add(1)
				return
			}
			opened.Add(1)
			c.nc, c.br, c.open = nc, br, true
		}()
	}
	wg.Wait()
	t.w.stats.detail(first, t.ids.opened, opened.Load())
	t.w.stats.detail(first, t.ids.connectFailures, failed.Load())
	t.w.stats.detail(first, t.ids.rejected, rejected.Load())
	for _, c := range t.conns {
		if c.open {
			t.wg.Add(2)
			go c.writeLoop()
			go c.readLoop()
		}
	}
}

// dial opens a connection, over TLS when the spec says, and upgrades it
// in WebSocket mode; within the execution's timeout.
func (t *tcpConns) dial() (net.Conn, *bufio.Reader, error) {
	s := t.w.spec
	ctx, cancel := context.WithTimeout(t.w.dialCtx, s.timeout)
	defer cancel()
	nc, err := t.w.dialer.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, nil, err
	}
	if s.tls != nil {
		tc := tls.Client(nc, s.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, nil, err
		}
		nc = tc
	}
	if t.ws == nil {
		return nc, nil, nil
	}
	deadline, _ := ctx.Deadline()
	br, err := upgrade(nc, t.ws, deadline)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, br, nil
}

// send hands the message due at due to the next connection, or counts it
// dropped.
func (t *tcpConns) send(due int64) {
	st := t.w.stats
	c := t.conns[t.next]
	t.next = (t.next + 1) % len(t.conns)
	c.mu.Lock()
	switch {
	case !c.open:
		closed, stray := c.closedUncounted, c.strayUncounted
		c.closedUncounted, c.strayUncounted = false, false
		c.mu.Unlock()
		if closed {
			st.detail(due, t.ids.closed, 1)
		}
		if stray {
			st.detail(due, t.ids.stray, 1)
		}
		st.fail(failSample{due: due, at: t.w.now(), class: uint8(t.ids.unavailable), reason: noDetail, phase: noDetail})
	case len(c.inflight) >= t.maxInflight:
		c.mu.Unlock()
		st.fail(failSample{due: due, at: t.w.now(), class: uint8(t.ids.deferred), reason: noDetail, phase: noDetail})
	default:
		c.inflight = append(c.inflight, due)
		c.mu.Unlock()
		// Counted before the writer can end it, so its bucket is open.
		st.detail(due, t.ids.sent, 1)
		st.outcomeAt(t.w.now())
		c.mu.Lock()
		c.queued++
		c.mu.Unlock()
		select {
		case c.kick <- struct{}{}:
		default: // the writer is awake and takes it with the others
		}
	}
}

// writeBatch is the most a writer puts in one Write: what fell due
// together goes out in one system call (a message at least).
const writeBatch = 64 << 10

// writeLoop writes the messages queued, in order, as many in one Write
// as fit in writeBatch.
func (c *tcpConn) writeLoop() {
	defer c.t.wg.Done()
	msg := c.t.w.spec.message
	per := 1
	if len(msg) > 0 {
		per = max(1, writeBatch/len(msg))
	}
	batch := bytes.Repeat(msg, per)
	frames := c.t.ws != nil
	for range c.kick {
		for {
			c.mu.Lock()
			n := min(c.queued, per)
			c.queued -= n
			open := c.open
			c.mu.Unlock()
			if n == 0 || !open {
				// Nothing left, or its messages were counted lost with
				// the connection.
				break
			}
			out := batch[:n*len(msg)]
			if frames {
				out = c.frames(batch[:0], n)
				batch = out[:0]
			}
			if _, err := c.nc.Write(out); err != nil {
				c.fail(err)
				break
			}
			c.written(n)
		}
	}
}

// written ends, without an echo expected, the n messages just written:
// the first n in flight, since those written before are done already.
func (c *tcpConn) written(n int) {
	if c.t.echo {
		return
	}
	c.mu.Lock()
	if !c.open {
		c.mu.Unlock()
		return
	}
	dues := append([]int64(nil), c.inflight[:n]...)
	c.inflight = c.inflight[n:]
	empty := len(c.inflight) == 0
	c.mu.Unlock()
	now := c.t.w.now()
	for _, due := range dues {
		c.t.w.stats.fate(due, now, noCounter, false)
	}
	if empty {
		c.t.signalQuiet()
	}
}

// readLoop matches echoes in order, a message's length at a time; without
// an echo it reads only to learn that the peer closed.
func (c *tcpConn) readLoop() {
	defer c.t.wg.Done()
	msg := c.t.w.spec.message
	if c.t.ws != nil {
		c.wsReadLoop()
		return
	}
	if !c.t.echo {
		_, err := io.Copy(io.Discard, c.nc)
		c.fail(err)
		return
	}
	buf := make([]byte, len(msg))
	for {
		if _, err := io.ReadFull(c.nc, buf); err != nil {
			c.fail(err)
			return
		}
		now := c.t.w.now()
		c.mu.Lock()
		if len(c.inflight) == 0 {
			// Bytes no message asked for: the connection is unusable.
			// Counted when the pacer next picks the connection. (The
			// echo of a message handed to the writer may come back
			// before the writer's Write returns: it is in flight.)
			c.strayUncounted = true
			c.mu.Unlock()
			c.closeLocal(c.t.ids.lost)
			return
		}
		due := c.inflight[0]
		c.inflight = c.inflight[1:]
		empty := len(c.inflight) == 0
		c.mu.Unlock()
		if !c.echoed(due, now, empty, bytes.Equal(buf, msg)) {
			return
		}
	}
}

// echoed ends the message due at due, just taken off inflight (empty:
// nothing is left), as echoed (ok) or mismatched, at now; it says whether
// the connection is still open.
func (c *tcpConn) echoed(due, now int64, empty, ok bool) bool {
	if !ok {
		c.t.w.stats.fate(due, now, c.t.ids.mismatch, false)
		c.closeLocal(c.t.ids.lost)
		return false
	}
	c.t.w.stats.fate(due, now, c.t.ids.received, true)
	if empty {
		c.t.signalQuiet()
	}
	return true
}

// fail ends the connection after a read or write error: unless the engine
// closed it, the peer closed or reset it (tcp_connection_closed, counted
// with its first message in flight, or when the pacer next picks it) and
// every message in flight is lost.
func (c *tcpConn) fail(err error) {
	if c.local.Load() {
		return
	}
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.open = false
		lost := c.inflight
		c.inflight, c.queued = nil, 0
		if len(lost) == 0 {
			c.closedUncounted = true
		}
		c.mu.Unlock()
		c.nc.Close()
		if len(lost) > 0 {
			c.t.w.stats.detail(lost[0], c.t.ids.closed, 1)
		}
		c.end(lost, c.t.ids.lost)
	})
}

// closeLocal closes the connection from the engine's side and counts what
// was in flight as id.
func (c *tcpConn) closeLocal(id counterID) {
	c.local.Store(true)
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.open = false
		left := c.inflight
		c.inflight, c.queued = nil, 0
		c.mu.Unlock()
		c.nc.Close()
		c.end(left, id)
	})
}

// end counts the messages due at dues as id and says the connection is
// quiet.
func (c *tcpConn) end(dues []int64, id counterID) {
	now := c.t.w.now()
	for _, due := range dues {
		c.t.w.stats.fate(due, now, id, false)
	}
	c.t.signalQuiet()
}

func (t *tcpConns) signalQuiet() {
	select {
	case t.quiet <- struct{}{}:
	default:
	}
}

// outstanding says some connection has a message in flight.
func (t *tcpConns) outstanding() bool {
	for _, c := range t.conns {
		c.mu.Lock()
		n := len(c.inflight)
		c.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// drain waits up to drain_duration for every message in flight to end,
// then closes every connection; what is still in flight is
// tcp_drain_incomplete.
func (t *tcpConns) drain(abort <-chan struct{}) {
	timer := time.NewTimer(t.drainFor)
	defer timer.Stop()
	for t.outstanding() {
		select {
		case <-t.quiet:
			continue
		case <-timer.C:
		case <-abort:
		}
		break
	}
	for _, c := range t.conns {
		close(c.kick)
		if c.nc != nil {
			c.closeLocal(t.ids.drainIncomplete)
		}
	}
	t.wg.Wait()
	t.w.dialStop()
}
