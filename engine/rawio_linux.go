//go:build linux

package engine

import (
	"io"
	"syscall"
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
// The callbacks and their state live in the struct, bound once, so that a
// request allocates nothing.
type rawSocket struct {
	rc      syscall.RawConn
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
	p       []byte // the buffer of the read or write in progress
	n       int    // bytes read, or written so far
	errno   syscall.Errno
}

func (s *rawSocket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.p, s.n, s.errno = p, 0, 0
	err := s.rc.Read(s.readFn)
	n, errno := s.n, s.errno
	s.p = nil
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (s *rawSocket) read(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.p[0])), uintptr(len(s.p)))
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.n, s.errno = int(n), errno
		return true
	}
}

func (s *rawSocket) Write(p []byte) (int, error) {
	s.p, s.n, s.errno = p, 0, 0
	err := s.rc.Write(s.writeFn)
	n, errno := s.n, s.errno
	s.p = nil
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

// peekClosed says, without blocking, whether the socket fd was closed by
// its peer or holds bytes nobody asked for: a one-byte MSG_PEEK that does
// not wait. Anything but "would block" (bytes, end of stream, an error)
// means the connection must not carry a request.
func peekClosed(fd uintptr, b *[1]byte) bool {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return errno != syscall.EAGAIN && errno != syscall.EINTR
}

// newRawSocket is the raw reader and writer of a plain TCP connection.
func newRawSocket(rc syscall.RawConn) io.ReadWriter {
	s := &rawSocket{rc: rc}
	s.readFn, s.writeFn = s.read, s.write
	return s
}
