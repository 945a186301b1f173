package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// checkOutputs refuses output paths that could not take what the run
// writes there, before any load: a report path that is a directory or
// the results stream itself by any name (the same path, a symlink, a hard
// link, a symlinked directory; the report is renamed into place, so over
// the stream it would destroy every line the run appended), and a report,
// stream or live record path that is not a regular file or lies in a
// directory where no file can be created. Nothing is left behind.
func checkOutputs(report, stream, live string) error {
	var errs []error
	for _, out := range []struct{ what, path string }{{"report", report}, {"results stream", stream}, {"live record", live}} {
		if out.path == "" {
			continue
		}
		if err := checkWritable(out.path); err != nil {
			errs = append(errs, fmt.Errorf("%s %s cannot be written: %w", out.what, out.path, err))
		}
	}
	if len(errs) > 0 || report == "" {
		return errors.Join(errs...)
	}
	if stream != "" && sameFile(report, stream) {
		return fmt.Errorf("report %s is the results stream %s: writing the report would replace the stream; give them two files", report, stream)
	}
	return nil
}

// checkWritable checks that path is a regular file or absent, and that a
// file can be created beside it.
func checkWritable(path string) error {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		if st.IsDir() {
			return errors.New("it is a directory: name the file to write")
		}
		return fmt.Errorf("it is not a regular file (%s)", fileKind(st.Mode()))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".check-*")
	if err != nil {
		return err
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// fileKind names a file's type in words.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0, m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.Type().String()
}

// sameFile reports whether two paths name one file: os.SameFile when both
// exist, else the names they resolve to.
func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	return resolve(a, 0) == resolve(b, 0)
}

// resolve is the absolute name path stands for once its symlinks are
// followed as far as they lead: a path that does not exist yet resolves
// through its directory, a dangling symlink through its target (where a
// file opened through it is created). links counts the symlinks followed,
// bounded as the kernel bounds them.
func resolve(path string, links int) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	if target, err := os.Readlink(abs); err == nil && links < 40 {
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(abs), target)
		}
		return resolve(target, links+1)
	}
	dir := filepath.Dir(abs)
	if dir == abs {
		return abs
	}
	return filepath.Join(resolve(dir, links), filepath.Base(abs))
}
