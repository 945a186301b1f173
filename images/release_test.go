package images

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	v1mutate "github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/provenance"
)

// testKey writes a cosign key pair (cosign.key encrypted with password,
// cosign.pub) and returns their paths.
func testKey(t *testing.T, password string) (priv, pub string) {
	t.Helper()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte(password), nil })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	priv, pub = filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
	writeFile(t, priv, string(kb.PrivateBytes))
	writeFile(t, pub, string(kb.PublicBytes))
	return priv, pub
}

func loadSigner(t *testing.T, priv, password string) *provenance.Signer {
	t.Helper()
	s, err := provenance.LoadSigner(priv, []byte(password))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeResult is a build result of every image of Binaries, each wrapping
// a few bytes named after it instead of a compiled binary: what Release
// does with a result does not depend on what the binaries hold.
func fakeResult(t *testing.T) Result {
	t.Helper()
	res := Result{GoVersion: "go1.26.0", Platforms: []Platform{amd64}, CACertsDigest: "sha256:" + hexA, CASource: RootsSource}
	for _, b := range Binaries {
		img, err := Image(b.Name, []byte("binary of "+b.Name), []byte{}, amd64)
		if err != nil {
			t.Fatal(err)
		}
		a, err := NewArtifact(b.Name, []v1.Image{img}, []Platform{amd64})
		if err != nil {
			t.Fatal(err)
		}
		res.Artifacts = append(res.Artifacts, a)
	}
	return res
}

var testSource = Source{URI: DefaultSourceURI, Commit: strings.Repeat("c0", 20)}

// TestRelease releases every image to a registry on loopback, checks each
// with the provenance pre-flight (signature and SLSA provenance, with the
// release key), reads one provenance back, and shows that an image
// re-pushed unsigned, or signed by another key, is refused by name.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	host := newRegistry(t) + "/sortie-soak"
	priv, pub := testKey(t, "pw")
	otherPriv, _ := testKey(t, "other")
	res := fakeResult(t)
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

	rel, err := Release(ctx, ReleaseOptions{Registry: host, Tag: "v1", Signer: loadSigner(t, priv, "pw"),
		Source: testSource, Started: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC), Clock: clk}, res)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if len(rel) != len(Binaries) {
		t.Fatalf("released %d images, want %d", len(rel), len(Binaries))
	}
	var refs []string
	for i, r := range rel {
		want := host + "/" + Binaries[i].Name + "@" + res.Artifacts[i].Digest.String()
		if r.Ref != want || !r.Signed || !r.Attested || r.Tag != host+"/"+Binaries[i].Name+":v1" {
			t.Errorf("released %+v, want %s signed, attested and tagged", r, want)
		}
		refs = append(refs, r.Ref)
	}

	check := func(refs []string) (provenance.Result, error) {
		return provenance.Check(ctx, refs, provenance.Options{Verify: true, Key: pub, RequireProvenance: true})
	}
	got, err := check(refs)
	if err != nil {
		t.Fatalf("provenance check of the release: %v", err)
	}
	for _, c := range got.Checked {
		if c.Signatures != 1 || c.Provenance != 1 {
			t.Errorf("%s: %d signatures, %d provenance attestations; want 1 and 1", c.Ref, c.Signatures, c.Provenance)
		}
	}
	checkProvenance(t, rel[0].Ref, res)

	// One image re-pushed: the gate, changed (any change gives another
	// digest), pushed to the same repository.
	gate := res.Artifacts[2]
	changed := v1mutate.Annotations(gate.Image, map[string]string{"org.example.rebuilt": "yes"}).(v1.Image)
	d, err := changed.Digest()
	if err != nil {
		t.Fatal(err)
	}
	repushed, err := name.NewDigest(host + "/" + gate.Name + "@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(repushed, changed); err != nil {
		t.Fatal(err)
	}
	swapped := append([]string(nil), refs...)
	swapped[2] = repushed.String()
	refused := func(reason error) {
		t.Helper()
		_, err := check(swapped)
		var re *provenance.RefError
		if !errors.Is(err, reason) || !errors.As(err, &re) || re.Ref != repushed.String() {
			t.Fatalf("check with %s re-pushed: %v, want %v naming it", gate.Name, err, reason)
		}
		if strings.Count(err.Error(), "image ") != 1 {
			t.Errorf("refusal names more than the re-pushed image: %v", err)
		}
	}
	refused(provenance.ErrNoSignature)
	// Signed and attested, but by another key.
	other := loadSigner(t, otherPriv, "other")
	if err := other.Sign(ctx, repushed); err != nil {
		t.Fatal(err)
	}
	refused(provenance.ErrWrongKey)
}

