package engine

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/httpwire"
)

// Pacing and pool tuning.
const (
	// batchWindow: the shortest time between two wakes of a pacer (see
	// run). A wake-up costs about as much as sending a request; waking
	// at most every 200 us bounds that cost at high rates, leaves the
	// responses time to come back before the pacer collects them, and is
	// small beside the millisecond a send may be late before it counts
	// as late.
	batchWindow = 200 * time.Microsecond
	// readBufferSize bounds a response line (httpwire); a longer one is
	// an overflow.
	readBufferSize = 8 << 10
)

// worker is one pacer and its connection pool. The pacer goroutine hands
// each due request to an idle connection's goroutine, to a new connection,
// or to the queue; each connection goroutine writes and reads serially and
// then takes queued work or goes idle. No goroutine is started per request.
type worker struct {
	spec   *spec
	index  int
	base   time.Time // the due time of request 0, with a monotonic reading
	stats  *workerStats
	dialer *net.Dialer

	ctx      context.Context // cancelled: the pacer stops
	dialCtx  context.Context // cancelled: dials in progress give up
	dialStop context.CancelFunc

	mu          sync.Mutex
	idle        []*conn // LIFO: the most recently used connection first
	open        int     // connection goroutines alive (dialing, busy or idle)
	queue       []int64 // due times of requests waiting for a connection
	qhead       int
	conns       map[*conn]struct{} // connections with a socket
	pacerDone   bool
	closing     bool
	roomWaiting bool

	// expired: the drain timed out; what is still in flight is lost.
	expired atomic.Bool
	// aborted: the engine cut in-flight requests short.
	aborted atomic.Bool

	quiet chan struct{} // nothing in flight and the pacer done
	room  chan struct{} // closed loop: a connection or queue slot freed
	wg    sync.WaitGroup

	sleeper *sleeper
	unsent  uint64
	// msg is the TCP or UDP mode's messenger; nil in HTTP mode.
	msg messenger

	// deferOn: a response may wait for the pacer's next wake instead of
	// waking the engine when it arrives (see conn.deferred). Changed
	// under mu.
	deferOn atomic.Bool
	waiting []*conn // deferred responses not yet collected, under mu
	// collected counts the connections collect woke; the pacer's own.
	collected uint64
	// pm is what the pacer counted of its bucket of the timeline and not
	// yet added to it; the pacer's own.
	pm pacerMark

	// h2 is the HTTP/2 pool (protocol HTTP2), nil for HTTP/1.1.
	h2 *h2Pool
}

// newWorker is worker index of s, pacing with sl, with its share of the
// execution's timeline tl.
func newWorker(s *spec, index int, base time.Time, ctx context.Context, statsd bool, sl *sleeper, tl *timeline) *worker {
	w := &worker{
		sleeper: sl,
		spec:    s,
		index:   index,
		base:    base,
		stats:   newWorkerStats(statsd, tl),
		dialer:  &net.Dialer{KeepAlive: 30 * time.Second},
		ctx:     ctx,
		conns:   make(map[*conn]struct{}),
		quiet:   make(chan struct{}, 1),
		room:    make(chan struct{}, 1),
	}
	w.dialCtx, w.dialStop = context.WithCancel(context.Background())
	w.msg = newMessenger(w)
	// A closed-loop worker waits for its responses to send more.
	w.deferOn.Store(s.openLoop && s.tls == nil && s.h2 == nil)
	if s.h2 != nil {
		w.h2 = newH2Pool()
	}
	return w
}

// release closes the worker's timer and ends its dial context; run does
// both itself, so release matters for a worker that never ran.
func (w *worker) release() {
	w.sleeper.close()
	w.dialStop()
	if w.h2 != nil {
		w.h2.cancel()
	}
}

// now is the offset from the due time of request 0, in ns.
func (w *worker) now() int64 { return int64(time.Since(w.base)) }

