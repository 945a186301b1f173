package provenance

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ChartDirDigest returns the content digest of a local chart directory:
// the sha256 of the sha256sum listing of every regular file under dir,
// sorted by slash-separated relative path (byte order), one
// "<hex>  <path>\n" line each. The same digest comes from a shell:
//
//	cd DIR && find . -type f | sed 's#^\./##' | LC_ALL=C sort |
//	    xargs -d '\n' sha256sum | sha256sum
//
// Every file counts (a chart's .helmignore is not applied), so what is
// hashed is exactly what is on disk. A symbolic link or any other
// non-regular file is refused: its content would depend on what it points
// to.
func ChartDirDigest(dir string) (string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s: not a directory", dir)
	}
	var files []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return "", err
	}
	// WalkDir orders by name within each directory, which is not the order
	// of whole paths ("a-b/x" < "a/x" as paths, not as a walk); sort.
	sort.Strings(files)
	sum := sha256.New()
	for _, rel := range files {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return "", err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("%s: %w", rel, err)
		}
		fmt.Fprintf(sum, "%x  %s\n", h.Sum(nil), rel)
	}
	return fmt.Sprintf("sha256:%x", sum.Sum(nil)), nil
}
