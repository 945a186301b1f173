//go:build !linux

package engine

import (
	"errors"
	"syscall"
)

// rawSocket: outside Linux a connection is read and written through
// net.Conn, and no response is deferred.
type rawSocket struct{}

func newRawSocket(syscall.RawConn, *conn) *rawSocket { return nil }

func (*rawSocket) canDefer() bool { return false }
func (*rawSocket) setDefer(bool)  {}
func (*rawSocket) rxWall() int64  { return 0 }
func (*rawSocket) arm() bool      { return false }

func (*rawSocket) peekIdle(*[1]byte) idleState { return idleOpen }

func (*rawSocket) Read([]byte) (int, error)  { return 0, errors.ErrUnsupported }
func (*rawSocket) Write([]byte) (int, error) { return 0, errors.ErrUnsupported }

// peekIdle says, without blocking, what the socket fd of an idle
// connection holds.
func peekIdle(fd uintptr, b *[1]byte) idleState {
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return idleOpen
	case err == nil && n > 0:
		return idleStray
	}
	return idleClosed
}
