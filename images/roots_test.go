package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"testing"

	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/sortie-soak/sortie/internal/cli"
)

// tarFile returns the whole content of one regular file of a tar.
func tarFile(t *testing.T, tarBytes []byte, name string) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(tarBytes))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("the tar has no %s", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

const layerCAPath = "etc/ssl/certs/ca-certificates.crt"

// TestMozillaRoots holds the rendered bundle to what its doc says: the
// same bytes every time, every unconstrained root of the module exactly
// once as a CERTIFICATE block under its fingerprint, sorted by it, the
// constrained ones left out, and a header naming the module and version.
func TestMozillaRoots(t *testing.T) {
	got := MozillaRoots()
	if again := MozillaRoots(); !bytes.Equal(got, again) {
		t.Fatal("two renderings of the roots differ")
	}
	if err := checkPEMBundle(got); err != nil {
		t.Fatalf("the rendered roots do not read back: %v", err)
	}
	want := map[string]bool{} // fingerprints of the unconstrained roots
	var constrained [][]byte
	for r := range bundle.Roots() {
		sum := sha256.Sum256(r.Certificate)
		if r.Constraint != nil {
			constrained = append(constrained, r.Certificate)
			continue
		}
		want[hex.EncodeToString(sum[:])] = true
	}
	if len(want) < 100 {
		t.Fatalf("the module gives %d unconstrained roots: not Mozilla's store", len(want))
	}

	var fps []string
	rest := got
	for {
		block, next := pem.Decode(rest)
		if block == nil {
			break
		}
		sum := sha256.Sum256(block.Bytes)
		fp := hex.EncodeToString(sum[:])
		// The comment right before the block names its fingerprint.
		before := rest[:len(rest)-len(next)]
		if !bytes.Contains(before, []byte("# sha256 "+fp+"\n-----BEGIN CERTIFICATE-----")) {
			t.Errorf("certificate %s is not under its fingerprint comment", fp)
		}
		if !want[fp] {
			t.Errorf("certificate %s is not an unconstrained root of the module", fp)
		}
		fps = append(fps, fp)
		rest = next
	}
	if len(fps) != len(want) {
		t.Errorf("%d certificates rendered, the module has %d unconstrained roots", len(fps), len(want))
	}
	if !sort.StringsAreSorted(fps) {
		t.Error("the certificates are not sorted by fingerprint")
	}
	for _, der := range constrained {
		if bytes.Contains(got, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})) {
			t.Error("a root with a distrust-after constraint is in the bundle without its constraint")
		}
	}
	if !bytes.HasPrefix(got, []byte("# Mozilla's root store (NSS) from "+RootsSource+",\n")) {
		t.Errorf("the bundle's header does not name %s:\n%s", RootsSource, got[:200])
	}
}

