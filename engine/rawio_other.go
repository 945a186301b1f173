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

func (*rawSocket) Read([]byte) (int, error)  { return 0, errors.ErrUnsupported }
func (*rawSocket) Write([]byte) (int, error) { return 0, errors.ErrUnsupported }

// peekClosed says, without blocking, whether the socket fd was closed by
// its peer or holds bytes nobody asked for.
func peekClosed(fd uintptr, b *[1]byte) bool {
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN && err != syscall.EINTR
}
