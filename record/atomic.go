package record

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes data to path atomically and durably: a temporary file
// in the same directory, written, synced and given perm, renamed over path,
// then the directory synced, so that after a crash a reader finds either
// the old file or the whole new one, never a part. Every file of a run a
// user keeps (report, plan, share table, engine list, run.env, lock,
// copies the saver made) is written with it.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	// CreateTemp makes the file 0600; the caller says what it should be.
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
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
