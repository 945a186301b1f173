//go:build !linux

package engine

import (
	"io"
	"syscall"
)

// peekClosed says, without blocking, whether the socket fd was closed by
// its peer or holds bytes nobody asked for.
func peekClosed(fd uintptr, b *[1]byte) bool {
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN && err != syscall.EINTR
}

// newRawSocket: outside Linux a connection is read and written through
// net.Conn.
func newRawSocket(syscall.RawConn) io.ReadWriter { return nil }
