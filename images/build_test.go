package images

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

var hello = Binary{Name: "hello", Package: "cmd/hello"}

// copyDir copies the regular files under src to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// needGoCommand skips a test that runs the go command or reads files of
// the module outside this package: Bazel's sandbox has neither; go test,
// the toolchain of record, runs it.
func needGoCommand(t *testing.T) {
	t.Helper()
	if os.Getenv("TEST_SRCDIR") != "" {
		t.Skip("under bazel: no go command and no module checkout")
	}
}

// tinyModule copies testdata/tinymod to a new temporary directory.
func tinyModule(t *testing.T) string {
	t.Helper()
	needGoCommand(t)
	dir := filepath.Join(t.TempDir(), "tinymod")
	copyDir(t, "testdata/tinymod", dir)
	return dir
}

func buildTiny(t *testing.T, module string, platforms ...Platform) (Result, []byte) {
	t.Helper()
	bins := t.TempDir()
	res, err := Build(context.Background(), BuildOptions{
		ModuleDir: module, CACerts: "testdata/ca.pem", BinDir: bins, Platforms: platforms,
	}, []Binary{hello})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	p := amd64
	if len(platforms) > 0 {
		p = platforms[0]
	}
	bin, err := os.ReadFile(filepath.Join(bins, p.OS+"_"+p.Arch, "hello"))
	if err != nil {
		t.Fatal(err)
	}
	return res, bin
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBuildReproducible builds a tiny main package from two copies of its
// module at different paths, changes a file it does not import, then one it
// does: only the last changes the binary and the image digest.
func TestBuildReproducible(t *testing.T) {
	mod := tinyModule(t)
	first, firstBin := buildTiny(t, mod)
	if len(firstBin) == 0 {
		t.Fatal("empty binary")
	}
	digest := first.Artifacts[0].Digest

	t.Run("same sources twice", func(t *testing.T) {
		again, bin := buildTiny(t, mod)
		if !bytes.Equal(bin, firstBin) {
			t.Error("the binary differs between two builds")
		}
		if d := again.Artifacts[0].Digest; d != digest {
			t.Errorf("digest %s then %s", digest, d)
		}
	})
	t.Run("another checkout path", func(t *testing.T) {
		other, _ := buildTiny(t, tinyModule(t))
		if d := other.Artifacts[0].Digest; d != digest {
			t.Errorf("digest at another path %s, want %s (-trimpath)", d, digest)
		}
	})
	t.Run("unrelated file changed", func(t *testing.T) {
		writeFile(t, filepath.Join(mod, "lib/b/b.go"), "// Package b is not imported by hello.\npackage b\n\n// Unused is never called.\nfunc Unused() int { return 2 }\n")
		writeFile(t, filepath.Join(mod, "README"), "a new file\n")
		after, _ := buildTiny(t, mod)
		if d := after.Artifacts[0].Digest; d != digest {
			t.Errorf("digest changed from %s to %s by files hello does not import", digest, d)
		}
	})
	t.Run("imported file changed", func(t *testing.T) {
		writeFile(t, filepath.Join(mod, "lib/a/a.go"), "// Package a is imported by hello.\npackage a\n\n// Greeting is what hello prints.\nfunc Greeting() string { return \"hello, world\" }\n")
		after, _ := buildTiny(t, mod)
		if d := after.Artifacts[0].Digest; d == digest {
			t.Errorf("digest stayed %s although hello's code changed", digest)
		}
	})
	if first.GoVersion == "" || first.CACertsDigest == "" {
		t.Errorf("result lacks the toolchain or CA digest: %+v", first)
	}
}

func TestBuildStatic(t *testing.T) {
	_, bin := buildTiny(t, tinyModule(t))
	// A static Linux ELF: no PT_INTERP naming a dynamic loader.
	if !bytes.HasPrefix(bin, []byte("\x7fELF")) {
		t.Fatal("not an ELF binary")
	}
	if bytes.Contains(bin, []byte("/lib64/ld-linux")) || bytes.Contains(bin, []byte("/lib/ld-linux")) {
		t.Error("binary names a dynamic loader: not static")
	}
}

func TestBuildOptionsValidate(t *testing.T) {
	err := BuildOptions{
		ModuleDir: t.TempDir(),
		CACerts:   filepath.Join(t.TempDir(), "none.pem"),
		Platforms: []Platform{amd64, amd64, {OS: "darwin", Arch: "amd64"}},
	}.Validate()
	if err == nil {
		t.Fatal("Validate: no error")
	}
	for _, want := range []string{"no go.mod", "given twice", "darwin/amd64", "CA bundle"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("Validate error %q lacks %q", err, want)
		}
	}
}

func TestWriteLayout(t *testing.T) {
	res, _ := buildTiny(t, tinyModule(t))
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(dir, res.Artifacts); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations[RefNameAnnotation] != "hello" || im.Manifests[0].Digest != res.Artifacts[0].Digest {
		t.Fatalf("index.json manifests = %+v, want hello at %s", im.Manifests, res.Artifacts[0].Digest)
	}
	img, err := idx.Image(res.Artifacts[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if d := digestOf(t, img); d != res.Artifacts[0].Digest {
		t.Errorf("image read back from the layout has digest %s, want %s", d, res.Artifacts[0].Digest)
	}
}

// The full set of sortie images is built once per test run (several
// minutes of compiling on two cores the first time, the build cache after)
// and shared by the integration tests.
var (
	allOnce sync.Once
	allRes  Result
	allErr  error
	allBins string
)

func buildAll(t *testing.T) Result {
	t.Helper()
	needGoCommand(t)
	if testing.Short() {
		t.Skip("builds every sortie binary; skipped under -short")
	}
	allOnce.Do(func() {
		bins, err := os.MkdirTemp("", "sortie-images-test-")
		if err != nil {
			allErr = err
			return
		}
		allBins = bins
		present, _ := Available("..", Binaries)
		allRes, allErr = Build(context.Background(), BuildOptions{
			ModuleDir: "..", CACerts: "testdata/ca.pem", BinDir: bins,
		}, present)
	})
	if allErr != nil {
		t.Fatalf("building every image: %v", allErr)
	}
	return allRes
}

func TestMain(m *testing.M) {
	if ran, code := runHelper(); ran {
		os.Exit(code)
	}
	code := m.Run()
	if allBins != "" {
		os.RemoveAll(allBins)
	}
	os.Exit(code)
}

// TestIntegrationAllImages builds every sortie image twice: the second
// build (new binaries from the same sources) gives the same digests, and
// every image runs its own binary as 65532.
func TestIntegrationAllImages(t *testing.T) {
	first := buildAll(t)
	present, _ := Available("..", Binaries)
	if len(first.Artifacts) != len(present) || len(present) == 0 {
		t.Fatalf("built %d images for %d present packages", len(first.Artifacts), len(present))
	}
	again, err := Build(context.Background(), BuildOptions{
		ModuleDir: "..", CACerts: "testdata/ca.pem", BinDir: t.TempDir(),
	}, present)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range first.Artifacts {
		if b := again.Artifacts[i]; b.Name != a.Name || b.Digest != a.Digest {
			t.Errorf("%s: digest %s, then %s %s", a.Name, a.Digest, b.Name, b.Digest)
		}
		cf, err := a.Image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/usr/local/bin/"+a.Name || cf.Config.User != "65532:65532" {
			t.Errorf("%s: entrypoint %q user %q", a.Name, cf.Config.Entrypoint, cf.Config.User)
		}
	}
}