// run paces the worker's requests, then drains. abort cuts the drain
// short.
func (w *worker) run(abort <-chan struct{}) {
	p := w.spec.pacer
	planned := p.Planned()
	// A rejoining engine takes up the schedule where its start_offset
	// says; the buckets before hold nothing of this execution.
	i := w.spec.first
	stopWake := context.AfterFunc(w.ctx, w.sleeper.wake)
	woke := int64(math.MinInt64 / 2)
	if w.msg != nil && i < planned {
		w.msg.open(int64(p.Offset(i)))
	}
pacing:
	for i < planned {
		// Wake at the next due time, but not sooner than batchWindow
		// after the last wake: a fast pacer wakes once a window and
		// sends what fell due in it together, each request at most a
		// window late; a worker that fell behind sends its backlog so.
		if !w.waitUntil(max(int64(p.Offset(i)), woke+int64(batchWindow))) {
			break
		}
		woke = w.now()
		// Send what is due, then collect: once a wake, not once a
		// request, so that responses have had time to come back.
		for now := woke; i < planned; i++ {
			due := int64(p.Offset(i))
			if due > now {
				break
			}
			w.markDue(due)
			if ml := int64(w.spec.maxLateness); ml > 0 && now-due > ml {
				// Bounded catch-up: a worker this far behind (frozen,
				// starved of CPU) drops what it owes instead of firing
				// its backlog at the target.
				w.stats.fail(failSample{due: due, at: now, class: uint8(cLateDropped), reason: noDetail, phase: noDetail})
			} else if w.msg != nil {
				w.sent(due)
				w.msg.send(due)
			} else if !w.dispatch(due) {
				break pacing
			}
			w.pm.n++
		}
		w.collect()
		w.paced(i, false)
	}
	w.unsent = planned - i
	w.paced(i, true)
	w.mu.Lock()
	w.deferOn.Store(false)
	w.mu.Unlock()
	w.collect()
	stopWake()
	w.sleeper.close() // safe against a wake running now
	if w.msg != nil {
		w.msg.drain(abort)
		return
	}
	w.drain(abort)
}

// markDue notes, before the pacer hands over the request due at due, the
// bucket it counts it in; entering a new bucket adds what it counted of
// the previous one.
func (w *worker) markDue(due int64) {
	b := bucketOf(due, w.stats.tl.width)
	if b != w.pm.b && (w.pm.n > 0 || w.pm.late > 0) {
		w.stats.mu.Lock()
		w.stats.tl.addMark(&w.pm)
		w.stats.mu.Unlock()
	}
	w.pm.b = b
}

// paced adds what the pacer counted to its bucket and closes the buckets
// it has passed, now that request i is the next one due; once stopped
// (request i and those after it are unsent, if any), it closes them all,
// each with the requests due in it that were left unsent.
func (w *worker) paced(i uint64, stopped bool) {
	tl := &w.stats.tl
	p := w.spec.pacer
	to := tl.x.n
	if !stopped && i < p.Planned() {
		// Not past the last bucket: the offset of request Planned (the
		// schedule extended) may lie beyond it.
		to = bucketOf(int64(p.Offset(i)), tl.width)
	}
	if w.pm.n == 0 && w.pm.late == 0 && to <= tl.closedTo {
		return
	}
	var unsent func(k uint32) uint32
	if stopped && i < p.Planned() {
		unsent = func(k uint32) uint32 {
			from := max(p.Before(time.Duration(int64(k)*tl.width)), i)
			until := p.Before(time.Duration(int64(k+1) * tl.width))
			return uint32(until - min(from, until))
		}
	}
	w.stats.mu.Lock()
	tl.addMark(&w.pm)
	tl.closeBelow(to, unsent)
	w.stats.mu.Unlock()
}

// waitUntil blocks until offset due; false if the worker was cancelled
// first. It never spins, and it never holds the thread: it sleeps on the
// worker's sleeper, parked on the runtime's poller, so connection
// goroutines run meanwhile even on one core. A due time already past
// returns at once.
func (w *worker) waitUntil(due int64) bool {
	for {
		if w.ctx.Err() != nil {
			return false
		}
		d := time.Duration(due - w.now())
		if d <= 0 {
			return true
		}
		w.sleeper.sleep(d)
	}
}