// checkProvenance reads the attestation of ref back from the registry and
// checks what its statement says.
func checkProvenance(t *testing.T, ref string, res Result) {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := ociremote.AttestationTag(d)
	if err != nil {
		t.Fatal(err)
	}
	sigs, err := ociremote.Signatures(tag)
	if err != nil {
		t.Fatal(err)
	}
	list, err := sigs.Get()
	if err != nil || len(list) != 1 {
		t.Fatalf("attestations of %s: %d, %v; want 1", ref, len(list), err)
	}
	pl, err := list[0].Payload()
	if err != nil {
		t.Fatal(err)
	}
	st, err := provenance.ParseAttestation(pl)
	if err != nil {
		t.Fatal(err)
	}
	var p provenance.SLSAProvenance
	if err := json.Unmarshal(st.Predicate, &p); err != nil {
		t.Fatal(err)
	}
	bd := p.BuildDefinition
	if st.PredicateType != provenance.SLSAPredicateType || !st.Names(d.DigestStr()) || st.Subject[0].Name != d.Context().Name() ||
		bd.BuildType != BuildType || bd.ExternalParameters["package"] != "./engine/cmd/sortie-engine" ||
		bd.InternalParameters["go"] != res.GoVersion || p.RunDetails.Builder.ID != DefaultBuilderID ||
		!p.RunDetails.Metadata.FinishedOn.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("provenance of %s:\n%s\n%s", ref, pl, st.Predicate)
	}
	src := bd.ResolvedDependencies[0]
	if src.URI != testSource.URI || src.Digest["gitCommit"] != testSource.Commit {
		t.Errorf("source %+v, want %+v", src, testSource)
	}
}

// lyingRegistry serves a registry on loopback whose answers for a manifest
// pushed by digest name another digest once it is pushed, as a registry that rewrote the
// pushed manifest would.
func lyingRegistry(t *testing.T) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var mu sync.Mutex
	put := map[string]bool{} // manifests pushed: the lie starts after the push
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lie := r.Method == http.MethodHead && put[r.URL.Path]
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/sha256:") {
			put[r.URL.Path] = true
		}
		mu.Unlock()
		if lie {
			w.Header().Set("Docker-Content-Digest", "sha256:"+hexA)
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Content-Length", "2")
			w.WriteHeader(http.StatusOK)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestReleaseRefusals(t *testing.T) {
	ctx := context.Background()
	priv, _ := testKey(t, "pw")
	signer := loadSigner(t, priv, "pw")
	res := fakeResult(t)

	t.Run("digest mismatch after the push", func(t *testing.T) {
		host := lyingRegistry(t)
		rel, err := Release(ctx, ReleaseOptions{Registry: host, Signer: signer, Source: testSource}, res)
		if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "image "+Binaries[0].Name) {
			t.Fatalf("err = %v, want ErrDigestMismatch naming %s", err, Binaries[0].Name)
		}
		for _, r := range rel {
			if r.Signed || r.Attested {
				t.Errorf("%s signed or attested after a mismatch", r.Name)
			}
		}
	})
	t.Run("unreachable registry", func(t *testing.T) {
		srv := httptest.NewServer(nil)
		dead := strings.TrimPrefix(srv.URL, "http://")
		srv.Close()
		if err := ProbeRegistry(ctx, dead); !errors.Is(err, ErrRegistryUnreachable) || !strings.Contains(err.Error(), dead) {
			t.Fatalf("probe of a closed port: %v, want ErrRegistryUnreachable naming it", err)
		}
		if err := ProbeRegistry(ctx, newRegistry(t)+"/prefix"); err != nil {
			t.Fatalf("probe of a live registry: %v", err)
		}
	})
	t.Run("no signer", func(t *testing.T) {
		if _, err := Release(ctx, ReleaseOptions{Registry: newRegistry(t)}, res); err == nil {
			t.Fatal("release without a signer: no error")
		}
	})
}

