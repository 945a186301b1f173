package images

import (
	"os"
	"sort"
	"strings"
	"testing"
)

// The files that pin the images, relative to this package.
const (
	repoLock   = "../images.lock"
	repoValues = "../charts/sortie/values.yaml"
	repoReadme = "../README.md"
)

// readPinFile reads a file that pins digests. A missing one fails: the
// chart and the README exist, and under Bazel they are this test's data, so
// a skip here would hide a pin that is no longer checked.
func readPinFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the pins of %s: %v", path, err)
	}
	return b
}

// TestPinsAgree holds the chart's default values, the lock file and the
// README to one set of digests. Fix a failure with
// `go run ./images/cmd/sortie-images pin` from the repository root (after
// `build` when the lock itself is stale).
func TestPinsAgree(t *testing.T) {
	lock, err := ReadLock(repoLock)
	if err != nil {
		t.Fatalf("the lock file must exist: %v", err)
	}

	t.Run("values", func(t *testing.T) {
		values := readPinFile(t, repoValues)
		n := 0
		for _, b := range Binaries {
			if b.ValuesKey == "" {
				continue
			}
			n++
			want, ok := lock.Digest(b.Name)
			if !ok {
				t.Errorf("%s pins no digest for %s, which %s runs (images.%s.digest)", repoLock, b.Name, repoValues, b.ValuesKey)
				continue
			}
			got, err := ValuesDigest(values, b.ValuesKey)
			if err != nil {
				t.Errorf("%s: %v", repoValues, err)
				continue
			}
			if got != want {
				t.Errorf("%s images.%s.digest = %s, %s pins %s %s (run sortie-images pin)", repoValues, b.ValuesKey, got, repoLock, b.Name, want)
			}
		}
		if n == 0 {
			t.Fatal("no image in Binaries has a ValuesKey: nothing was compared")
		}
	})

	t.Run("readme", func(t *testing.T) {
		readme := readPinFile(t, repoReadme)
		got := ReadmeDigests(readme)
		if len(got) == 0 {
			t.Fatalf("%s names no sortie image by digest; it must pin every image of %s, e.g. with this block:\n\n%s",
				repoReadme, repoLock, ReadmeSnippet(lock))
		}
		var names []string
		for n := range got {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			want, ok := lock.Digest(n)
			if !ok {
				t.Errorf("%s names %s, which %s does not pin", repoReadme, n, repoLock)
				continue
			}
			for _, d := range got[n] {
				if d != want {
					t.Errorf("%s gives %s@%s, %s pins %s (run sortie-images pin)", repoReadme, n, d, repoLock, want)
				}
			}
		}
		var missing []string
		for _, e := range lock.Images {
			if _, ok := got[e.Name]; !ok {
				missing = append(missing, e.Name+"@"+e.Digest)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s does not name these images of %s:\n%s", repoReadme, repoLock, strings.Join(missing, "\n"))
		}
	})
}