// dispatch hands the request due at offset due to the pool. It returns
// false only when the worker was cancelled while a closed-loop worker
// waited for room.
func (w *worker) dispatch(due int64) bool {
	if w.h2 != nil {
		return w.dispatchH2(due)
	}
	collected := false
	for {
		w.mu.Lock()
		if n := len(w.idle); n > 0 {
			c := w.idle[n-1]
			w.idle[n-1] = nil
			w.idle = w.idle[:n-1]
			w.mu.Unlock()
			w.sent(due)
			c.jobs <- due
			return true
		}
		if w.open < w.spec.connections {
			w.open++
			w.mu.Unlock()
			w.sent(due)
			w.wg.Add(1)
			go w.connLoop(due)
			return true
		}
		if len(w.queue)-w.qhead < w.spec.maxPending {
			w.queue = append(w.queue, due)
			w.mu.Unlock()
			w.sent(due)
			return true
		}
		if len(w.waiting) > 0 && !collected {
			// Responses that wait for the pacer may free a connection;
			// once: those not back yet wait again.
			w.mu.Unlock()
			w.collect()
			collected = true
			continue
		}
		if ended, ok := w.noRoom(due); ended {
			return ok
		}
	}
}

// noRoom is a dispatch's answer, with w.mu held (it lets go), to a
// request due at due that finds the worker full: open loop, the request
// is pool_overflow and ended; closed loop, it waits for room, and is not
// ended (look again) unless the execution was cancelled meanwhile (ok
// false).
func (w *worker) noRoom(due int64) (ended, ok bool) {
	if w.spec.openLoop {
		w.mu.Unlock()
		w.stats.fail(failSample{due: due, at: w.now(), class: uint8(cOverflow), reason: noDetail, phase: noDetail})
		return true, true
	}
	w.roomWaiting = true
	w.mu.Unlock()
	select {
	case <-w.room:
		return false, true
	case <-w.ctx.Done():
		return true, false
	}
}

// collect wakes the connections whose responses wait for the pacer (see
// conn.deferred) and lets them read. The pacer collects after it hands
// over the requests due, so that they are not late by the time collecting
// takes; a worker thus keeps one more connection than it would otherwise,
// and collects first when it finds no room.
func (w *worker) collect() {
	w.mu.Lock()
	if len(w.waiting) == 0 {
		w.mu.Unlock()
		return
	}
	w.collected += uint64(len(w.waiting))
	for i, c := range w.waiting {
		select {
		case c.wake <- struct{}{}:
		default:
		}
		w.waiting[i] = nil
	}
	w.waiting = w.waiting[:0]
	w.mu.Unlock()
	runtime.Gosched()
}

// aLongTimeAgo is a deadline that has passed: setting it wakes a
// goroutine waiting to read.
var aLongTimeAgo = time.Unix(1, 0)

// sent records how late the pacer handed over the request due at due.
func (w *worker) sent(due int64) {
	late := w.now() - due
	recordValue(w.stats.lateness, late)
	if late > int64(lateTolerance) {
		w.stats.inc(cLateSends)
		w.pm.late++
	}
}

// Actions of a connection goroutine after a request.
const (
	actWork = iota // take the queued request returned
	actIdle        // wait in the idle list
	actExit        // stop; close the socket if any
)

// next decides what connection c does after a request. Called by c's
// goroutine.
func (w *worker) next(c *conn) (int64, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.qhead < len(w.queue) && !w.closing {
		due := w.queue[w.qhead]
		w.qhead++
		if w.qhead == len(w.queue) {
			w.queue, w.qhead = w.queue[:0], 0
		} else if w.qhead >= 1024 && 2*w.qhead >= len(w.queue) {
			n := copy(w.queue, w.queue[w.qhead:])
			w.queue, w.qhead = w.queue[:n], 0
		}
		w.signalRoomLocked()
		return due, actWork
	}
	if c.nc == nil || w.closing || w.expired.Load() || w.aborted.Load() {
		w.open--
		w.signalRoomLocked()
		w.signalQuietLocked()
		return 0, actExit
	}
	w.idle = append(w.idle, c)
	w.signalRoomLocked()
	w.signalQuietLocked()
	return 0, actIdle
}

func (w *worker) signalRoomLocked() {
	if w.roomWaiting {
		w.roomWaiting = false
		select {
		case w.room <- struct{}{}:
		default:
		}
	}
}

