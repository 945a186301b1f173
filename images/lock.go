package images

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/sortie-soak/sortie/record"
)

// The lock file (images.lock) is text, one image a line:
//
//	# images.lock: one sortie image per line, "<name> <digest>".
//	# built with go1.26.8 for linux/amd64, CA bundle sha256:...
//	# CA bundle sha256:... golang.org/x/crypto/x509roots/fallback@v0.0.0-...
//	sortie-engine sha256:<64 hex digits>
//	sortie sha256:<64 hex digits>
//
// A line is a name (lower-case letters, digits and '-'), one space and a
// sha256 digest. Lines starting with '#' are comments; the one starting
// "# built with " says what the digests were built with (Lock.BuiltWith),
// so a check that disagrees can name a changed toolchain or CA bundle. The
// one starting "# CA bundle " pins the CA bundle every image carries: its
// sha256 and, after one space, its source (Lock.CA): RootsSource, the
// pinned Mozilla roots, or "file:<path>" for a bundle given with --ca-certs,
// which check then rebuilds with. It is a comment so that readers of the
// image lines alone are not disturbed by it; it is parsed all the same.
// Empty lines are ignored; a name may appear once. The order is the order of
// Binaries. Plain text rather than JSON so that `grep`, `awk` and a diff of
// a release read it directly.

// Lock is the content of a lock file.
type Lock struct {
	// Images are the pinned images in file order.
	Images []LockEntry
	// BuiltWith is what the digests were built with (the text of the
	// "# built with " comment), e.g. "go1.26.8 for linux/amd64, CA bundle
	// sha256:...". Informational: check compares digests only.
	BuiltWith string
	// CA pins the CA bundle the images carry; zero in a lock written
	// before the bundle was recorded.
	CA LockCA
}

// LockCA is the CA bundle of a lock: its digest and where it came from.
type LockCA struct {
	Digest string // "sha256:<64 hex digits>"
	Source string // RootsSource, or "file:<path>"
}

// File returns the bundle's path when it came from a file, else "".
func (c LockCA) File() string {
	p, _ := strings.CutPrefix(c.Source, fileSourcePrefix)
	if p == c.Source {
		return ""
	}
	return p
}

// LockEntry pins one image.
type LockEntry struct {
	Name   string // image name, e.g. "sortie-engine"
	Digest string // "sha256:<64 hex digits>"
}

const (
	builtWithPrefix = "# built with "
	caPrefix        = "# CA bundle "
)

var (
	lockNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	digestRE   = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// Digest returns the digest pinned for name.
func (l Lock) Digest(name string) (string, bool) {
	for _, e := range l.Images {
		if e.Name == name {
			return e.Digest, true
		}
	}
	return "", false
}

// ParseLock reads a lock file's content. Every malformed line is reported,
// each with its line number.
func ParseLock(data []byte) (Lock, error) {
	var (
		l    Lock
		errs []error
		seen = map[string]int{}
		// caLine is the line of the "# CA bundle " comment, 0 before it.
		caLine int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case strings.TrimSpace(line) == "":
			continue
		case strings.HasPrefix(line, builtWithPrefix):
			l.BuiltWith = strings.TrimSpace(strings.TrimPrefix(line, builtWithPrefix))
			continue
		case strings.HasPrefix(line, caPrefix):
			ca, err := parseLockCA(strings.TrimPrefix(line, caPrefix))
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			case caLine > 0:
				errs = append(errs, fmt.Errorf("line %d: CA bundle already pinned on line %d", n, caLine))
			default:
				l.CA, caLine = ca, n
			}
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		fields := strings.Split(line, " ")
		if len(fields) != 2 {
			errs = append(errs, fmt.Errorf("line %d: want \"<name> sha256:<hex>\", got %q", n, line))
			continue
		}
		name, digest := fields[0], fields[1]
		bad := false
		if !lockNameRE.MatchString(name) {
			errs = append(errs, fmt.Errorf("line %d: image name %q: want lower-case letters, digits and '-'", n, name))
			bad = true
		}
		if !digestRE.MatchString(digest) {
			errs = append(errs, fmt.Errorf("line %d: digest %q: want sha256: and 64 lower-case hex digits", n, digest))
			bad = true
		}
		if first, dup := seen[name]; dup && !bad {
			errs = append(errs, fmt.Errorf("line %d: image %s already pinned on line %d", n, name, first))
			bad = true
		}
		if bad {
			continue
		}
		seen[name] = n
		l.Images = append(l.Images, LockEntry{Name: name, Digest: digest})
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Lock{}, err
	}
	return l, nil
}

// parseLockCA reads "<digest> <source>", the rest of a "# CA bundle " line.
func parseLockCA(s string) (LockCA, error) {
	digest, source, _ := strings.Cut(s, " ")
	if !digestRE.MatchString(digest) {
		return LockCA{}, fmt.Errorf("CA bundle digest %q: want sha256: and 64 lower-case hex digits", digest)
	}
	if err := checkCASource(source); err != nil {
		return LockCA{}, err
	}
	return LockCA{Digest: digest, Source: source}, nil
}

// checkCASource accepts <module>@<version> or file:<path>, on one line.
func checkCASource(source string) error {
	if strings.ContainsFunc(source, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("CA bundle source %q: holds a control character", source)
	}
	if p, isFile := strings.CutPrefix(source, fileSourcePrefix); isFile {
		if strings.TrimSpace(p) == "" {
			return fmt.Errorf("CA bundle source %q: no path after %s", source, fileSourcePrefix)
		}
		return nil
	}
	mod, version, ok := strings.Cut(source, "@")
	if !ok || mod == "" || version == "" || strings.ContainsAny(source, " \t") {
		return fmt.Errorf("CA bundle source %q: want <module>@<version> or %s<path>", source, fileSourcePrefix)
	}
	return nil
}

// Format returns the lock file's content, images in the order given.
func (l Lock) Format() []byte {
	var b bytes.Buffer
	b.WriteString("# images.lock: one sortie image per line, \"<name> <digest>\".\n")
	b.WriteString("# Written by `sortie-images build`; `sortie-images check` rebuilds and compares;\n")
	b.WriteString("# `sortie-images pin` copies the digests into the chart's values and the README.\n")
	if l.BuiltWith != "" {
		b.WriteString(builtWithPrefix + l.BuiltWith + "\n")
	}
	if l.CA != (LockCA{}) {
		b.WriteString(caPrefix + l.CA.Digest + " " + l.CA.Source + "\n")
	}
	for _, e := range l.Images {
		fmt.Fprintf(&b, "%s %s\n", e.Name, e.Digest)
	}
	return b.Bytes()
}

// ReadLock reads and parses the lock file at path.
func ReadLock(path string) (Lock, error) {
	data, err := readFile(path)
	if err != nil {
		return Lock{}, err
	}
	l, err := ParseLock(data)
	if err != nil {
		return Lock{}, fmt.Errorf("lock file %s: %w", path, err)
	}
	return l, nil
}

// WriteLock writes l to path atomically.
func WriteLock(path string, l Lock) error { return record.WriteFile(path, l.Format(), 0o644) }
