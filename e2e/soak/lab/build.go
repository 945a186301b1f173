package lab

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// BuildDir is where the lab's build modules live in the checkout.
const BuildDir = "e2e/soak/lab/build"

// Component is one build of cluster binaries: a module of its own under
// BuildDir, the packages go build compiles in it, and what names its
// version.
type Component struct {
	// Module is the module's directory under BuildDir.
	Module string
	// Packages are the main packages, as go build takes them.
	Packages []string
	// Binaries are the names go build gives them (their last path element).
	Binaries []string
	// VersionOf is the module whose required version names this build.
	VersionOf string
	// LDFlags returns the linker flags for the build of version v.
	LDFlags func(v string) string
}

// Components are the lab's cluster binaries.
var Components = []Component{
	{
		Module: "kube",
		Packages: []string{
			"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
			"k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kubelet",
			"k8s.io/kubernetes/cmd/kube-proxy", "k8s.io/kubernetes/cmd/kubectl",
		},
		Binaries:  []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"},
		VersionOf: "k8s.io/kubernetes",
		LDFlags:   kubeLDFlags,
	},
	{
		Module:    "tools",
		Packages:  []string{"./coredns", "./pause", "./registry"},
		Binaries:  []string{"coredns", "pause", "registry"},
		VersionOf: "github.com/coredns/coredns",
		LDFlags:   func(string) string { return "-s -w -buildid=" },
	},
	{
		// The NetworkPolicy enforcer (kube-router's firewall) and the
		// probe the lab's tests run in pods against it.
		Module:    "netpol",
		Packages:  []string{"./kube-router-netpol", "./netpol-probe"},
		Binaries:  []string{"kube-router-netpol", "netpol-probe"},
		VersionOf: "github.com/cloudnativelabs/kube-router/v2",
		LDFlags:   func(string) string { return "-s -w -buildid=" },
	},
}

// kubeLDFlags stamps the version the way Kubernetes' own build does: a
// server whose version does not parse (the default "v0.0.0-master") is
// refused by its clients' version checks.
func kubeLDFlags(v string) string {
	const pkg = "k8s.io/component-base/version"
	major, minor := "0", "0"
	if parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3); len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	return strings.Join([]string{
		"-s -w -buildid=",
		"-X " + pkg + ".gitVersion=" + v,
		"-X " + pkg + ".gitMajor=" + major,
		"-X " + pkg + ".gitMinor=" + minor,
		"-X " + pkg + ".gitTreeState=clean",
		"-X " + pkg + ".buildDate=1970-01-01T00:00:00Z",
	}, " ")
}

// ModuleDir is the component's module directory in the checkout src.
func (c Component) ModuleDir(src string) string { return filepath.Join(src, BuildDir, c.Module) }

// Version reads the version of VersionOf from the module's go.mod.
func (c Component) Version(src string) (string, error) {
	path := filepath.Join(c.ModuleDir(src), "go.mod")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if v := requiredVersion(string(data), c.VersionOf); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%s: no require of %s", path, c.VersionOf)
}

// requiredVersion finds "<mod> <version>" in a go.mod's require lines: a
// one-line "require <mod> <version>" or a line of a require block.
func requiredVersion(gomod, mod string) string {
	inBlock := false
	for _, line := range strings.Split(gomod, "\n") {
		line, _, _ = strings.Cut(line, "//")
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "require" && f[1] == "(":
			inBlock = true
		case len(f) == 1 && f[0] == ")":
			inBlock = false
		case len(f) == 3 && f[0] == "require" && f[1] == mod:
			return f[2]
		case inBlock && len(f) == 2 && f[0] == mod:
			return f[1]
		}
	}
	return ""
}