func (w *worker) quietLocked() bool {
	return w.pacerDone && w.qhead == len(w.queue) && w.open == len(w.idle) && (w.h2 == nil || w.h2.n == 0)
}

func (w *worker) signalQuietLocked() {
	if w.quietLocked() {
		select {
		case w.quiet <- struct{}{}:
		default:
		}
	}
}

// drain waits, after the pacer stopped, for what is in flight: up to the
// timeout, or, once the execution is cancelled (before or during the
// drain), up to enginev1.CancelDrain from then if that is sooner; or until
// abort. Then it closes the pool.
func (w *worker) drain(abort <-chan struct{}) {
	w.mu.Lock()
	w.pacerDone = true
	quiet := w.quietLocked()
	w.mu.Unlock()
	if !quiet {
		end := time.Now().Add(w.spec.timeout)
		cancelled := w.ctx.Done()
		if w.ctx.Err() != nil {
			end, cancelled = minTime(end, time.Now().Add(enginev1.CancelDrain)), nil
		}
		t := time.NewTimer(time.Until(end))
	wait:
		for {
			select {
			case <-w.quiet:
			case <-t.C:
				w.expire(false)
			case <-abort:
				w.expire(true)
			case <-cancelled:
				// Cancelled while draining: the drain ends sooner.
				cancelled = nil
				if soon := time.Now().Add(enginev1.CancelDrain); soon.Before(end) {
					end = soon
					t.Reset(time.Until(end))
				}
				continue wait
			}
			break
		}
		t.Stop()
	}
	w.mu.Lock()
	w.closing = true
	for _, c := range w.idle {
		close(c.jobs)
	}
	w.idle = nil
	w.mu.Unlock()
	w.dialStop()
	w.wg.Wait()
	if w.h2 != nil {
		w.h2Close()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// expire ends the drain: queued requests are lost, and every socket's
// deadline is moved to the past so its goroutine counts what it carried
// (lost, or a local reset when aborted) and exits.
func (w *worker) expire(aborted bool) {
	w.mu.Lock()
	if aborted {
		w.aborted.Store(true)
	} else {
		w.expired.Store(true)
	}
	// Once a drain, so copying the due times of the queue is no cost.
	queued := append([]int64(nil), w.queue[w.qhead:]...)
	w.queue, w.qhead = w.queue[:0], 0
	for c := range w.conns {
		_ = c.nc.SetDeadline(aLongTimeAgo)
	}
	w.mu.Unlock()
	now := w.now()
	for _, due := range queued {
		w.stats.fail(failSample{due: due, at: now, class: uint8(cInflightLost), reason: noDetail, phase: noDetail})
	}
	w.dialStop()
	if w.h2 != nil {
		w.h2Expire()
	}
}

// failure counts the request due at due whose round trip on c failed.
func (w *worker) failure(c *conn, due int64, err error, headersDone bool) {
	// The only deadline left is the request's own: expire and abort move
	// it to the past only after they are noted.
	timedOut := c.timed && errors.Is(err, os.ErrDeadlineExceeded)
	w.roundTripFailure(c, due, timedOut, headersDone, resetReason(err, w.aborted.Load()))
}

// roundTripFailure counts a request whose round trip on c failed, an
// HTTP/1.1 or an HTTP/2 one: lost once the drain ended, a request timeout
// when its own timeout fired (and the engine did not abort), else a reset
// in its phase with reason.
func (w *worker) roundTripFailure(c *conn, due int64, timedOut, headersDone bool, reason counterID) {
	f := failSample{due: due, at: w.now(), class: uint8(cInflightLost), reason: noDetail, phase: noDetail}
	c.describe(&f)
	expired := w.expired.Load()
	if !expired && w.spec.h2 != nil && w.spec.h2.grpc {
		// A gRPC call with a stream that ended without a status: its
		// reset or timeout sample places it.
		w.stats.grpcFailed(cGRPCStatusMissing, due, f.at, c, false)
	}
	switch {
	case expired:
	case timedOut && !w.aborted.Load():
		f.class = uint8(cRequestTimeout)
	default:
		f.class, f.phase = uint8(cResets), uint8(cResetsBeforeHeaders)
		if headersDone {
			f.phase = uint8(cResetsIncompleteBody)
		}
		f.reason = uint8(reason)
	}
	w.stats.fail(f)
}

// resetReason names why a stream broke.
func resetReason(err error, aborted bool) counterID {
	var pe *httpwire.ProtocolError
	var le *httpwire.LimitError
	var rhe tls.RecordHeaderError
	switch {
	case errors.As(err, &le):
		// A response over httpwire's limits: the engine gave up on it.
		return cResetOverflow
	case errors.As(err, &pe), errors.As(err, &rhe):
		return cResetProtocol
	case aborted, errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrDeadlineExceeded):
		return cResetLocal
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return cResetRemote
	default:
		// io.EOF, io.ErrUnexpectedEOF, and anything else that ended the
		// connection from the other side.
		return cResetConnTermination
	}
}

// dialFailure counts the request due at due, whose connection could not
// be made.
func (w *worker) dialFailure(due int64, err error, ctx context.Context) {
	f := failSample{due: due, at: w.now(), reason: noDetail, phase: noDetail}
	f.class, f.reason = dialClass(err, ctx, w.expired.Load(), w.aborted.Load())
	w.stats.fail(f)
}

// dialClass is the outcome class of a failed dial, and its detail counter
// (noDetail for none).
func dialClass(err error, ctx context.Context, expired, aborted bool) (uint8, uint8) {
	var ne net.Error
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	var cie x509.CertificateInvalidError
	switch {
	case expired:
		return uint8(cInflightLost), noDetail
	case aborted:
		return uint8(cConnFailure), uint8(cConnLocal)
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return uint8(cConnTimeout), noDetail
	case errors.As(err, &cve), errors.As(err, &uae), errors.As(err, &hne), errors.As(err, &cie):
		// This engine refused the server's certificate.
		return uint8(cConnFailure), uint8(cConnLocal)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), isRemoteTLS(err):
		return uint8(cConnFailure), uint8(cConnRemote)
	default:
		// No route, no local address, a name that did not resolve: the
		// request never left this host.
		return uint8(cConnFailure), uint8(cConnLocal)
	}
}

