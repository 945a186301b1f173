package engine

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// udpSocket is a worker's UDP echo mode: one connected socket, on which
// the pacer sends each message due as one datagram, its 16 hex digit
// sequence number then the body, and a reader matches what comes back by
// that number (datagrams reorder and vanish).
//
// Every message due has exactly one outcome: udp_datagrams_received (its
// echo came back in time, byte for byte), udp_lost (unanswered for the
// timeout, or when the drain ended), udp_send_errors, udp_deferred
// (max_inflight unanswered) or udp_unavailable (no socket). A datagram
// that matches nothing outstanding is udp_unexpected, counted with a
// datagram in flight or when the pacer next sends.
type udpSocket struct {
	w    *worker
	conn *net.UDPConn // nil: no socket
	buf  []byte       // the datagram: sequence number and body

	mu       sync.Mutex
	seq      uint64
	inflight map[uint64]udpInflight
	order    []uint64 // sequence numbers in send order, some already ended
	// unexpected counts stray datagrams not yet counted in a bucket.
	unexpected uint32
	quiet      chan struct{}
	done       chan struct{}
	closing    atomic.Bool
}

type udpInflight struct {
	due  int64
	sent time.Time
}

func newUDPSocket(w *worker) *udpSocket {
	return &udpSocket{w: w, inflight: make(map[uint64]udpInflight), quiet: make(chan struct{}, 1), done: make(chan struct{})}
}

func (u *udpSocket) open(int64) {
	s := u.w.spec
	ctx, cancel := context.WithTimeout(u.w.dialCtx, s.timeout)
	defer cancel()
	nc, err := u.w.dialer.DialContext(ctx, "udp", s.addr)
	if err != nil {
		close(u.done)
		return
	}
	u.conn = nc.(*net.UDPConn)
	u.buf = make([]byte, udpSeqLen+len(s.message))
	copy(u.buf[udpSeqLen:], s.message)
	go u.readLoop()
}

func (u *udpSocket) send(due int64) {
	st := u.w.stats
	fail := func(id counterID) {
		st.fail(failSample{due: due, at: u.w.now(), class: uint8(id), reason: noDetail, phase: noDetail})
	}
	if u.conn == nil {
		fail(cUDPUnavailable)
		return
	}
	u.mu.Lock()
	stray := u.unexpected
	u.unexpected = 0
	if len(u.inflight) >= u.w.spec.udp.maxInflight {
		u.mu.Unlock()
		st.detail(due, cUDPUnexpected, stray)
		fail(cUDPDeferred)
		return
	}
	seq := u.seq
	u.seq++
	first := len(u.inflight) == 0
	sent := time.Now()
	u.inflight[seq] = udpInflight{due: due, sent: sent}
	u.order = append(u.order, seq)
	if first {
		// The reader may wait with no deadline: give it this one's.
		_ = u.conn.SetReadDeadline(sent.Add(u.w.spec.udp.timeout))
	}
	u.mu.Unlock()
	st.detail(due, cUDPUnexpected, stray)
	putSeq(u.buf, seq)
	if _, err := u.conn.Write(u.buf); err != nil {
		u.mu.Lock()
		_, mine := u.inflight[seq]
		delete(u.inflight, seq)
		u.mu.Unlock()
		if mine {
			fail(cUDPSendErrors)
		}
		return
	}
	st.detail(due, cUDPSent, 1)
}

// putSeq writes seq as 16 hex digits at the start of buf.
func putSeq(buf []byte, seq uint64) {
	var n [8]byte
	for i := range n {
		n[i] = byte(seq >> (56 - 8*i))
	}
	hex.Encode(buf[:udpSeqLen], n[:])
}

// readLoop matches datagrams by sequence number and counts, whenever its
// read deadline passes, the datagrams whose timeout has.
func (u *udpSocket) readLoop() {
	defer close(u.done)
	msg := u.w.spec.message
	buf := make([]byte, udpSeqLen+len(msg)+1)
	for {
		n, err := u.conn.Read(buf)
		now := u.w.now()
		var ne net.Error
		switch {
		case err == nil:
			u.match(buf[:n], msg, now)
		case errors.As(err, &ne) && ne.Timeout():
		case u.closing.Load() || errors.Is(err, net.ErrClosed):
			return
		default:
			// ICMP port unreachable and the like: the datagram is lost
			// when its timeout passes.
		}
		u.sweep(time.Now())
	}
}

// match ends the datagram b echoes, or counts b unexpected.
func (u *udpSocket) match(b, msg []byte, now int64) {
	var f udpInflight
	ok := len(b) == udpSeqLen+len(msg) && bytes.Equal(b[udpSeqLen:], msg)
	if ok {
		seq, err := strconv.ParseUint(string(b[:udpSeqLen]), 16, 64)
		u.mu.Lock()
		f, ok = u.inflight[seq]
		ok = ok && err == nil
		if ok {
			delete(u.inflight, seq)
		}
		u.mu.Unlock()
	}
	if ok {
		u.w.stats.fate(f.due, now, cUDPReceived, true)
		return
	}
	u.mu.Lock()
	var held []int64
	for _, seq := range u.order {
		if g, in := u.inflight[seq]; in {
			held = append(held, g.due)
			break
		}
	}
	if held == nil {
		u.unexpected++
	}
	u.mu.Unlock()
	if held != nil {
		u.w.stats.detail(held[0], cUDPUnexpected, 1)
	}
}

// sweep counts lost the datagrams sent longer than the timeout before now,
// and sets the read deadline to the next one's timeout.
func (u *udpSocket) sweep(now time.Time) {
	timeout := u.w.spec.udp.timeout
	var lost []int64
	u.mu.Lock()
	i := 0
	for ; i < len(u.order); i++ {
		f, in := u.inflight[u.order[i]]
		if !in {
			continue
		}
		if now.Sub(f.sent) < timeout {
			break
		}
		delete(u.inflight, u.order[i])
		lost = append(lost, f.due)
	}
	u.order = u.order[i:]
	next := time.Time{}
	for _, seq := range u.order {
		if f, in := u.inflight[seq]; in {
			next = f.sent.Add(timeout)
			break
		}
	}
	empty := len(u.inflight) == 0
	// Under mu, so that a send's deadline is never overwritten.
	_ = u.conn.SetReadDeadline(next)
	u.mu.Unlock()
	u.lost(lost)
	if empty {
		select {
		case u.quiet <- struct{}{}:
		default:
		}
	}
}

// drain waits until every datagram is answered or lost (at most the
// timeout), then closes the socket; abort counts what is left lost at
// once.
func (u *udpSocket) drain(abort <-chan struct{}) {
	defer u.w.dialStop()
	if u.conn == nil {
		return
	}
	timer := time.NewTimer(u.w.spec.udp.timeout + 100*time.Millisecond)
	defer timer.Stop()
	for {
		u.mu.Lock()
		n := len(u.inflight)
		u.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-u.quiet:
			continue
		case <-timer.C:
		case <-abort:
		}
		break
	}
	u.closing.Store(true)
	u.conn.Close()
	<-u.done
	u.mu.Lock()
	left := u.inflight
	u.inflight = nil
	u.mu.Unlock()
	dues := make([]int64, 0, len(left))
	for _, f := range left {
		dues = append(dues, f.due)
	}
	u.lost(dues)
}

// lost counts the datagrams due at dues lost, each a failure of its
// outcome class with its sample.
func (u *udpSocket) lost(dues []int64) {
	at := u.w.now()
	for _, due := range dues {
		u.w.stats.fail(failSample{due: due, at: at, class: uint8(cUDPLost), reason: noDetail, phase: noDetail})
	}
}
