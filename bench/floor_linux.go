//go:build linux

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// floorWindow is the floor client's shortest time between two wakes, the
// engine's batch window.
const floorWindow = 200 * time.Microsecond

// runFloorLoop sends rate requests a second for d to addr (host:port) on
// conns keep-alive connections, with raw system calls on one locked
// thread: it sleeps until the next due time (but at least floorWindow
// after its last wake), reads what came back on the busy connections
// without waiting, and writes what fell due. A response is one read, ok
// when its bytes start with a 2xx status line: the target's answers are
// small, and one request at a time is in flight on a connection. It stops
// when every request was answered or d plus the timeout passed.
func runFloorLoop(ctx context.Context, addr, host string, rate int, d, timeout time.Duration, conns int) (floorReport, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var rep floorReport
	total := int(int64(rate) * int64(d) / int64(time.Second))
	if rate <= 0 || total <= 0 || conns <= 0 {
		return rep, fmt.Errorf("floor: rate %d for %v on %d connections sends nothing", rate, d, conns)
	}
	var idle []int
	defer func() {
		for _, fd := range idle {
			_ = syscall.Close(fd)
		}
	}()
	for range conns {
		fd, err := rawConn(addr)
		if err != nil {
			return rep, err
		}
		idle = append(idle, fd)
	}
	req := []byte("GET / HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: sortie-bench-floor\r\n\r\n")
	buf := make([]byte, 16<<10)
	interval := int64(time.Second) / int64(rate)
	base := mono() + int64(time.Millisecond)
	stopAt := base + int64(d+timeout)
	var busy []int
	queued, sent, answered := 0, 0, 0
	write := func(fd int) {
		_, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&req[0])), uintptr(len(req)))
		if errno != 0 {
			rep.Errors++
			answered++
			_ = syscall.Close(fd)
			return
		}
		busy = append(busy, fd)
	}
	woke := int64(0)
	for answered < total && ctx.Err() == nil {
		next := base + int64(sent)*interval
		if sent == total || queued > 0 {
			next = woke + int64(floorWindow)
		}
		next = max(next, woke+int64(floorWindow))
		if next > stopAt {
			break
		}
		ts := unix.NsecToTimespec(next)
		_, _, _ = syscall.RawSyscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		woke = mono()
		// The sleep held the thread: let a signal's goroutine cancel ctx.
		runtime.Gosched()
		// Collect what came back.
		for i := 0; i < len(busy); {
			fd := busy[i]
			n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
			if errno == syscall.EAGAIN {
				i++
				continue
			}
			answered++
			busy[i] = busy[len(busy)-1]
			busy = busy[:len(busy)-1]
			if errno != 0 || n == 0 || !bytes.HasPrefix(buf[:n], []byte("HTTP/1.")) {
				rep.Errors++
				_ = syscall.Close(fd)
				continue
			}
			if bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 2")) {
				rep.OK++
			} else {
				rep.Errors++
			}
			idle = append(idle, fd)
		}
		// Send what fell due, queued requests first.
		for ; sent < total && base+int64(sent)*interval <= woke; sent++ {
			queued++
		}
		for ; queued > 0 && len(idle) > 0; queued-- {
			fd := idle[len(idle)-1]
			idle = idle[:len(idle)-1]
			write(fd)
		}
		if len(idle) == 0 && len(busy) == 0 && queued > 0 {
			return rep, errors.New("floor: every connection failed")
		}
	}
	for _, fd := range busy {
		_ = syscall.Close(fd)
	}
	rep.Sent = uint64(sent - queued)
	rep.Elapsed = time.Duration(mono() - base)
	return rep, ctx.Err()
}

// rawConn connects to addr and returns the socket's descriptor, detached
// from the runtime's poller and non-blocking.
func rawConn(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return -1, fmt.Errorf("floor: %w", err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("floor: %w", err)
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(s uintptr) { fd, dupErr = syscall.Dup(int(s)) }); err != nil {
		return -1, fmt.Errorf("floor: %w", err)
	}
	if dupErr != nil {
		return -1, fmt.Errorf("floor: dup: %w", dupErr)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return -1, fmt.Errorf("floor: %w", err)
	}
	return fd, nil
}

func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
