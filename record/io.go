package record

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
)

// Marshal renders a report the way it is written to disk: JSON indented by
// two spaces, with a final newline.
func Marshal(r *Report) ([]byte, error) {
	if r.Executions == nil {
		// An empty run still says "executions": [], never null, so a reader
		// never mistakes it for a report that lacks the field.
		cp := *r
		cp.Executions = []Execution{}
		r = &cp
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode report: %w", err)
	}
	return append(b, '\n'), nil
}

// WriteReport writes the report to path atomically (see WriteFile), so a
// reader sees either the old file or the whole new one.
func WriteReport(path string, r *Report) error {
	b, err := Marshal(r)
	if err != nil {
		return err
	}
	return WriteFile(path, b, 0o644)
}

// StreamWriter appends lines to a file of JSON lines: executions to a
// results stream (Append), one compact JSON object per line, and under a
// LiveWriter the lines of a live record. Every batch is synced to disk before
// its call returns, and the file is only ever appended to: lines written
// by an earlier run (or an earlier attempt of this one) are kept.
type StreamWriter struct {
	mu   sync.Mutex
	f    streamFile
	path string
	// what names the file in errors: "results stream", "live record".
	what string
	// suspect is set when an Append failed after it may have written part
	// of its line (a short write, a write error, a failed sync): the next
	// Append first closes whatever line the file ends in.
	suspect bool
}

// streamFile is what a StreamWriter needs of its file: an *os.File, or in
// tests one whose writes fail.
type streamFile interface {
	io.Writer
	io.ReaderAt
	io.Closer
	Stat() (os.FileInfo, error)
	Sync() error
	Truncate(size int64) error
}

// OpenStream opens (or creates) the results stream at path for appending.
// If the file ends in a torn line, left by a writer that died mid-line, a
// newline is written first so the next line starts clean and the torn one
// stays a single unparseable line.
func OpenStream(path string) (*StreamWriter, error) {
	return openLines(path, "results stream")
}

// OpenLive opens (or creates) a live record at path for appending, as
// OpenStream opens a results stream: a torn last line is closed first.
// It writes the compact form (livecompact.go).
func OpenLive(path string) (*LiveWriter, error) {
	w, err := openLines(path, "live record")
	if err != nil {
		return nil, err
	}
	return &LiveWriter{w: w}, nil
}

// LiveWriter appends to a live record in the compact form.
type LiveWriter struct {
	mu  sync.Mutex
	w   *StreamWriter
	enc liveEncoder
	buf []byte
}

// Append writes entries as lines, with the declarations the first of them
// need, all with one write call, and syncs once: a batch is on disk whole,
// or a write that failed part way is cut away, as StreamWriter.Append does
// (when the cut fails too, the next call closes the torn line). After a failure the writer declares again
// every id it uses, so no line ever refers to a declaration the failure
// may have torn. An entry that cannot be encoded fails the batch before
// anything is written.
func (w *LiveWriter) Append(entries ...LiveEntry) error {
	if len(entries) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	w.buf, err = w.enc.encode(w.buf[:0], entries)
	if err == nil {
		err = w.w.write(w.buf)
	} else {
		err = fmt.Errorf("%s %s: %w", w.w.what, w.w.path, err)
	}
	if err != nil {
		w.enc.forget()
	}
	if cap(w.buf) > 1<<20 {
		w.buf = nil // a rare big batch does not stay held
	}
	return err
}

// Close closes the file. It is safe to call more than once.
func (w *LiveWriter) Close() error { return w.w.Close() }

func openLines(path, what string) (*StreamWriter, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", what, err)
	}
	w := &StreamWriter{f: f, path: path, what: what}
	if err := w.closeTornLine(); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

func (w *StreamWriter) closeTornLine() error {
	st, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("%s %s: %w", w.what, w.path, err)
	}
	if st.Size() == 0 {
		return nil
	}
	last := make([]byte, 1)
	if _, err := w.f.ReadAt(last, st.Size()-1); err != nil {
		return fmt.Errorf("%s %s: read last byte: %w", w.what, w.path, err)
	}
	if last[0] == '\n' {
		return nil
	}
	if _, err := w.f.Write([]byte{'\n'}); err != nil {
		return fmt.Errorf("%s %s: close torn line: %w", w.what, w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("%s %s: %w", w.what, w.path, err)
	}
	return nil
}

// Append writes one execution as a line and syncs it. The line is written
// with a single write call on a file opened with O_APPEND; a write that
// fails part way (a full disk) is undone, the file cut back to its size
// before, so the stream still ends in a whole line. Only when that cut
// fails too does the next Append first end the torn line, so its own line
// is whole and the fragment stays one bad line; if that cannot be done
// either, it fails without writing.
func (w *StreamWriter) Append(e Execution) error {
	b, err := MarshalLine(e)
	if err != nil {
		return err
	}
	return w.write(b)
}

// write appends b with one write call and syncs it.
func (w *StreamWriter) write(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("%s %s: closed", w.what, w.path)
	}
	if w.suspect {
		if err := w.closeTornLine(); err != nil {
			return err
		}
		w.suspect = false
	}
	// The size before the write: a write that fails part way (ENOSPC)
	// is undone by cutting the file back to it, so the stream ends in the
	// whole line before, not in a torn one. Only this call's own bytes are
	// cut; what the file held before is never touched.
	before, statErr := w.f.Stat()
	n, err := w.f.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.suspect = true
		if n == 0 {
			w.suspect = false // nothing was written: the file is as it was
		} else if statErr == nil && w.f.Truncate(before.Size()) == nil {
			w.suspect = false
		}
		return fmt.Errorf("%s %s: %w", w.what, w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		// The line is whole in the file; whether it reached the disk is
		// not known, and the next call checks how the file ends.
		w.suspect = true
		return fmt.Errorf("%s %s: %w", w.what, w.path, err)
	}
	return nil
}

// Close closes the stream. It is safe to call more than once.
func (w *StreamWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return fmt.Errorf("%s %s: %w", w.what, w.path, err)
	}
	return nil
}

// MarshalLine renders one execution as a results-stream line: compact JSON
// and a newline.
func MarshalLine(e Execution) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode execution %s: %w", e.Label, err)
	}
	return append(b, '\n'), nil
}
