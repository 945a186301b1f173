package record

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteFile writes data to path atomically and durably: a temporary file
// in the same directory, written, synced and given perm, renamed over path,
// then the directory synced, so that after a crash a reader finds either
// the old file or the whole new one, never a part. Every file of a run a
// user keeps (report, plan, share table, engine list, run.env, lock,
// copies the saver made) is written with it, or, when it is streamed, with
// CreateAtomic.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := CreateAtomic(path, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}

// AtomicFile is a file being written under a temporary name beside its
// destination, for content that is streamed rather than held in memory.
// Commit gives it its name the way WriteFile does; Abort removes it. One of
// the two must be called; after either, the other does nothing.
type AtomicFile struct {
	f    *os.File
	path string
	perm os.FileMode
	done bool
}

// CreateAtomic starts a file that becomes path on Commit. The temporary
// file is hidden (".<name>.tmp-<random>", see IsAtomicTemp) in path's
// directory, so the rename stays on one file system.
func CreateAtomic(path string, perm os.FileMode) (*AtomicFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+atomicTempMark+"*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &AtomicFile{f: f, path: path, perm: perm}, nil
}

// atomicTempMark sits between a temporary file's destination name and its
// random suffix.
const atomicTempMark = ".tmp-"

// IsAtomicTemp reports whether a directory entry's name is that of a
// temporary file of CreateAtomic or WriteFile: what a writer killed before
// Commit or Abort (SIGKILL, a power cut) leaves behind.
func IsAtomicTemp(name string) bool {
	_, ok := AtomicTempTarget(name)
	return ok
}

// AtomicTempTarget returns the name a temporary file of CreateAtomic or
// WriteFile was to be given, so that a program cleaning up after itself
// removes only its own: several programs write into one run directory at
// once.
func AtomicTempTarget(name string) (string, bool) {
	i := strings.LastIndex(name, atomicTempMark)
	if !strings.HasPrefix(name, ".") || i < 2 {
		return "", false
	}
	return name[1:i], true
}

// Write appends to the temporary file.
func (a *AtomicFile) Write(p []byte) (int, error) {
	n, err := a.f.Write(p)
	if err != nil {
		return n, fmt.Errorf("write %s: %w", a.path, err)
	}
	return n, nil
}

// TempName is the temporary file's path, for a check that reads what was
// written before Commit.
func (a *AtomicFile) TempName() string { return a.f.Name() }

// Commit makes the file durable and gives it its final name.
func (a *AtomicFile) Commit() error { return a.CommitAs(a.path) }

// CommitAs is Commit under another name in the same directory, for a
// writer that learns only at the end what the content is (a log that broke
// off is kept as <name>.partial).
func (a *AtomicFile) CommitAs(path string) error {
	if a.done {
		return fmt.Errorf("write %s: already committed or aborted", path)
	}
	a.done = true
	tmp := a.f.Name()
	fail := func(err error) error {
		a.f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if filepath.Dir(path) != filepath.Dir(a.path) {
		return fail(errors.New("not in the directory of the temporary file"))
	}
	// CreateTemp makes the file 0600; the caller says what it should be.
	if err := a.f.Chmod(a.perm); err != nil {
		return fail(err)
	}
	if err := a.f.Sync(); err != nil {
		return fail(err)
	}
	if err := a.f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// Abort closes and removes the temporary file; after Commit it does
// nothing.
func (a *AtomicFile) Abort() {
	if a.done {
		return
	}
	a.done = true
	a.f.Close()
	os.Remove(a.f.Name())
}

// SyncDir syncs a directory, so that a rename or a new entry in it is on
// disk. A file system that cannot sync a directory (some report EINVAL)
// has nothing to sync; any other failure is returned.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !isNotSupported(err) {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
