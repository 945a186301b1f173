package provenance

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// newRegistry starts an in-process OCI registry on 127.0.0.1 and returns
// its host:port.
func newRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("registry at %s, want 127.0.0.1", host)
	}
	return host
}

// deadRegistry returns a loopback host:port where nothing listens any more.
func deadRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(nil)
	host := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	return host
}

// pushImage writes a small random image to host/repo and returns its
// reference by digest.
func pushImage(t *testing.T, host, repo string) name.Digest {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(host + "/" + repo + "@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

// keyPair is a generated ECDSA P-256 key and its public half as a PEM file,
// as `cosign generate-key-pair` would give.
type keyPair struct {
	priv   *ecdsa.PrivateKey
	pubPEM string // path
}

func newKeyPair(t *testing.T) keyPair {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := cryptoutils.MarshalPublicKeyToPEM(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(path, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return keyPair{priv: priv, pubPEM: path}
}

// sign attaches to target a cosign signature, made with k, of the simple
// signing payload that names claimed (target itself, unless a test forges
// a signature of another image), and uploads it to the registry at the
// tag sha256-<hex>.sig as cosign does.
func sign(t *testing.T, k keyPair, target, claimed name.Digest) {
	t.Helper()
	pl, err := payload.Cosign{Image: claimed}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	sv, err := signature.LoadECDSASignerVerifier(k.priv, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sv.SignMessage(bytes.NewReader(pl))
	if err != nil {
		t.Fatal(err)
	}
	sig, err := static.NewSignature(pl, base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		t.Fatal(err)
	}
	se, err := ociremote.SignedEntity(target)
	if err != nil {
		t.Fatal(err)
	}
	se, err = mutate.AttachSignatureToEntity(se, sig)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociremote.WriteSignatures(target.Repository, se); err != nil {
		t.Fatal(err)
	}
}

// TestCheckVerify shows each outcome of a key-based verification against a
// registry on loopback.
func TestCheckVerify(t *testing.T) {
	host := newRegistry(t)
	key, otherKey := newKeyPair(t), newKeyPair(t)

	engine := pushImage(t, host, "sortie-engine")
	driver := pushImage(t, host, "sortie")
	sign(t, key, engine, engine)
	sign(t, key, driver, driver)
	unsigned := pushImage(t, host, "sortie-gate")
	wrongKey := pushImage(t, host, "sortie-save")
	sign(t, otherKey, wrongKey, wrongKey)
	// A signature by the right key, but of the engine's payload, copied
	// next to another image.
	copied := pushImage(t, host, "sortie-churn")
	sign(t, key, copied, engine)
	// By digest, but never pushed.
	absent, err := name.NewDigest(host + "/sortie-watchdog@sha256:" + strings.Repeat("a", 64))
	if err != nil {
		t.Fatal(err)
	}
	badKey := filepath.Join(t.TempDir(), "bad.pub")
	if err := os.WriteFile(badKey, []byte("-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	down := deadRegistry(t) + "/sortie-engine@" + engine.DigestStr()

	withKey := func(path string) Options { return Options{Verify: true, Key: path} }
	tests := []struct {
		name   string
		refs   []string
		opts   Options
		reason error  // nil: accepted
		inErr  string // the refused reference, named in the error
	}{
		{name: "valid signatures accepted", refs: []string{engine.String(), driver.String()}, opts: withKey(key.pubPEM)},
		{name: "unsigned image", refs: []string{engine.String(), unsigned.String()}, opts: withKey(key.pubPEM), reason: ErrNoSignature, inErr: unsigned.String()},
		{name: "wrong key", refs: []string{engine.String()}, opts: withKey(otherKey.pubPEM), reason: ErrWrongKey, inErr: engine.String()},
		{name: "signed by another key", refs: []string{wrongKey.String()}, opts: withKey(key.pubPEM), reason: ErrWrongKey, inErr: wrongKey.String()},
		{name: "signature of another image", refs: []string{copied.String()}, opts: withKey(key.pubPEM), reason: ErrWrongKey, inErr: copied.String()},
		{name: "image not in the registry", refs: []string{absent.String()}, opts: withKey(key.pubPEM), reason: ErrNotFound, inErr: absent.String()},
		{name: "registry down", refs: []string{down}, opts: withKey(key.pubPEM), reason: ErrVerifierUnavailable, inErr: down},
		{name: "unreadable key file", refs: []string{engine.String()}, opts: withKey(filepath.Join(t.TempDir(), "none.pub")), reason: ErrVerifierUnavailable, inErr: "none.pub"},
		{name: "key file that is no key", refs: []string{engine.String()}, opts: withKey(badKey), reason: ErrVerifierUnavailable, inErr: "bad.pub"},
		{name: "keyless without a trusted root", refs: []string{engine.String()},
			opts:   Options{Verify: true, Identity: "release@sortie.example", Issuer: "https://issuer.example"},
			reason: ErrVerifierUnavailable, inErr: "trusted root"},
		{name: "keyless with an unreadable trusted root", refs: []string{engine.String()},
			opts:   Options{Verify: true, Identity: "release@sortie.example", Issuer: "https://issuer.example", TrustedRoot: badKey},
			reason: ErrVerifierUnavailable, inErr: "trusted root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Check(context.Background(), tt.refs, tt.opts)
			if tt.reason == nil {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if !res.Verified || res.Mode != "key" || len(res.Checked) != len(tt.refs) {
					t.Fatalf("result %+v, want every reference verified", res)
				}
				for _, c := range res.Checked {
					if c.Signatures != 1 {
						t.Errorf("%s: %d signatures verified, want 1", c.Ref, c.Signatures)
					}
				}
				if s := res.Summary(); s != "provenance VERIFIED mode=key images=2 chart=0" {
					t.Errorf("Summary = %q", s)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check accepted: %+v", res)
			}
			t.Logf("refused: %v", err)
			if !errors.Is(err, tt.reason) {
				t.Errorf("error %q is not %v", err, tt.reason)
			}
			for _, other := range []error{ErrTag, ErrNoSignature, ErrWrongKey, ErrVerifierUnavailable, ErrNotFound} {
				if other != tt.reason && errors.Is(err, other) {
					t.Errorf("error %q is also %v", err, other)
				}
			}
			if !strings.Contains(err.Error(), tt.inErr) {
				t.Errorf("error %q does not name %q", err, tt.inErr)
			}
		})
	}
}

// TestTagRefusedFirst: tags are refused before the options are looked at or
// any registry is contacted (here the key file does not exist and the
// registry is down), and every tag is named at once.
func TestTagRefusedFirst(t *testing.T) {
	down := deadRegistry(t)
	refs := []string{
		down + "/sortie-engine@sha256:" + strings.Repeat("b", 64),
		down + "/sortie:v0.1.0",
		"ghcr.io/sortie-soak/sortie-gate", // no tag: :latest
	}
	_, err := Check(context.Background(), refs, Options{
		Verify: true, Key: filepath.Join(t.TempDir(), "none.pub"),
		Chart: "oci://" + down + "/charts/sortie:0.1.0",
	})
	if !errors.Is(err, ErrTag) {
		t.Fatalf("Check: %v, want ErrTag", err)
	}
	if errors.Is(err, ErrVerifierUnavailable) {
		t.Errorf("Check reached the verifier before refusing tags: %v", err)
	}
	for _, want := range []string{
		"image " + down + "/sortie:v0.1.0: not pinned by digest",
		"image ghcr.io/sortie-soak/sortie-gate: not pinned by digest",
		"chart oci://" + down + "/charts/sortie:0.1.0: not pinned by digest",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	var re *RefError
	if !errors.As(err, &re) || re.Ref == "" {
		t.Errorf("error is not a *RefError: %T", err)
	}
}

func TestPin(t *testing.T) {
	d := strings.Repeat("c", 64)
	tests := []struct {
		ref    string
		reason error // nil: pinned
	}{
		{"ghcr.io/sortie-soak/sortie-engine@sha256:" + d, nil},
		{"ghcr.io/sortie-soak/sortie-engine:v1@sha256:" + d, nil}, // the digest decides
		{"127.0.0.1:5000/sortie@sha256:" + d, nil},
		{"sortie@sha256:" + d, nil},
		{"ghcr.io/sortie-soak/sortie-engine:v1", ErrTag},
		{"ghcr.io/sortie-soak/sortie-engine", ErrTag},
		{"sortie:latest", ErrTag},
		{"ghcr.io/sortie-soak/sortie-engine@sha256:abc", ErrInvalidRef},
		{"UPPER/Case@sha256:" + d, ErrInvalidRef},
		{"", ErrInvalidRef},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			res, err := Check(context.Background(), []string{tt.ref}, Options{})
			if tt.reason == nil {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				if res.Verified || len(res.Checked) != 1 || res.Checked[0].Digest != "sha256:"+d {
					t.Errorf("result %+v", res)
				}
				return
			}
			if !errors.Is(err, tt.reason) {
				t.Errorf("Check: %v, want %v", err, tt.reason)
			}
		})
	}
}

// TestNotVerified: without Verify nothing is contacted (the registry is
// down) and the summary says so.
func TestNotVerified(t *testing.T) {
	down := deadRegistry(t)
	refs := []string{
		down + "/sortie-engine@sha256:" + strings.Repeat("1", 64),
		down + "/sortie@sha256:" + strings.Repeat("2", 64),
		down + "/sortie-engine@sha256:" + strings.Repeat("1", 64), // listed twice, checked once
	}
	res, err := Check(context.Background(), refs, Options{Chart: "oci://" + down + "/charts/sortie@sha256:" + strings.Repeat("3", 64)})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PINNED image " + refs[0],
		"PINNED image " + refs[1],
		"PINNED chart oci://" + down + "/charts/sortie@sha256:" + strings.Repeat("3", 64),
		"provenance NOT VERIFIED (--verify not given) images=2 chart=1 pinned by digest",
	}
	if got := res.Lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(res.Summary(), NotVerified) || res.Verified || res.Mode != "none" {
		t.Errorf("result %+v", res)
	}
}

// TestChartOCI: an OCI chart is verified like an image.
func TestChartOCI(t *testing.T) {
	host := newRegistry(t)
	key := newKeyPair(t)
	engine := pushImage(t, host, "sortie-engine")
	sign(t, key, engine, engine)
	chart := pushImage(t, host, "charts/sortie")
	opts := Options{Verify: true, Key: key.pubPEM, Chart: "oci://" + chart.String()}
	_, err := Check(context.Background(), []string{engine.String()}, opts)
	if !errors.Is(err, ErrNoSignature) || !strings.Contains(err.Error(), "chart oci://"+chart.String()) {
		t.Fatalf("unsigned chart: %v, want ErrNoSignature naming the chart", err)
	}
	sign(t, key, chart, chart)
	res, err := Check(context.Background(), []string{engine.String()}, opts)
	if err != nil {
		t.Fatalf("signed chart: %v", err)
	}
	if got := res.Lines(); got[1] != "VERIFIED chart oci://"+chart.String()+" signatures=1" || got[2] != "provenance VERIFIED mode=key images=1 chart=1" {
		t.Errorf("Lines = %q", got)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want []string // substrings; none: valid
	}{
		{name: "nothing", opts: Options{}},
		{name: "key", opts: Options{Verify: true, Key: "k.pub"}},
		{name: "keyless", opts: Options{Verify: true, Identity: "a@b", Issuer: "https://i", TrustedRoot: "r.json"}},
		{name: "verify with nothing", opts: Options{Verify: true}, want: []string{"needs a public key"}},
		{name: "both", opts: Options{Verify: true, Key: "k", Identity: "a"}, want: []string{"not both"}},
		{name: "identity alone", opts: Options{Verify: true, Identity: "a"}, want: []string{"OIDC issuer"}},
		{name: "issuer alone", opts: Options{Verify: true, Issuer: "i"}, want: []string{"needs an identity"}},
		{name: "key without verify", opts: Options{Key: "k"}, want: []string{"without verify"}},
		{name: "bad chart digest and an OCI chart with one", opts: Options{Chart: "oci://r/c@sha256:" + strings.Repeat("a", 64), ChartDigest: "md5:x"},
			want: []string{"chart digest \"md5:x\"", "local chart directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate: no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error %q lacks %q", err, w)
				}
			}
		})
	}
}

func FuzzCheckRefs(f *testing.F) {
	for _, s := range []string{
		"ghcr.io/sortie-soak/sortie@sha256:" + strings.Repeat("a", 64),
		"sortie:latest",
		"oci://x/y@sha256:" + strings.Repeat("b", 64),
		"a/b:c@sha256:",
		"@@::",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		// Without Verify nothing is contacted: any input is either pinned
		// or refused with a reason, never a panic.
		res, err := Check(context.Background(), []string{ref}, Options{})
		if err != nil {
			if !errors.Is(err, ErrTag) && !errors.Is(err, ErrInvalidRef) {
				t.Fatalf("Check(%q): %v, neither ErrTag nor ErrInvalidRef", ref, err)
			}
			return
		}
		if len(res.Checked) != 1 || !strings.HasPrefix(res.Checked[0].Digest, "sha256:") || !strings.Contains(ref, "@sha256:") {
			t.Fatalf("Check(%q) accepted %+v", ref, res)
		}
	})
}