// TestRunReleaseRefuses shows the command's refusals that come before any
// build: each exits with its code, says why, and leaves the files alone.
func TestRunReleaseRefuses(t *testing.T) {
	needGoCommand(t)
	priv, _ := testKey(t, "pw")
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	writeFile(t, pwFile, "pw\n")
	badPw := filepath.Join(dir, "bad-password")
	writeFile(t, badPw, "nope\n")
	lock := filepath.Join(dir, "images.lock")
	writeFile(t, lock, "# untouched\n")
	srv := httptest.NewServer(nil)
	dead := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	commit := "--commit=" + testSource.Commit
	base := []string{"release", "--module", "..", "--lock", lock, "--values", "", "--readme", "", commit}

	withEnv := func(env map[string]string) Env {
		return Env{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	}
	for _, tt := range []struct {
		name  string
		env   Env
		args  []string
		code  int
		inErr string
	}{
		{"no key", Env{}, []string{"--registry", dead}, 2, "--key is required"},
		{"no registry", Env{}, []string{"--key", priv, "--password-file", pwFile}, 2, "--registry is required"},
		{"no password", Env{}, []string{"--registry", dead, "--key", priv}, 2, "set " + PasswordEnv},
		{"wrong password in the environment", withEnv(map[string]string{PasswordEnv: "nope"}), []string{"--registry", dead, "--key", priv}, 2, "wrong password"},
		{"wrong password file", Env{}, []string{"--registry", dead, "--key", priv, "--password-file", badPw}, 2, "wrong password"},
		{"missing key file", Env{}, []string{"--registry", dead, "--key", filepath.Join(dir, "none.key"), "--password-file", pwFile}, 2, "none.key"},
		{"only some images", Env{}, []string{"--registry", dead, "--key", priv, "--password-file", pwFile, "--only", "sortie-gate"}, 2, "every image"},
		{"bad commit", Env{}, []string{"--registry", dead, "--key", priv, "--password-file", pwFile, "--commit", "HEAD"}, 2, "full commit hash"},
		{"unreachable registry", withEnv(map[string]string{PasswordEnv: "pw"}), []string{"--registry", dead, "--key", priv}, 1, "registry unreachable: " + dead},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb strings.Builder
			err := tt.env.Run(context.Background(), append(append([]string(nil), base...), tt.args...), &out, &errb)
			if code := cli.Code(err); code != tt.code || err == nil || !strings.Contains(err.Error(), tt.inErr) {
				t.Fatalf("exit %d, err %v; want exit %d mentioning %q\n%s", code, err, tt.code, tt.inErr, errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
			if b, _ := os.ReadFile(lock); string(b) != "# untouched\n" {
				t.Errorf("the lock was written: %q", b)
			}
		})
	}
}

// TestIntegrationRunRelease runs the release command over the real module:
// every image built, pushed to a registry on loopback, signed and attested;
// the lock, a copy of the chart's values and of the README pinned; then
// the provenance pre-flight verifies every pushed image with the public
// key and finds its provenance.
func TestIntegrationRunRelease(t *testing.T) {
	needGoCommand(t)
	if testing.Short() {
		t.Skip("compiles every image; skipped under -short")
	}
	host := newRegistry(t) + "/sortie-soak"
	priv, pub := testKey(t, "pw")
	dir := t.TempDir()
	lock, values, readme := filepath.Join(dir, "images.lock"), filepath.Join(dir, "values.yaml"), filepath.Join(dir, "README.md")
	// Copies of the values and README, pinned to another digest first so
	// that the release has to pin them.
	var stale Lock
	for _, b := range Binaries {
		stale.Images = append(stale.Images, LockEntry{Name: b.Name, Digest: "sha256:" + hexA})
	}
	for _, f := range []struct {
		src, dst string
		pin      func([]byte, Lock) ([]byte, error)
	}{{"../charts/sortie/values.yaml", values, PinValues}, {"../README.md", readme, PinReadme}} {
		b, err := f.pin(mustRead(t, f.src), stale)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, f.dst, string(b))
	}
	env := Env{LookupEnv: func(k string) (string, bool) { return "pw", k == PasswordEnv }}

	var out, errb strings.Builder
	t0 := time.Now()
	err := env.Run(context.Background(), []string{"release", "--module", "..", "--registry", host, "--key", priv,
		"--lock", lock, "--values", values, "--readme", readme}, &out, &errb)
	t.Logf("release of every image: %s", time.Since(t0).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("release: %v\n%s\n%s", err, out.String(), errb.String())
	}
	l, err := ReadLock(lock)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, e := range l.Images {
		ref := host + "/" + e.Name + "@" + e.Digest
		for _, want := range []string{"PUSHED " + e.Name + " " + ref + "\n", "SIGNED " + e.Name + " " + ref + "\n",
			"ATTESTED " + e.Name + " " + ref + " " + provenance.SLSAPredicateType + "\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
		refs = append(refs, ref)
	}
	if len(refs) != len(Binaries) || !strings.Contains(out.String(), "PINNED "+values+"\nPINNED "+readme+"\n") {
		t.Fatalf("lock %+v, output:\n%s", l, out.String())
	}
	if want := "RELEASED " + host + " images=6 signed=6 attested=6\n"; !strings.HasSuffix(out.String(), want) {
		t.Errorf("last line is not %q:\n%s", want, out.String())
	}
	for _, b := range Binaries {
		want, _ := l.Digest(b.Name)
		if b.ValuesKey != "" {
			if got, err := ValuesDigest(mustRead(t, values), b.ValuesKey); err != nil || got != want {
				t.Errorf("values pin %s %s, want %s (%v)", b.ValuesKey, got, want, err)
			}
		}
		for _, got := range ReadmeDigests(mustRead(t, readme))[b.Name] {
			if got != want {
				t.Errorf("README pins %s at %s, want %s", b.Name, got, want)
			}
		}
	}
	t0 = time.Now()
	res, err := provenance.Check(context.Background(), refs, provenance.Options{Verify: true, Key: pub, RequireProvenance: true})
	t.Logf("provenance check of every image: %s", time.Since(t0).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("provenance check of the release: %v", err)
	}
	for _, c := range res.Checked {
		if c.Signatures != 1 || c.Provenance != 1 {
			t.Errorf("%s: %d signatures, %d provenance; want 1 and 1", c.Ref, c.Signatures, c.Provenance)
		}
	}
}

func TestGitSource(t *testing.T) {
	needGoCommand(t)
	src, err := GitSource(context.Background(), "..", DefaultSourceURI)
	if err != nil {
		t.Fatalf("GitSource of the checkout: %v", err)
	}
	if !commitRE.MatchString(src.Commit) || src.URI != DefaultSourceURI {
		t.Errorf("source %+v, want a full commit", src)
	}
	if _, err := GitSource(context.Background(), t.TempDir(), DefaultSourceURI); !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), "--commit") {
		t.Errorf("GitSource outside a checkout: %v, want ErrSource saying --commit", err)
	}
}

func TestRunReleaseHelp(t *testing.T) {
	stdout, stderr, code := run(t, "release", "--help")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "--registry") || !strings.Contains(stderr, PasswordEnv) {
		t.Errorf("release --help: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	if stdout, _, _ := run(t, "--help"); !strings.Contains(stdout, "release build, push, sign") {
		t.Errorf("usage does not list release:\n%s", stdout)
	}
}
