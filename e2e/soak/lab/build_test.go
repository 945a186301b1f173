package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeModule writes a build module like build/tools into a fake checkout.
func fakeModule(t *testing.T, c Component) string {
	t.Helper()
	src := t.TempDir()
	dir := c.ModuleDir(src)
	if err := os.MkdirAll(filepath.Join(dir, "pause"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/b\n\ngo 1.26.0\n\nrequire (\n\t"+c.VersionOf+" v1.2.3\n\tother.example/x v0.1.0\n)\n")
	write("go.sum", "")
	write("pause/main.go", "package main\n\nfunc main() {}\n")
	return src
}

// buildExec is a go command that "builds" by writing each binary into the
// -o directory, and counts its builds.
type buildExec struct {
	builds int
	last   []string
}

func (b *buildExec) Run(_ context.Context, args ...string) ([]byte, error) {
	b.last = args
	if len(args) > 1 && args[1] == "env" {
		return []byte("go1.26.8\n"), nil
	}
	b.builds++
	var out string
	for i, a := range args {
		if a == "-o" {
			out = args[i+1]
		}
	}
	for _, c := range Components {
		for _, bin := range c.Binaries {
			if err := os.WriteFile(filepath.Join(out, bin), []byte("#!"), 0o755); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

func TestBuildComponentCaches(t *testing.T) {
	c := Components[1]
	src := fakeModule(t, c)
	o := Options{Source: src, Cache: t.TempDir(), Go: "go"}
	x := &buildExec{}
	b1, err := BuildComponent(context.Background(), o, x, c, "go1.26.8", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if b1.Cached || x.builds != 1 || b1.Version != "v1.2.3" {
		t.Fatalf("first build: %+v after %d builds", b1, x.builds)
	}
	if !strings.Contains(strings.Join(x.last, " "), "-C "+c.ModuleDir(src)) || !strings.Contains(strings.Join(x.last, " "), "-mod=readonly") {
		t.Errorf("go build %v: not in the module, or free to change go.mod", x.last)
	}
	b2, err := BuildComponent(context.Background(), o, x, c, "go1.26.8", time.Now)
	if err != nil || !b2.Cached || x.builds != 1 || b2.Dir != b1.Dir {
		t.Errorf("second build: %+v, %v after %d builds; want the cached %s", b2, err, x.builds, b1.Dir)
	}
	// Another toolchain is another entry.
	b3, err := BuildComponent(context.Background(), o, x, c, "go1.27.0", time.Now)
	if err != nil || b3.Cached || b3.Dir == b1.Dir || x.builds != 2 {
		t.Errorf("build with another Go: %+v, %v after %d builds", b3, err, x.builds)
	}
	// A build that did not finish (no marker) is not reused.
	if err := os.Remove(filepath.Join(b1.Dir, builtMarker)); err != nil {
		t.Fatal(err)
	}
	if b4, err := BuildComponent(context.Background(), o, x, c, "go1.26.8", time.Now); err != nil || b4.Cached || x.builds != 3 {
		t.Errorf("build over an unfinished entry: %+v, %v after %d builds", b4, err, x.builds)
	}
}

func TestKeyFollowsModuleFiles(t *testing.T) {
	c := Components[1]
	src := fakeModule(t, c)
	k1, err := c.Key(src, "go1.26.8")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k1, "tools-v1.2.3-") {
		t.Errorf("key %q does not name the module and version", k1)
	}
	if err := os.WriteFile(filepath.Join(c.ModuleDir(src), "pause", "main.go"), []byte("package main\n\nfunc main() { println() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k2, _ := c.Key(src, "go1.26.8")
	if k2 == k1 {
		t.Error("a changed source file kept the key")
	}
}

func TestKubeLDFlags(t *testing.T) {
	got := kubeLDFlags("v1.37.2")
	for _, want := range []string{"version.gitVersion=v1.37.2", "version.gitMajor=1 ", "version.gitMinor=37 ", "-s -w"} {
		if !strings.Contains(got, want) {
			t.Errorf("ldflags %q lack %q", got, want)
		}
	}
}

// TestCommittedBuildModules: the checkout's build modules pin the versions
// the lab documents, and the Kubernetes module replaces every staging
// module with the release of the same minor version.
func TestCommittedBuildModules(t *testing.T) {
	src := filepath.Join("..", "..", "..")
	want := map[string]string{"kube": "v1.37.2", "tools": "v1.15.0", "netpol": "v2.1.0"}
	for _, c := range Components {
		v, err := c.Version(src)
		if err != nil {
			t.Fatal(err)
		}
		if v != want[c.Module] {
			t.Errorf("%s pins %s %s, want %s", c.Module, c.VersionOf, v, want[c.Module])
		}
		if _, err := os.Stat(filepath.Join(c.ModuleDir(src), "go.sum")); err != nil {
			t.Errorf("%s: %v", c.Module, err)
		}
	}
	mod, err := os.ReadFile(filepath.Join(Components[0].ModuleDir(src), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	replaces := 0
	for _, line := range strings.Split(string(mod), "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == "replace" && strings.HasPrefix(f[1], "k8s.io/") {
			replaces++
			if f[4] != "v0.37.2" {
				t.Errorf("%s: want v0.37.2", line)
			}
		}
	}
	if replaces < 30 {
		t.Errorf("%d staging replaces, want one per staging module of k8s.io/kubernetes", replaces)
	}
}

func TestRequiredVersion(t *testing.T) {
	gomod := "module m\n\ngo 1.26.0\n\nrequire example.com/one v1.0.0 // indirect\n\nrequire (\n\texample.com/two v2.0.0\n\texample.com/three v0.3.0 // indirect\n)\n\nreplace example.com/four => example.com/four v4.0.0\n"
	for mod, want := range map[string]string{"example.com/one": "v1.0.0", "example.com/two": "v2.0.0", "example.com/three": "v0.3.0", "example.com/four": "", "example.com/tw": ""} {
		if got := requiredVersion(gomod, mod); got != want {
			t.Errorf("requiredVersion(%s) = %q, want %q", mod, got, want)
		}
	}
}