// TestRootsVersionIsGoMods: the version the lock and the bundle's header
// name is the one the module graph builds them from.
func TestRootsVersionIsGoMods(t *testing.T) {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == RootsModule && d.Version != RootsVersion {
				t.Errorf("built with %s %s, RootsVersion says %s: update RootsVersion", RootsModule, d.Version, RootsVersion)
			}
		}
	}
	needGoCommand(t)
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(RootsModule) + ` (\S+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatalf("../go.mod does not require %s", RootsModule)
	}
	if string(m[1]) != RootsVersion {
		t.Errorf("../go.mod requires %s %s, RootsVersion says %s: update RootsVersion", RootsModule, m[1], RootsVersion)
	}
}

func TestLoadCABundle(t *testing.T) {
	def, err := LoadCABundle("")
	if err != nil {
		t.Fatal(err)
	}
	if def.Source != RootsSource || !bytes.Equal(def.PEM, MozillaRoots()) {
		t.Errorf("the default bundle is %s, want the Mozilla roots of %s", def.Source, RootsSource)
	}
	if want := "sha256:" + hexSum(MozillaRoots()); def.Digest() != want {
		t.Errorf("Digest() = %s, want %s", def.Digest(), want)
	}
	f, err := LoadCABundle("testdata/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	if f.Source != "file:testdata/ca.pem" {
		t.Errorf("a file's source is %q", f.Source)
	}

	dir := t.TempDir()
	cert, _ := os.ReadFile("testdata/ca.pem")
	key := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"
	for name, tt := range map[string]struct{ content, want string }{
		"junk":     {"not a bundle\n", "no PEM certificate"},
		"empty":    {"", "no PEM certificate"},
		"key":      {string(cert) + key, `PEM block 2 (ending on line 15) is "PRIVATE KEY"`},
		"bad cert": {"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "certificate 1 (ending on line 3)"},
	} {
		path := filepath.Join(dir, name)
		writeFile(t, path, tt.content)
		_, err := LoadCABundle(path)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", name, err, path, tt.want)
		}
	}
	if _, err := LoadCABundle(filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := LoadCABundle("a\nb.pem"); err == nil || !strings.Contains(err.Error(), "control character") {
		t.Errorf("a path with a newline, which the lock cannot hold: %v", err)
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestBuildDefaultCAIsThePinnedRoots: without --ca-certs an image carries
// the pinned roots, whatever the machine's own bundle says (SSL_CERT_FILE
// and SSL_CERT_DIR point at junk here), and the result records them.
func TestBuildDefaultCAIsThePinnedRoots(t *testing.T) {
	mod := tinyModule(t)
	junk := filepath.Join(t.TempDir(), "junk.crt")
	writeFile(t, junk, "junk, not a bundle\n")
	t.Setenv("SSL_CERT_FILE", junk)
	t.Setenv("SSL_CERT_DIR", filepath.Dir(junk))
	res, err := Build(context.Background(), BuildOptions{ModuleDir: mod, BinDir: t.TempDir()}, []Binary{hello})
	if err != nil {
		t.Fatal(err)
	}
	if res.CASource != RootsSource || res.CACertsDigest != "sha256:"+hexSum(MozillaRoots()) {
		t.Errorf("built with CA %s %s, want the pinned roots", res.CASource, res.CACertsDigest)
	}
	if l := res.Lock(); l.CA.Source != RootsSource || l.CA.Digest != res.CACertsDigest {
		t.Errorf("the lock pins CA %+v", l.CA)
	}
	layers, err := res.Artifacts[0].Image.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v %v", layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tarFile(t, raw, layerCAPath), MozillaRoots()) {
		t.Error("the image's CA file is not the pinned roots")
	}
}

// helperEnv makes the test binary run `sortie-images layer` with the
// arguments of helperArgs instead of the tests (see TestMain).
const helperEnv = "SORTIE_IMAGES_TEST_LAYER"

// TestLayerIgnoresHostBundle runs `sortie-images layer` in a mount
// namespace where the machine's bundle, /etc/ssl/certs/ca-certificates.crt,
// is a junk file: the layer is byte for byte the one built outside it.
// A builder that copied the machine's bundle fails this.
func TestLayerIgnoresHostBundle(t *testing.T) {
	const hostBundle = "/etc/ssl/certs/ca-certificates.crt"
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("no unshare command to make a mount namespace: %v (TestBuildDefaultCAIsThePinnedRoots holds the bytes)", err)
	}
	if _, err := os.Stat(hostBundle); err != nil {
		t.Skipf("this machine has no %s to hide: %v", hostBundle, err)
	}
	dir := t.TempDir()
	bin, junk := filepath.Join(dir, "bin"), filepath.Join(dir, "junk.crt")
	writeFile(t, bin, "BINARY")
	writeFile(t, junk, "junk, not a bundle\n")
	outside, inside := filepath.Join(dir, "outside.tar"), filepath.Join(dir, "inside.tar")
	if _, stderr, code := run(t, "layer", "--name", "sortie-gate", "--binary", bin, "--out", outside); code != 0 {
		t.Fatalf("layer: exit %d: %s", code, stderr)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Is a mount namespace allowed here at all?
	if out, err := exec.Command(unshare, "--mount", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a mount namespace here (%v: %s); TestBuildDefaultCAIsThePinnedRoots holds the bytes", err, out)
	}
	script := `mount --bind "$1" ` + hostBundle + ` && [ "$(cat ` + hostBundle + `)" = "junk, not a bundle" ] && shift && exec "$@"`
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", junk,
		self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join([]string{"--name", "sortie-gate", "--binary", bin, "--out", inside}, "\t"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("layer in a namespace with a junk %s: %v\n%s", hostBundle, err, out)
	}
	a, _ := os.ReadFile(outside)
	b, err := os.ReadFile(inside)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the layer differs when the machine's CA bundle is junk: sha256 %s outside, %s inside", hexSum(a), hexSum(b))
	}
}

// runHelper is the test binary run as `sortie-images layer`, in the mount
// namespace of TestLayerIgnoresHostBundle: it reports whether it was asked
// to, and the command's exit code.
func runHelper() (bool, int) {
	args, ok := os.LookupEnv(helperEnv)
	if !ok {
		return false, 0
	}
	err := Run(context.Background(), append([]string{"layer"}, strings.Split(args, "\t")...), os.Stdout, os.Stderr)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
	}
	return true, cli.Code(err)
}

func FuzzCheckPEMBundle(f *testing.F) {
	cert, err := os.ReadFile("testdata/ca.pem")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cert)
	f.Add(MozillaRoots()[:4000])
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte("# comment\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkPEMBundle(data)
		if err != nil {
			return
		}
		// Whatever it accepts holds a certificate Go reads.
		block, _ := pem.Decode(data)
		if block == nil || block.Type != "CERTIFICATE" {
			t.Fatalf("accepted a bundle whose first block is %v", block)
		}
	})
}
