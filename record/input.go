package record

// The files of outside input that sortie and sortie-gate read (a plan, a
// report, a results stream, a targets file, a share table, an engine list,
// a roll log, a live record) are opened here, so the two guarantees every
// reader owes are kept in one place: it holds at most its cap in memory
// whatever it is handed (/dev/zero, a FIFO, a 50 GB file), and it stops
// when its context ends (a SIGTERM ends a read that a FIFO with no writer
// would otherwise block for ever).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// TooLargeError says a file of outside input was larger than its cap. It
// names the file and the cap; nothing of the file was parsed.
type TooLargeError struct {
	// What the file is: "plan", "report", "results stream", ...
	What string
	// Path names the file ("" when the input was not a named file).
	Path string
	// Max is the cap in bytes.
	Max int64
}

func (e *TooLargeError) Error() string {
	name := e.What
	if e.Path != "" {
		name += " " + e.Path
	}
	return fmt.Sprintf("%s is larger than %s, the most a %s may be", name, size(int(e.Max)), e.What)
}

// OpenInput opens the file at path for reading outside input. The open and
// every read end with ctx's error once ctx ends: a FIFO whose writer never
// comes, or never writes, does not hold the program past a signal. Close
// the reader when done.
func OpenInput(ctx context.Context, path string) (io.ReadCloser, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	// Opening a FIFO blocks until a writer opens it, in a system call no
	// context reaches: the open runs apart and is abandoned on cancel.
	go func() {
		f, err := os.Open(path)
		ch <- opened{f, err}
	}()
	var o opened
	select {
	case o = <-ch:
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, context.Cause(ctx)
	}
	if o.err != nil {
		return nil, o.err
	}
	r := &ctxFile{ctx: ctx, f: o.f}
	// A read that blocks (a pipe, a FIFO: files the runtime polls) is
	// woken by a deadline in the past; a regular file or a device never
	// blocks for long, and the next Read sees ctx ended.
	r.stop = context.AfterFunc(ctx, func() { o.f.SetReadDeadline(time.Unix(1, 0)) })
	return r, nil
}

// ctxFile is a file whose reads end when ctx ends.
type ctxFile struct {
	ctx  context.Context
	f    *os.File
	stop func() bool
}

func (r *ctxFile) Read(p []byte) (int, error) {
	if r.ctx.Err() != nil {
		return 0, context.Cause(r.ctx)
	}
	n, err := r.f.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && r.ctx.Err() != nil {
		err = context.Cause(r.ctx)
	}
	return n, err
}

func (r *ctxFile) Close() error {
	r.stop()
	return r.f.Close()
}

// ReadInput reads all of the file at path through OpenInput: a file
// larger than max bytes is a *TooLargeError, which names it as what and
// path, refused by its size before a byte is read when it is a regular
// file, and after max+1 bytes otherwise. An error opening or reading the
// file is returned as it is (the caller says what it was reading; an
// *fs.PathError names the file).
func ReadInput(ctx context.Context, path, what string, max int) ([]byte, error) {
	f, err := OpenInput(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooBig := &TooLargeError{What: what, Path: path, Max: int64(max)}
	if st, err := f.(*ctxFile).f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > int64(max) {
		return nil, tooBig
	}
	data, over, err := readCapped(f, max)
	if err != nil {
		return nil, err
	}
	if over {
		return nil, tooBig
	}
	return data, nil
}
