package images

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sortie-soak/sortie/internal/cli"
)

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), cli.Code(err)
}

func TestRunFlags(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "images.lock")
	writeFile(t, lock, "sortie sha256:"+hexA+"\n")
	tests := []struct {
		name     string
		args     []string
		code     int
		inStderr string // or in the error
	}{
		{"no command", nil, 2, "usage: sortie-images"},
		{"unknown command", []string{"bake"}, 2, "usage: sortie-images"},
		{"help", []string{"--help"}, 0, ""},
		{"build help", []string{"build", "--help"}, 0, "IMAGE <name> <digest>"},
		{"check help", []string{"check", "--help"}, 0, "CHANGED <name>"},
		{"pin help", []string{"pin", "--help"}, 0, "PINNED <file>"},
		{"bad flag", []string{"build", "--nope"}, 2, "flag provided but not defined"},
		{"extra args", []string{"build", "extra"}, 2, ""},
		{"bad platform", []string{"build", "--module", "..", "--platform", "windows/amd64"}, 2, ""},
		{"unknown image", []string{"build", "--module", "..", "--only", "sortie-nope"}, 2, ""},
		{"tag without push", []string{"build", "--module", "..", "--tag", "v1"}, 2, ""},
		{"no module", []string{"build", "--module", t.TempDir()}, 2, ""},
		{"check without lock", []string{"check", "--lock", filepath.Join(t.TempDir(), "none")}, 2, ""},
		{"pin without lock", []string{"pin", "--lock", filepath.Join(t.TempDir(), "none")}, 2, ""},
		{"layer help", []string{"layer", "--help"}, 0, "LAYER <file>"},
		{"roots help", []string{"roots", "--help"}, 0, "ROOTS <file>"},
		{"roots without out", []string{"roots"}, 2, "--out is required"},
		{"build junk CA", []string{"build", "--module", "..", "--ca-certs", "testdata/readme.md"}, 2, "CA bundle testdata/readme.md: no PEM certificate"},
		{"layer without flags", []string{"layer"}, 2, "--name is required\n--binary is required\n--out is required"},
		{"layer bad name", []string{"layer", "--name", "a/b", "--binary", "testdata/ca.pem", "--ca-certs", "testdata/ca.pem", "--out", filepath.Join(t.TempDir(), "l.tar")}, 2, "plain file name"},
		{"pin missing values", []string{"pin", "--lock", lock, "--values", filepath.Join(t.TempDir(), "none"), "--readme", ""}, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := Run(context.Background(), tt.args, &out, &errb)
			if got := cli.Code(err); got != tt.code {
				t.Fatalf("exit %d (%v), want %d; stderr:\n%s", got, err, tt.code, errb.String())
			}
			if tt.inStderr != "" {
				all := errb.String() + out.String()
				if err != nil {
					all += err.Error()
				}
				if !strings.Contains(all, tt.inStderr) {
					t.Errorf("output lacks %q:\n%s", tt.inStderr, all)
				}
			}
		})
	}
}

func TestRunPin(t *testing.T) {
	dir := t.TempDir()
	values, readme := filepath.Join(dir, "values.yaml"), filepath.Join(dir, "README.md")
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dst, string(b))
	}
	copyFile("testdata/values.yaml", values)
	copyFile("testdata/readme.md", readme)
	args := []string{"pin", "--lock", "testdata/pinned.lock", "--values", values, "--readme", readme}
	out, errs, code := run(t, args...)
	if code != 0 {
		t.Fatalf("pin: exit %d: %s", code, errs)
	}
	if want := "PINNED " + values + "\nPINNED " + readme + "\n"; out != want {
		t.Errorf("pin printed %q, want %q", out, want)
	}
	for src, dst := range map[string]string{"testdata/values.pinned.yaml": values, "testdata/readme.pinned.md": readme} {
		want, _ := os.ReadFile(src)
		got, _ := os.ReadFile(dst)
		if !bytes.Equal(want, got) {
			t.Errorf("%s after pin differs from %s", dst, src)
		}
	}
	out, _, code = run(t, args...)
	if want := "UNCHANGED " + values + "\nUNCHANGED " + readme + "\n"; code != 0 || out != want {
		t.Errorf("second pin: exit %d, printed %q, want %q", code, out, want)
	}
}

