package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
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

// ReadReport decodes a report. Fields it does not know are ignored (reports
// from other writers carry extensions); a document that is not a JSON object
// with an "executions" array is an error, so a truncated or foreign file is
// never read as an empty run.
func ReadReport(r io.Reader) (*Report, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	return parseReport(b)
}

// ReadFile reads the report at path.
func ReadFile(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	rep, err := parseReport(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rep, nil
}

func parseReport(b []byte) (*Report, error) {
	// A raw pass over the top level first: json.Unmarshal leaves a missing
	// field at its zero value, and a report without "executions" or "pass"
	// must not read as a run that passed on nothing.
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("decode report: %w", err)
	}
	if top == nil {
		return nil, errors.New("decode report: not a JSON object")
	}
	for _, k := range []string{"pass", "executions"} {
		if _, ok := top[k]; !ok {
			return nil, fmt.Errorf("decode report: no %q field", k)
		}
	}
	if bytes.Equal(bytes.TrimSpace(top["executions"]), []byte("null")) {
		return nil, errors.New(`decode report: "executions" is null`)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("decode report: %w", err)
	}
	return &rep, nil
}

// StreamWriter appends executions to a results stream, one compact JSON
// object per line. Every line is synced to disk before Append returns, and
// the file is only ever appended to: a stream written by an earlier run (or
// an earlier attempt of this one) is kept.
type StreamWriter struct {
	mu   sync.Mutex
	f    streamFile
	path string
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
}

// OpenStream opens (or creates) the results stream at path for appending.
// If the file ends in a torn line, left by a writer that died mid-line, a
// newline is written first so the next line starts clean and the torn one
// stays a single unparseable line.
func OpenStream(path string) (*StreamWriter, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open results stream: %w", err)
	}
	w := &StreamWriter{f: f, path: path}
	if err := w.closeTornLine(); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

func (w *StreamWriter) closeTornLine() error {
	st, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("results stream %s: %w", w.path, err)
	}
	if st.Size() == 0 {
		return nil
	}
	last := make([]byte, 1)
	if _, err := w.f.ReadAt(last, st.Size()-1); err != nil {
		return fmt.Errorf("results stream %s: read last byte: %w", w.path, err)
	}
	if last[0] == '\n' {
		return nil
	}
	if _, err := w.f.Write([]byte{'\n'}); err != nil {
		return fmt.Errorf("results stream %s: close torn line: %w", w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("results stream %s: %w", w.path, err)
	}
	return nil
}

// Append writes one execution as a line and syncs it. The line is written
// with a single write call on a file opened with O_APPEND. After an Append
// that failed, the next one first ends the line the failure may have torn,
// so its own line is whole and the fragment stays one bad line; if that
// cannot be done either, it fails without writing.
func (w *StreamWriter) Append(e Execution) error {
	b, err := MarshalLine(e)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("results stream %s: closed", w.path)
	}
	if w.suspect {
		if err := w.closeTornLine(); err != nil {
			return err
		}
		w.suspect = false
	}
	n, err := w.f.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		w.suspect = true
		return fmt.Errorf("results stream %s: %w", w.path, err)
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
		return fmt.Errorf("results stream %s: %w", w.path, err)
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

// ReadStream reads a results stream. It is tolerant by design: a stream is
// read while it is written, and after a crash it may hold a torn line. Every
// line that holds a JSON object with a label is returned in order; bad
// counts the lines that do not parse (blank lines are not counted). The
// error is only for a failing reader.
func ReadStream(r io.Reader) (execs []Execution, bad int, err error) {
	br := bufio.NewReader(r)
	for {
		line, rerr := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if e, ok := parseLine(t); ok {
				execs = append(execs, e)
			} else {
				bad++
			}
		}
		if rerr == io.EOF {
			return execs, bad, nil
		}
		if rerr != nil {
			return execs, bad, fmt.Errorf("read results stream: %w", rerr)
		}
	}
}

// ReadStreamFile reads the results stream at path.
func ReadStreamFile(path string) (execs []Execution, bad int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("read results stream: %w", err)
	}
	defer f.Close()
	return ReadStream(f)
}

func parseLine(b []byte) (Execution, bool) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil || top == nil {
		return Execution{}, false
	}
	// A line without a label cannot be attributed to a target; it is
	// counted as bad rather than read as an anonymous execution.
	if _, ok := top["label"]; !ok {
		return Execution{}, false
	}
	var e Execution
	if err := json.Unmarshal(b, &e); err != nil || e.Label == "" {
		return Execution{}, false
	}
	return e, true
}