// Key is the cache key of a build: a hash of every file of the module
// (go.mod, go.sum, the Go sources), the toolchain and the linker flags.
// Equal keys build equal binaries, so a cached build is reused only for
// the same inputs.
func (c Component) Key(src, goVersion string) (string, error) {
	v, err := c.Version(src)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "go %s\nldflags %s\npackages %s\n", goVersion, c.LDFlags(v), strings.Join(c.Packages, " "))
	dir := c.ModuleDir(src)
	var files []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".go") || d.Name() == "go.mod" || d.Name() == "go.sum") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	for _, f := range files {
		rel, _ := filepath.Rel(dir, f)
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "file %s %d\n", filepath.ToSlash(rel), len(data))
		h.Write(data)
	}
	return c.Module + "-" + v + "-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Built is the outcome of one component's build.
type Built struct {
	Component Component
	Version   string
	// Dir holds the binaries.
	Dir string
	// Cached is true when Dir was there already and nothing was compiled.
	Cached   bool
	Duration time.Duration
}

// builtMarker is written last into a cache entry: a directory without it
// is a build that did not finish.
const builtMarker = "BUILT"

// BuildComponent builds c into the cache, or finds it there.
func BuildComponent(ctx context.Context, o Options, x Exec, c Component, goVersion string, now func() time.Time) (Built, error) {
	v, err := c.Version(o.Source)
	if err != nil {
		return Built{}, err
	}
	key, err := c.Key(o.Source, goVersion)
	if err != nil {
		return Built{}, err
	}
	b := Built{Component: c, Version: v, Dir: filepath.Join(o.Cache, "bin", key)}
	if complete(b.Dir, c.Binaries) {
		b.Cached = true
		return b, nil
	}
	t0 := now()
	tmp := b.Dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return b, err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return b, err
	}
	args := []string{o.Go, "build", "-C", c.ModuleDir(o.Source), "-mod=readonly", "-trimpath", "-buildvcs=false",
		"-ldflags=" + c.LDFlags(v), "-o", tmp + string(filepath.Separator)}
	if out, err := x.Run(ctx, append(args, c.Packages...)...); err != nil {
		return b, fmt.Errorf("build %s %s: %w\n%s", c.Module, v, err, tail(out, 40))
	}
	marker := fmt.Sprintf("%s %s built with %s in %s\n", c.Module, v, goVersion, now().Sub(t0).Round(time.Second))
	if err := os.WriteFile(filepath.Join(tmp, builtMarker), []byte(marker), 0o644); err != nil {
		return b, err
	}
	_ = os.RemoveAll(b.Dir)
	if err := os.Rename(tmp, b.Dir); err != nil {
		return b, err
	}
	b.Duration = now().Sub(t0)
	return b, nil
}

// complete reports whether dir is a finished build holding every binary.
func complete(dir string, bins []string) bool {
	if _, err := os.Stat(filepath.Join(dir, builtMarker)); err != nil {
		return false
	}
	for _, b := range bins {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Binaries maps each cluster binary's name to its path.
type Binaries map[string]string

// BuildAll builds or finds every component and returns the binaries' paths.
func BuildAll(ctx context.Context, o Options, x Exec, now func() time.Time, out io.Writer) (Binaries, []Built, error) {
	gv, err := x.Run(ctx, o.Go, "env", "GOVERSION")
	if err != nil {
		return nil, nil, fmt.Errorf("go env GOVERSION: %w", err)
	}
	goVersion := strings.TrimSpace(string(gv))
	bins := Binaries{}
	var builds []Built
	for _, c := range Components {
		b, err := BuildComponent(ctx, o, x, c, goVersion, now)
		if err != nil {
			return nil, builds, err
		}
		builds = append(builds, b)
		if b.Cached {
			fmt.Fprintf(out, "CACHED %s %s %s\n", c.Module, b.Version, b.Dir)
		} else {
			fmt.Fprintf(out, "BUILT %s %s %s in %s\n", c.Module, b.Version, b.Dir, b.Duration.Round(time.Second))
		}
		for _, name := range c.Binaries {
			bins[name] = filepath.Join(b.Dir, name)
		}
	}
	if len(bins) == 0 {
		return nil, builds, errors.New("no cluster binaries")
	}
	return bins, builds, nil
}
