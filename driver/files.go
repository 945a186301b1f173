package driver

import (
	"fmt"
	"os"
	"path/filepath"
)

// checkOutputs refuses a report path that could not take the report at the
// end of the run: a directory, or the results stream itself by any name
// (the same path, a symlink, a hard link, a symlinked directory). The
// report is renamed into place, so over the stream it would destroy every
// line the run appended. Nothing is created or changed.
func checkOutputs(report, stream string) error {
	if report == "" {
		return nil
	}
	if st, err := os.Stat(report); err == nil && st.IsDir() {
		return fmt.Errorf("report %s is a directory: -o names the file to write", report)
	}
	if stream != "" && sameFile(report, stream) {
		return fmt.Errorf("report %s is the results stream %s: writing the report would replace the stream; give them two files", report, stream)
	}
	return nil
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