// isRemoteTLS says err is a TLS alert sent by the server.
func isRemoteTLS(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// conn is one connection and the goroutine that carries its requests.
type conn struct {
	w     *worker
	nc    net.Conn
	raw   syscall.RawConn // of the TCP socket, for the stale check
	rw    io.ReadWriter   // what requests are written to and read from
	rs    *rawSocket      // rw when it is a plain TCP socket, else nil
	br    *bufio.Reader
	jobs  chan int64
	resp  httpwire.Response
	peek  [1]byte
	stale bool
	// timed: the request in flight has a deadline (request_timeout).
	timed bool
	// peekFn and peeked: checkIdle's callback and what it saw.
	peekFn func(fd uintptr) bool
	peeked idleState

	// What a failure sample says of the connection: its peer, when it
	// was made (an offset from the start), and the requests it carried.
	remote  netip.AddrPort
	since   int64
	carried uint64

	// deferred: the response in flight may wait for the pacer. Its bytes
	// do not wake the engine (rawSocket raises the receive low-water
	// mark), and the kernel's receive timestamp still tells when they
	// came. The pacer, waking for its next request, collects it (see
	// worker.collect). The engine then wakes only for its pacer: once a
	// request at low rates instead of twice, once a batch window at high
	// ones, where each response used to wake it. Only c's goroutine uses
	// it.
	deferred bool
	// wake: the pacer collects c's deferred response.
	wake chan struct{}
}

// What a connection does when reading its response would block.
const (
	waitPoller = iota // wait for bytes: the runtime's poller wakes it
	waitPacer         // wait for the pacer to collect the response
	readAgain         // the socket was just armed: look once more first
)

// wouldBlock is called when reading c's response would block, before c's
// goroutine waits: a deferred response waits for the pacer; any other
// makes sure its bytes wake the engine.
func (c *conn) wouldBlock() int {
	if c.deferred {
		w := c.w
		w.mu.Lock()
		if w.deferOn.Load() {
			w.waiting = append(w.waiting, c)
			w.mu.Unlock()
			return waitPacer
		}
		w.mu.Unlock()
		c.deferred = false
	}
	if c.rs.arm() {
		// Bytes may have come between the read and the arming.
		return readAgain
	}
	return waitPoller
}

// connLoop serves requests on one connection, dialing it for the first.
func (w *worker) connLoop(due int64) {
	defer w.wg.Done()
	c := &conn{w: w, jobs: make(chan int64, 1), wake: make(chan struct{}, 1)}
	for {
		if c.nc != nil && c.carried > 0 {
			// A connection that carried a request is checked, without
			// blocking, before it carries the next: one the server
			// closed is replaced (no retry: the request was not written
			// yet), and one that received bytes while no request was in
			// flight is closed and the bytes counted, never read as the
			// next request's answer.
			c.checkIdle(due)
		}
		if c.nc == nil && !c.dial(due) {
			next, act := w.next(c)
			if act != actWork {
				return
			}
			due = next
			continue
		}
		if !c.roundTrip(due, w.now()) {
			c.drop()
		}
		next, act := w.next(c)
		switch act {
		case actWork:
			due = next
			continue
		case actExit:
			c.drop()
			return
		}
		c.returnReader(false)
		d, ok := <-c.jobs
		if !ok {
			w.mu.Lock()
			w.open--
			w.mu.Unlock()
			c.drop()
			return
		}
		due = d
	}
}

// dial connects for the request due at due; false when it failed (and was
// counted).
func (c *conn) dial(due int64) bool {
	w := c.w
	ctx, cancel := context.WithTimeout(w.dialCtx, w.spec.timeout)
	defer cancel()
	nc, err := w.dialer.DialContext(ctx, "tcp", w.spec.addr)
	if err == nil {
		c.remote, c.since, c.carried = netip.AddrPort{}, w.now(), 0
		if tc, ok := nc.(*net.TCPConn); ok {
			c.raw, _ = tc.SyscallConn()
			if a, ok := tc.RemoteAddr().(*net.TCPAddr); ok {
				ap := a.AddrPort()
				c.remote = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			}
		}
		if w.spec.tls != nil {
			tlsc := tls.Client(nc, w.spec.tls)
			if err = tlsc.HandshakeContext(ctx); err != nil {
				_ = nc.Close()
			} else {
				nc = tlsc
			}
		}
	}
	if err != nil {
		w.dialFailure(due, err, ctx)
		return false
	}
	w.mu.Lock()
	if w.expired.Load() || w.aborted.Load() {
		// The drain ended while this dial ran: the request is lost.
		w.mu.Unlock()
		_ = nc.Close()
		f := failSample{due: due, at: w.now(), class: uint8(cInflightLost), reason: noDetail, phase: noDetail}
		c.describe(&f)
		w.stats.fail(f)
		return false
	}
	c.nc = nc
	w.conns[c] = struct{}{}
	w.mu.Unlock()
	c.rw, c.rs = nc, nil
	if c.raw != nil && w.spec.tls == nil {
		if rs := newRawSocket(c.raw, c); rs != nil {
			c.rw, c.rs = rs, rs
		}
	}
	return true
}

// readers lend a connection its response reader (readBufferSize bytes)
// while it carries requests: an idle connection holds none. A worker keeps
// the connections its busiest moment needed, and at the soak's low rates
// nearly all of them are idle nearly all the time.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// borrowReader gives c a response reader on its socket, if it has none.
func (c *conn) borrowReader() {
	if c.br == nil {
		c.br = readers.Get().(*bufio.Reader)
		c.br.Reset(c.rw)
	}
}

// returnReader gives c's reader back when c has no use for it: it holds
// no byte (an idle connection's unsolicited bytes stay, for closedByPeer
// to see), or the socket is gone (force).
func (c *conn) returnReader(force bool) {
	if c.br != nil && (force || c.br.Buffered() == 0) {
		c.br.Reset(nil)
		readers.Put(c.br)
		c.br = nil
	}
}

// roundTrip writes the request due at due on the connection in hand since
// inHand, reads the response and counts its outcome. It returns whether
// the connection may carry another request.
func (c *conn) roundTrip(due, inHand int64) bool {
	w := c.w
	if c.rs != nil {
		c.deferred = c.rs.canDefer() && w.deferOn.Load()
		c.rs.setDefer(c.deferred)
	}
	c.borrowReader()
	if rt := w.spec.requestTimeout; rt > 0 {
		c.armTimeout(rt)
	}
	if _, err := c.rw.Write(w.spec.request); err != nil {
		w.failure(c, due, err, false)
		return false
	}
	err := httpwire.ReadResponse(c.br, w.spec.head, &c.resp)
	t := time.Now()
	end := int64(t.Sub(w.base))
	if c.rs != nil {
		// The response ended when its last bytes reached the socket.
		if rx := c.rs.rxWall(); rx != 0 {
			if e := end - (t.UnixNano() - rx); e >= inHand && e < end {
				end = e
			}
		}
	}
	if err != nil {
		w.failure(c, due, err, c.resp.HeadersDone)
		return false
	}
	if c.br.Buffered() > 0 {
		// Bytes after the response's end, in the same read: nobody
		// asked for them. The response is an answer; the connection
		// is closed.
		w.stats.stray(due)
		w.stats.response(c.resp.StatusCode, due, end, inHand, c)
		c.carried++
		return false
	}
	if c.timed {
		// An idle connection keeps no deadline: the stale check reads it.
		c.timed = false
		_ = c.nc.SetDeadline(time.Time{})
	}
	w.stats.response(c.resp.StatusCode, due, end, inHand, c)
	c.carried++
	return !c.resp.Close
}

// armTimeout bounds the request about to be written on c and its response
// to rt from now. A drain that ended (expire) moves every deadline to the
// past after noting it, so the deadline set here is put back in the past
// when the drain ended meanwhile, never left to outlast it.
func (c *conn) armTimeout(rt time.Duration) {
	w := c.w
	c.timed = true
	_ = c.nc.SetDeadline(time.Now().Add(rt))
	if w.expired.Load() || w.aborted.Load() {
		_ = c.nc.SetDeadline(aLongTimeAgo)
	}
}

// describe fills in what a failure sample says of c, the connection the
// request was on.
func (c *conn) describe(f *failSample) {
	f.remote, f.carried = c.remote, c.carried
	f.age = max(f.at-c.since, 0)
}

// What an idle connection holds (peekIdle).
type idleState uint8

const (
	idleOpen   idleState = iota // nothing: it may carry a request
	idleClosed                  // end of stream or an error
	idleStray                   // bytes nobody asked for
)

// checkIdle checks, without blocking, whether the idle connection c was
// closed by the server or received bytes while no request was in flight,
// and drops it if so. Stray bytes on a plain-HTTP connection are counted
// (benchmark.connection_protocol_error) in the bucket of the request due
// at due, the one about to be sent. Over TLS they are not: the server may
// send records between requests (session tickets, close_notify) that the
// TLS layer, not HTTP, reads.
func (c *conn) checkIdle(due int64) {
	st := idleOpen
	if c.br != nil && c.br.Buffered() > 0 {
		st = idleStray
	} else if c.rs != nil {
		// A plain TCP socket read with raw system calls: peek at it
		// the same way, without the runtime's system-call bookkeeping
		// (see rawSocket). Only this goroutine closes it.
		st = c.rs.peekIdle(&c.peek)
	} else if c.raw != nil {
		if c.peekFn == nil {
			// Bound once: a closure made per call would be an
			// allocation per request.
			c.peekFn = func(fd uintptr) bool {
				c.peeked = peekIdle(fd, &c.peek)
				return true
			}
		}
		c.peeked = idleOpen
		_ = c.raw.Read(c.peekFn)
		st = c.peeked
	}
	if st == idleOpen {
		return
	}
	if st == idleStray && c.w.spec.tls == nil {
		c.w.stats.stray(due)
	}
	c.drop()
}

// drop unregisters and closes the socket, if any. Only c's goroutine
// changes c.nc, under the worker's lock, since expire reads it.
func (c *conn) drop() {
	nc := c.nc
	if nc == nil {
		return
	}
	w := c.w
	w.mu.Lock()
	delete(w.conns, c)
	c.nc = nil
	w.mu.Unlock()
	c.raw, c.rw, c.rs = nil, nil, nil
	c.timed = false
	c.returnReader(true)
	_ = nc.Close()
}
