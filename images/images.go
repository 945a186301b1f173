// Package images builds sortie's OCI images without Docker: one image per
// binary, a static Go binary on an empty base with CA certificates (the
// Mozilla roots of a pinned module, see MozillaRoots) and a non-root user, every timestamp zeroed and every tar entry in a fixed order
// and mode, so that the same binary always gives the same image digest and a
// commit that does not change a binary does not change its image.
//
// The digests are pinned in the lock file (images.lock at the repository
// root, see Lock), from which the chart's default values and the README take
// them (PinValues, PinReadme). The sortie-images command (Run) builds,
// checks, pins and pushes.
package images

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Binary is one image: a main package of this module and the name its
// binary and image share.
type Binary struct {
	// Name is the binary's and the image's name, e.g. "sortie-engine". The
	// binary is installed at /usr/local/bin/<Name>.
	Name string
	// Package is the main package's directory relative to the module root,
	// e.g. "engine/cmd/sortie-engine".
	Package string
	// ValuesKey is the key under images: in the chart's values.yaml whose
	// digest pins this image ("engine" for images.engine.digest), or empty
	// when the chart does not run this image.
	ValuesKey string
}

// Binaries lists every image sortie ships, in the order builds, lock files
// and layouts list them. A binary whose package does not exist in the
// module yet is skipped by a build (see Available), not an error.
var Binaries = []Binary{
	{Name: "sortie-engine", Package: "engine/cmd/sortie-engine", ValuesKey: "engine"},
	{Name: "sortie", Package: "driver/cmd/sortie", ValuesKey: "driver"},
	{Name: "sortie-gate", Package: "gate/cmd/sortie-gate"},
	{Name: "sortie-save", Package: "saver/cmd/sortie-save"},
	{Name: "sortie-watchdog", Package: "watchdog/cmd/sortie-watchdog"},
	{Name: "sortie-churn", Package: "churn/cmd/sortie-churn"},
}

// Lookup returns the entry of Binaries with the given name.
func Lookup(name string) (Binary, bool) {
	for _, b := range Binaries {
		if b.Name == name {
			return b, true
		}
	}
	return Binary{}, false
}

// Available returns the entries of bins whose main package exists under the
// module root moduleDir (a directory holding at least one .go file), and
// the names of those that do not.
func Available(moduleDir string, bins []Binary) (present []Binary, missing []string) {
	for _, b := range bins {
		matches, _ := filepath.Glob(filepath.Join(moduleDir, filepath.FromSlash(b.Package), "*.go"))
		if len(matches) > 0 {
			present = append(present, b)
		} else {
			missing = append(missing, b.Name)
		}
	}
	return present, missing
}

// Select returns the entries of Binaries named in names (all of them when
// names is empty), in table order, or an error naming every unknown name.
func Select(names []string) ([]Binary, error) {
	if len(names) == 0 {
		return append([]Binary(nil), Binaries...), nil
	}
	want := map[string]bool{}
	var unknown []string
	for _, n := range names {
		if _, ok := Lookup(n); !ok {
			unknown = append(unknown, n)
		}
		want[n] = true
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown image %s (known: %s)", strings.Join(unknown, ", "), strings.Join(names0(), ", "))
	}
	var out []Binary
	for _, b := range Binaries {
		if want[b.Name] {
			out = append(out, b)
		}
	}
	return out, nil
}

func names0() []string {
	out := make([]string, len(Binaries))
	for i, b := range Binaries {
		out[i] = b.Name
	}
	return out
}

// Platform is an OS and architecture an image is built for.
type Platform struct {
	OS   string // "linux"
	Arch string // "amd64" or "arm64"
}

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatform parses "linux/amd64" or "linux/arm64", the platforms the
// images are built for.
func ParsePlatform(s string) (Platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	if !ok || os != "linux" || (arch != "amd64" && arch != "arm64") {
		return Platform{}, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", s)
	}
	return Platform{OS: os, Arch: arch}, nil
}

// readFile reads a file, naming it in the error.
func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
