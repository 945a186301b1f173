package record

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// failingFile is a stream file whose next write, or next sync, fails: a
// write that fails after part of the line, a write that fails at once, or
// a sync that fails after the whole line was written.
type failingFile struct {
	streamFile
	writeKeeps    int  // bytes the failing write keeps; -1: no write fails
	syncFails     bool // the next Sync fails
	truncateFails bool // every Truncate fails
}

func (f *failingFile) Truncate(size int64) error {
	if f.truncateFails {
		return errDisk
	}
	return f.streamFile.Truncate(size)
}

var errDisk = errors.New("injected: no space left on device")

func (f *failingFile) Write(b []byte) (int, error) {
	if f.writeKeeps < 0 {
		return f.streamFile.Write(b)
	}
	keep := min(f.writeKeeps, len(b))
	f.writeKeeps = -1
	n, err := f.streamFile.Write(b[:keep])
	if err != nil {
		return n, err
	}
	return n, errDisk
}

func (f *failingFile) Sync() error {
	if f.syncFails {
		f.syncFails = false
		return errDisk
	}
	return f.streamFile.Sync()
}

// TestStreamAppendAfterFailure: after an Append that failed (part of the
// line written, nothing written, or the sync failed), the next Append
// writes a whole line that a reader gets back, and a torn fragment stays
// one bad line of its own.
func TestStreamAppendAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		name       string
		writeKeeps int
		syncFails  bool
		// lines a reader gets back (labels) and bad lines.
		want []string
		bad  int
	}{
		// The torn part of the line is cut away: no bad line is left.
		{name: "short write", writeKeeps: 17, want: []string{"s/first", "s/third"}},
		{name: "write fails at once", writeKeeps: 0, want: []string{"s/first", "s/third"}},
		{name: "sync fails", writeKeeps: -1, syncFails: true, want: []string{"s/first", "s/second", "s/third"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stream.jsonl")
			w, err := OpenStream(path)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Append(Execution{NotRun: true, Label: "s/first"}); err != nil {
				t.Fatal(err)
			}
			ff := &failingFile{streamFile: w.f, writeKeeps: tc.writeKeeps, syncFails: tc.syncFails}
			w.f = ff
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			err = w.Append(Execution{NotRun: true, Label: "s/second"})
			if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), path) {
				t.Fatalf("failing Append = %v, want the injected error naming the stream", err)
			}
			if after, _ := os.ReadFile(path); !tc.syncFails && string(after) != string(before) {
				t.Errorf("after the failed write the stream holds %q, want it as it was, %q", after, before)
			}
			if err := w.Append(Execution{NotRun: true, Label: "s/third"}); err != nil {
				t.Fatalf("Append after the failure: %v", err)
			}
			execs, bad, err := readBack(path)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range execs {
				got = append(got, e.Label)
			}
			if d := cmp.Diff(tc.want, got); d != "" || bad != tc.bad {
				raw, _ := os.ReadFile(path)
				t.Errorf("lines read back (-want +got):\n%s\nbad %d, want %d; file:\n%s", d, bad, tc.bad, raw)
			}
		})
	}
}

// TestStreamAppendTornRepairFails: when a torn line cannot be cut away
// and the newline that closes it cannot be written either, Append fails without writing its line
// onto the fragment, and the next one that can closes the line first.
func TestStreamAppendTornRepairFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stream.jsonl")
	w, err := OpenStream(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The cut that would undo the torn write fails too.
	ff := &failingFile{streamFile: w.f, writeKeeps: 5, truncateFails: true}
	w.f = ff
	if err := w.Append(Execution{NotRun: true, Label: "s/torn"}); err == nil {
		t.Fatal("the injected short write did not fail the Append")
	}
	ff.writeKeeps = 0 // the repair's newline fails too
	if err := w.Append(Execution{NotRun: true, Label: "s/lost"}); !errors.Is(err, errDisk) {
		t.Fatalf("Append while the torn line cannot be closed = %v, want the injected error", err)
	}
	if err := w.Append(Execution{NotRun: true, Label: "s/whole"}); err != nil {
		t.Fatal(err)
	}
	execs, bad, err := readBack(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(execs) != 1 || execs[0].Label != "s/whole" || bad != 1 {
		raw, _ := os.ReadFile(path)
		t.Errorf("got %d lines (%v) and %d bad, want s/whole and the fragment; file:\n%s", len(execs), execs, bad, raw)
	}
}

// readBack reads a stream the way the gate does and returns every
// execution line and how many lines were skipped.
func readBack(path string) ([]Execution, int, error) {
	src, err := ReadStreamFile(path)
	if err != nil {
		return nil, 0, err
	}
	return Plain(src.All), len(src.Skipped), nil
}