func TestRunLayer(t *testing.T) {
	out := filepath.Join(t.TempDir(), "layer.tar")
	bin := filepath.Join(t.TempDir(), "sortie-gate")
	writeFile(t, bin, "BINARY")
	stdout, stderr, code := run(t, "layer", "--name", "sortie-gate", "--binary", bin, "--ca-certs", "testdata/ca.pem", "--out", out)
	if code != 0 {
		t.Fatalf("layer: exit %d: %s", code, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile("testdata/ca.pem")
	want, err := LayerTar("sortie-gate", []byte("BINARY"), ca)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("the layer command's tar differs from LayerTar's")
	}
	if !strings.HasPrefix(stdout, "LAYER "+out+" sha256:") {
		t.Errorf("layer printed %q", stdout)
	}
}

func TestCompare(t *testing.T) {
	pinned := Lock{Images: []LockEntry{
		{Name: "sortie-engine", Digest: "sha256:" + hexA},
		{Name: "sortie", Digest: "sha256:" + hexA},
		{Name: "sortie-gate", Digest: "sha256:" + hexA},
	}}
	built := Lock{Images: []LockEntry{
		{Name: "sortie-engine", Digest: "sha256:" + hexA},
		{Name: "sortie", Digest: "sha256:" + hexB},
		{Name: "sortie-churn", Digest: "sha256:" + hexB},
	}}
	r := Compare(pinned, built)
	want := []string{
		"OK sortie-engine sha256:" + hexA,
		"CHANGED sortie lock=sha256:" + hexA + " built=sha256:" + hexB,
		"UNBUILT sortie-gate lock=sha256:" + hexA,
		"UNPINNED sortie-churn built=sha256:" + hexB,
		"CHECK FAIL images=4 ok=1 changed=1 unpinned=1 unbuilt=1",
	}
	if strings.Join(r.Lines, "\n") != strings.Join(want, "\n") || r.Pass() {
		t.Errorf("Compare lines:\n%s\nwant:\n%s", strings.Join(r.Lines, "\n"), strings.Join(want, "\n"))
	}
	if ok := Compare(pinned, pinned); !ok.Pass() || ok.Lines[len(ok.Lines)-1] != "CHECK PASS images=3 ok=3 changed=0 unpinned=0 unbuilt=0" {
		t.Errorf("Compare of a lock with itself: %q", ok.Lines)
	}
}

// TestCompareCA: the CA bundle's line comes first; a changed bundle fails
// the check even when every image agrees (a lock edited by hand), and a
// lock that records none is compared by its images alone.
func TestCompareCA(t *testing.T) {
	images := []LockEntry{{Name: "sortie", Digest: "sha256:" + hexA}}
	ca := func(d string) LockCA { return LockCA{Digest: "sha256:" + d, Source: RootsSource} }
	built := Lock{Images: images, CA: ca(hexA)}
	tests := []struct {
		name   string
		pinned Lock
		first  string
		pass   bool
	}{
		{"same", Lock{Images: images, CA: ca(hexA)}, "CA OK sha256:" + hexA + " " + RootsSource, true},
		{"changed", Lock{Images: images, CA: ca(hexB)}, "CA CHANGED lock=sha256:" + hexB + " built=sha256:" + hexA + " " + RootsSource, false},
		{"not recorded", Lock{Images: images}, "CA UNPINNED built=sha256:" + hexA + " " + RootsSource, true},
	}
	for _, tt := range tests {
		r := Compare(tt.pinned, built)
		if r.Lines[0] != tt.first || r.Pass() != tt.pass || len(r.Lines) != 3 {
			t.Errorf("%s: pass=%v lines %q, want first %q and pass=%v", tt.name, r.Pass(), r.Lines, tt.first, tt.pass)
		}
	}
	if r := Compare(Lock{Images: images, CA: ca(hexA)}, Lock{}); strings.HasPrefix(r.Lines[0], "CA ") {
		t.Errorf("nothing built, yet a CA line: %q", r.Lines)
	}
}

func TestRunRoots(t *testing.T) {
	out := filepath.Join(t.TempDir(), "roots.pem")
	stdout, stderr, code := run(t, "roots", "--out", out)
	if code != 0 {
		t.Fatalf("roots: exit %d: %s", code, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, MozillaRoots()) {
		t.Error("the roots command's file is not MozillaRoots")
	}
	if want := "ROOTS " + out + " sha256:" + hexSum(got) + " " + RootsSource + "\n"; stdout != want {
		t.Errorf("roots printed %q, want %q", stdout, want)
	}
}

// TestIntegrationRunBuildCheckPush drives the command over the real module
// (the gate alone, the quickest binary): build writes layout and lock and
// pushes to an in-process registry; check passes on that lock and fails,
// naming the image, once the lock is altered.
func TestIntegrationRunBuildCheckPush(t *testing.T) {
	needGoCommand(t)
	if testing.Short() {
		t.Skip("compiles sortie-gate; skipped under -short")
	}
	host := newRegistry(t)
	dir := t.TempDir()
	lock, out := filepath.Join(dir, "images.lock"), filepath.Join(dir, "oci")
	stdout, stderr, code := run(t, "build", "--module", "..", "--only", "sortie-gate", "--ca-certs", "testdata/ca.pem",
		"--out", out, "--lock", lock, "--push", host+"/sortie-soak", "--tag", "test")
	if code != 0 {
		t.Fatalf("build: exit %d\n%s\n%s", code, stdout, stderr)
	}
	l, err := ReadLock(lock)
	if err != nil {
		t.Fatal(err)
	}
	digest, ok := l.Digest("sortie-gate")
	if !ok || len(l.Images) != 1 {
		t.Fatalf("lock = %+v, want sortie-gate alone", l)
	}
	for _, want := range []string{
		"IMAGE sortie-gate " + digest + "\n",
		"LAYOUT " + out + "\n",
		"LOCK " + lock + "\n",
		"PUSHED sortie-gate " + host + "/sortie-soak/sortie-gate@" + digest + " " + host + "/sortie-soak/sortie-gate:test\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("build output lacks %q:\n%s", want, stdout)
		}
	}
	ref, err := name.ParseReference(host + "/sortie-soak/sortie-gate:test")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref)
	if err != nil || desc.Digest.String() != digest {
		t.Fatalf("registry has %v (%v) under the tag, want %s", desc, err, digest)
	}

	if want := (LockCA{Digest: "sha256:" + hexSum(mustRead(t, "testdata/ca.pem")), Source: "file:testdata/ca.pem"}); l.CA != want {
		t.Errorf("the lock pins CA %+v, want the --ca-certs file %+v", l.CA, want)
	}

	// check rebuilds with the bundle the lock records, without being told.
	stdout, stderr, code = run(t, "check", "--module", "..", "--lock", lock)
	if code != 0 || !strings.Contains(stdout, "CA OK "+l.CA.Digest+" file:testdata/ca.pem\nOK sortie-gate "+digest+"\nCHECK PASS images=1 ok=1") {
		t.Fatalf("check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// Told to use the pinned roots instead, everything differs.
	roots := filepath.Join(dir, "roots.pem")
	if _, _, code := run(t, "roots", "--out", roots); code != 0 {
		t.Fatal("roots failed")
	}
	stdout, _, code = run(t, "check", "--module", "..", "--lock", lock, "--ca-certs", roots)
	if code != 1 || !strings.Contains(stdout, "CA CHANGED lock="+l.CA.Digest+" built=sha256:"+hexSum(MozillaRoots())) ||
		!strings.Contains(stdout, "CHANGED sortie-gate lock="+digest) {
		t.Errorf("check with another bundle: exit %d\n%s", code, stdout)
	}

	altered := strings.Replace(string(l.Format()), digest, "sha256:"+hexA, 1)
	writeFile(t, lock, altered)
	stdout, _, code = run(t, "check", "--module", "..", "--lock", lock)
	if code != 1 || !strings.Contains(stdout, "CHANGED sortie-gate lock=sha256:"+hexA+" built="+digest) {
		t.Errorf("check of an altered lock: exit %d\n%s", code, stdout)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
