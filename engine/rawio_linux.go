//go:build linux

package engine

import (
	"io"
	"syscall"
	"time"
	"unsafe"
)

// rawSocket reads and writes a plain TCP connection with raw system calls
// through the runtime's poller: a would-block parks the goroutine on the
// poller as net.Conn does, and deadlines and Close still apply. The
// difference is the call itself. A socket is non-blocking, so the
// runtime's system-call bookkeeping (which net.Conn pays on every read and
// write) buys nothing here, and on an engine that sleeps between requests
// it costs the most: the first system call after an idle moment wakes the
// runtime's monitor thread, which then polls for a while and sleeps again,
// several context switches for every request of a slow pacer.
//
// It also reads the kernel's receive timestamp of what it reads
// (SO_TIMESTAMPNS), so a response's latency ends when its last byte reached
// the socket, not when this process got round to reading it; and it can
// defer a response (see conn.deferred): with the receive low-water mark
// raised, bytes arriving do not make the socket readable, so they wake
// nobody until the worker's pacer, awake anyway for its next request,
// collects them.
//
// The callbacks and their state live in the struct, bound once, so that a
// request allocates nothing. Only the connection's own goroutine uses it.
type rawSocket struct {
	rc      syscall.RawConn
	c       *conn // told when a read would block
	fd      uintptr
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
	p       []byte // the buffer of the read or write in progress
	n       int    // bytes read, or written so far
	errno   syscall.Errno

	// stamps: the kernel gives receive timestamps; rx is the last one
	// (CLOCK_REALTIME, ns), 0 when a read came without one.
	stamps bool
	rx     int64
	iov    syscall.Iovec
	msg    syscall.Msghdr
	oob    [8]uint64 // a control message: a header and a timespec

	// lowatHigh: the receive low-water mark is raised (deferring).
	lowatHigh bool
	// fresh: a request was just written and its response is deferred;
	// the first read waits for the pacer without looking, since the
	// answer cannot be there yet, or hardly ever.
	fresh bool
	// toPacer: the read callback listed the connection for the pacer to
	// collect; Read waits for it.
	toPacer bool
	// written: when the request in flight was written (nanotime).
	written int64
}

// deferFor is how long after its request a response may wait for the
// pacer: several batch windows at high rates, one wake at 1,000 rps.
const deferFor = time.Millisecond

// lowatHigh is a low-water mark no response reaches: below it, data makes
// the socket readable only with a FIN or an error.
const lowatHigh = 1 << 30

// newRawSocket is the raw reader and writer of a plain TCP connection
// carrying c's requests.
func newRawSocket(rc syscall.RawConn, c *conn) *rawSocket {
	s := &rawSocket{rc: rc, c: c}
	s.readFn, s.writeFn = s.read, s.write
	_ = rc.Control(func(fd uintptr) {
		s.fd = fd
		s.stamps = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1) == nil
	})
	return s
}

// canDefer says whether responses on this socket may wait for the pacer:
// only when their arrival time is known without reading them at once.
func (s *rawSocket) canDefer() bool { return s.stamps }

// setDefer raises the receive low-water mark (on) or lowers it to one byte.
// Lowering it makes the socket readable at once if bytes are waiting.
func (s *rawSocket) setDefer(on bool) {
	if on == s.lowatHigh {
		return
	}
	v := int32(1)
	if on {
		v = lowatHigh
	}
	_, _, errno := syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, s.fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT,
		uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	switch {
	case errno == 0 || !on:
		// A mark that would not come down leaves a response to wake
		// the engine by its FIN or the drain's deadline: rare enough
		// not to loop on.
		s.lowatHigh = on
	default:
		// Without the mark a deferred response would wake the engine
		// like any other: no harm, but no use either.
		s.stamps = false
	}
}

// arm lowers a raised low-water mark; true if it did.
func (s *rawSocket) arm() bool {
	if !s.lowatHigh {
		return false
	}
	s.setDefer(false)
	return true
}

// rxWall is the receive timestamp of the last bytes read, 0 if unknown.
func (s *rawSocket) rxWall() int64 { return s.rx }

func (s *rawSocket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		s.p, s.n, s.errno, s.toPacer = p, 0, 0, false
		err := s.rc.Read(s.readFn)
		n, errno := s.n, s.errno
		s.p = nil
		switch {
		case err != nil:
			return 0, err
		case s.toPacer:
			<-s.c.wake
			// Collected. A response not back a millisecond after its
			// request is slower than the pacer: its bytes wake the
			// engine when they come, rather than the pacer looking
			// for them at every wake.
			if nanotime()-s.written >= int64(deferFor) {
				s.c.deferred = false
			}
			continue
		case errno != 0:
			return 0, errno
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (s *rawSocket) read(fd uintptr) bool {
	if s.fresh {
		s.fresh = false
		if s.c.wouldBlock() == waitPacer {
			s.toPacer = true
			return true
		}
	}
	for {
		var n uintptr
		var errno syscall.Errno
		if s.stamps {
			s.iov.Base = &s.p[0]
			s.iov.SetLen(len(s.p))
			s.msg = syscall.Msghdr{Iov: &s.iov, Iovlen: 1, Control: (*byte)(unsafe.Pointer(&s.oob[0]))}
			s.msg.SetControllen(int(unsafe.Sizeof(s.oob)))
			n, _, errno = syscall.RawSyscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&s.msg)), 0)
		} else {
			n, _, errno = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.p[0])), uintptr(len(s.p)))
		}
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			switch s.c.wouldBlock() {
			case readAgain:
				continue
			case waitPacer:
				s.toPacer = true
				return true
			}
			return false
		}
		s.n, s.errno = int(n), errno
		if s.stamps && errno == 0 && n > 0 {
			s.rx = s.timestamp()
		}
		return true
	}
}

// timestamp is the SCM_TIMESTAMPNS control message of the last recvmsg, 0
// when there is none.
func (s *rawSocket) timestamp() int64 {
	const hdr = int(unsafe.Sizeof(syscall.Cmsghdr{}))
	if int(s.msg.Controllen) < hdr+int(unsafe.Sizeof(syscall.Timespec{})) {
		return 0
	}
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&s.oob[0]))
	if h.Level != syscall.SOL_SOCKET || h.Type != syscall.SCM_TIMESTAMPNS {
		return 0
	}
	ts := (*syscall.Timespec)(unsafe.Pointer(&s.oob[hdr/8]))
	return ts.Nano()
}

func (s *rawSocket) Write(p []byte) (int, error) {
	s.p, s.n, s.errno = p, 0, 0
	err := s.rc.Write(s.writeFn)
	n, errno := s.n, s.errno
	s.p = nil
	s.fresh = err == nil && errno == 0 && s.c.deferred
	s.written = nanotime()
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, errno
	}
	return n, nil
}

func (s *rawSocket) write(fd uintptr) bool {
	for s.n < len(s.p) {
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&s.p[s.n])), uintptr(len(s.p)-s.n))
		switch errno {
		case 0:
			s.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			s.errno = errno
			return true
		}
	}
	return true
}

// peekIdle is peekIdle of the socket.
func (s *rawSocket) peekIdle(b *[1]byte) idleState { return peekIdle(s.fd, b) }

// peekIdle says, without blocking, what the socket fd of an idle
// connection holds: a one-byte MSG_PEEK that does not wait. Anything but
// "would block" (bytes, end of stream, an error) means the connection
// must not carry a request.
func peekIdle(fd uintptr, b *[1]byte) idleState {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EINTR:
		return idleOpen
	case errno == 0 && n > 0:
		return idleStray
	}
	return idleClosed
}
