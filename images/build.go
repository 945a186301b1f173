package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BuildOptions says how binaries and images are built.
type BuildOptions struct {
	// ModuleDir is the root of the Go module holding the main packages.
	// Default ".".
	ModuleDir string
	// Go is the go command. Default "go" (from PATH).
	Go string
	// Platforms to build for. Default linux/amd64. With more than one, each
	// image is an OCI index and the lock pins the index's digest.
	Platforms []Platform
	// CACerts is the CA bundle file every image carries. Empty (the
	// default): the pinned Mozilla roots (MozillaRoots), the same on every
	// machine. Never the build machine's own bundle by default.
	CACerts string
	// BinDir receives the binaries, as <BinDir>/<os>_<arch>/<name>. Default:
	// a temporary directory removed after the build.
	BinDir string
	// Stderr receives the go command's diagnostics. Default io.Discard.
	Stderr io.Writer
}

func (o *BuildOptions) defaults() {
	if o.ModuleDir == "" {
		o.ModuleDir = "."
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if len(o.Platforms) == 0 {
		o.Platforms = []Platform{{OS: "linux", Arch: "amd64"}}
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
}

// Validate returns every problem of the options (after defaults).
func (o BuildOptions) Validate() error {
	o.defaults()
	var errs []error
	if st, err := os.Stat(filepath.Join(o.ModuleDir, "go.mod")); err != nil || st.IsDir() {
		errs = append(errs, fmt.Errorf("module dir %s: no go.mod", o.ModuleDir))
	}
	seen := map[Platform]bool{}
	for _, p := range o.Platforms {
		if _, err := ParsePlatform(p.String()); err != nil {
			errs = append(errs, err)
		}
		if seen[p] {
			errs = append(errs, fmt.Errorf("platform %s given twice", p))
		}
		seen[p] = true
	}
	if o.CACerts != "" {
		if _, err := LoadCABundle(o.CACerts); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Result is what a build produced.
type Result struct {
	// Artifacts are the images, in the order of the binaries asked for.
	Artifacts []Artifact
	// GoVersion is the toolchain that compiled the binaries ("go1.26.8").
	GoVersion string
	// CACertsDigest is the sha256 of the CA bundle the images carry, and
	// CASource where it came from (CABundle.Source).
	CACertsDigest string
	CASource      string
	// Platforms are the platforms built.
	Platforms []Platform
}

// Lock returns the lock file content that pins r's images.
func (r Result) Lock() Lock {
	l := Lock{BuiltWith: r.builtWith()}
	if r.CACertsDigest != "" {
		l.CA = LockCA{Digest: r.CACertsDigest, Source: r.CASource}
	}
	for _, a := range r.Artifacts {
		l.Images = append(l.Images, LockEntry{Name: a.Name, Digest: a.Digest.String()})
	}
	return l
}

func (r Result) builtWith() string {
	ps := make([]string, len(r.Platforms))
	for i, p := range r.Platforms {
		ps[i] = p.String()
	}
	return fmt.Sprintf("%s for %s, CA bundle %s", r.GoVersion, strings.Join(ps, ","), r.CACertsDigest)
}

// buildEnv is the environment of every go build: static, for the target
// platform, at the baseline instruction set, with no GOFLAGS or
// experiments from the caller's environment changing the output.
func buildEnv(base []string, p Platform) []string {
	env := append([]string(nil), base...)
	env = append(env,
		"CGO_ENABLED=0",
		"GOOS="+p.OS,
		"GOARCH="+p.Arch,
		"GOFLAGS=",
		"GOEXPERIMENT=",
	)
	switch p.Arch {
	case "amd64":
		env = append(env, "GOAMD64=v1")
	case "arm64":
		env = append(env, "GOARM64=v8.0")
	}
	return env
}

// BuildFlags are the go build flags of every binary: no file system paths
// (-trimpath), no VCS stamp (a new commit would change every binary), no
// symbol table and no build ID, so the same sources and toolchain give the
// same bytes.
var BuildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid="}

// GoBuild compiles the main packages of bins for p into dir, one binary
// named after each entry, with a single go build (which compiles them in
// parallel and shares their dependencies).
func GoBuild(ctx context.Context, o BuildOptions, bins []Binary, p Platform, dir string) error {
	o.defaults()
	if len(bins) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("binary dir: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	args := append([]string{"build"}, BuildFlags...)
	args = append(args, "-o", abs+string(filepath.Separator))
	for _, b := range bins {
		if filepath.Base(b.Package) != b.Name {
			// go build -o DIR/ names each binary after its package's
			// directory; the table keeps the two equal.
			return fmt.Errorf("image %s: package %s must be in a directory named %s", b.Name, b.Package, b.Name)
		}
		args = append(args, "./"+filepath.ToSlash(b.Package))
	}
	cmd := exec.CommandContext(ctx, o.Go, args...)
	cmd.Dir = o.ModuleDir
	cmd.Env = buildEnv(cmd.Environ(), p)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(o.Stderr, &stderr)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w: %s", p, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// GoVersion returns the version of the go command's toolchain.
func GoVersion(ctx context.Context, goCmd, moduleDir string) (string, error) {
	cmd := exec.CommandContext(ctx, goCmd, "env", "GOVERSION")
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Build compiles bins for every platform and wraps each binary in its
// image. A binary whose package is missing is an error here; callers pick
// the present ones with Available.
func Build(ctx context.Context, o BuildOptions, bins []Binary) (Result, error) {
	o.defaults()
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	ca, err := LoadCABundle(o.CACerts)
	if err != nil {
		return Result{}, err
	}
	goVersion, err := GoVersion(ctx, o.Go, o.ModuleDir)
	if err != nil {
		return Result{}, err
	}
	binDir := o.BinDir
	if binDir == "" {
		tmp, err := os.MkdirTemp("", "sortie-images-")
		if err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(tmp)
		binDir = tmp
	}
	perPlatform := make([][]v1.Image, len(bins))
	for _, p := range o.Platforms {
		dir := filepath.Join(binDir, p.OS+"_"+p.Arch)
		if err := GoBuild(ctx, o, bins, p, dir); err != nil {
			return Result{}, err
		}
		for i, b := range bins {
			bin, err := readFile(filepath.Join(dir, b.Name))
			if err != nil {
				return Result{}, err
			}
			img, err := Image(b.Name, bin, ca.PEM, p)
			if err != nil {
				return Result{}, err
			}
			perPlatform[i] = append(perPlatform[i], img)
		}
	}
	r := Result{
		GoVersion:     goVersion,
		CACertsDigest: ca.Digest(),
		CASource:      ca.Source,
		Platforms:     o.Platforms,
	}
	for i, b := range bins {
		a, err := NewArtifact(b.Name, perPlatform[i], o.Platforms)
		if err != nil {
			return Result{}, err
		}
		r.Artifacts = append(r.Artifacts, a)
	}
	return r, nil
}

// RefNameAnnotation names an image inside an OCI layout's index.json.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes the artifacts as an OCI image layout at dir: blobs
// under dir/blobs and an index.json listing each image or index, named
// by the org.opencontainers.image.ref.name annotation, in the given order.
func WriteLayout(dir string, arts []Artifact) error {
	adds := make([]mutate.IndexAddendum, 0, len(arts))
	for _, a := range arts {
		var add mutate.Appendable = a.Image
		if a.Index != nil {
			add = a.Index
		}
		adds = append(adds, mutate.IndexAddendum{
			Add:        add,
			Descriptor: v1.Descriptor{Annotations: map[string]string{RefNameAnnotation: a.Name}},
		})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	return nil
}
