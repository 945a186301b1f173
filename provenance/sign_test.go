package provenance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/types"
)

// cosignKey is a key pair as `cosign generate-key-pair` writes it: the
// encrypted private key and the public key, in files.
type cosignKey struct {
	priv, pub, password string
}

func newCosignKey(t *testing.T, password string) cosignKey {
	t.Helper()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte(password), nil })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	k := cosignKey{priv: filepath.Join(dir, "cosign.key"), pub: filepath.Join(dir, "cosign.pub"), password: password}
	if err := os.WriteFile(k.priv, kb.PrivateBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.pub, kb.PublicBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k cosignKey) signer(t *testing.T) *Signer {
	t.Helper()
	s, err := LoadSigner(k.priv, []byte(k.password))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLoadSigner(t *testing.T) {
	k := newCosignKey(t, "s3cret")
	s, err := LoadSigner(k.priv, []byte("s3cret"))
	if err != nil {
		t.Fatalf("LoadSigner: %v", err)
	}
	pem, err := s.PublicKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := os.ReadFile(k.pub); string(pem) != string(want) {
		t.Errorf("public key\n%s\nwant cosign.pub\n%s", pem, want)
	}
	notKey := filepath.Join(t.TempDir(), "cosign.key")
	if err := os.WriteFile(notKey, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path, password, inErr string
	}{
		{"wrong password", k.priv, "guess", k.priv},
		{"no password", k.priv, "", k.priv},
		{"missing file", filepath.Join(t.TempDir(), "none.key"), "s3cret", "none.key"},
		{"not a key", notKey, "s3cret", notKey},
		{"a public key", k.pub, "s3cret", k.pub},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadSigner(tt.path, []byte(tt.password))
			if !errors.Is(err, ErrSigningKey) || !strings.Contains(err.Error(), tt.inErr) {
				t.Fatalf("err = %v, want ErrSigningKey naming %s", err, tt.inErr)
			}
		})
	}
}

// slsaOf is a provenance statement of ref with a small predicate.
func slsaOf(t *testing.T, ref name.Digest, predicateType string) Statement {
	t.Helper()
	st, err := NewSLSAStatement(ref.Context().Name(), ref.DigestStr(), SLSAProvenance{
		BuildDefinition: BuildDefinition{BuildType: "https://example.test/build", ExternalParameters: map[string]any{"image": "x"}},
		RunDetails:      RunDetails{Builder: Builder{ID: "https://example.test/builder"}, Metadata: BuildMetadata{StartedOn: time.Unix(0, 0)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st.PredicateType = predicateType
	return st
}

// TestSignAttestCheck signs and attests with Signer, as a release does, and
// checks the outcome with Check: what verifies, what is refused and why.
func TestSignAttestCheck(t *testing.T) {
	ctx := context.Background()
	host := newRegistry(t)
	key, other := newCosignKey(t, "pw"), newCosignKey(t, "")
	s, so := key.signer(t), other.signer(t)

	full := pushImage(t, host, "sortie-engine") // signed and attested
	signedOnly := pushImage(t, host, "sortie")
	otherAtt := pushImage(t, host, "sortie-gate") // attested by another key
	notSLSA := pushImage(t, host, "sortie-save")  // attested, another predicate
	for _, d := range []name.Digest{full, signedOnly, otherAtt, notSLSA} {
		if err := s.Sign(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Attest(ctx, full, slsaOf(t, full, SLSAPredicateType)))
	must(so.Attest(ctx, otherAtt, slsaOf(t, otherAtt, SLSAPredicateType)))
	must(s.Attest(ctx, notSLSA, slsaOf(t, notSLSA, "https://example.test/not-provenance/v1")))
	// A statement about another digest is not attached.
	if err := s.Attest(ctx, signedOnly, slsaOf(t, full, SLSAPredicateType)); err == nil {
		t.Fatal("Attest of a statement about another digest: no error")
	}

	opts := Options{Verify: true, Key: key.pub, RequireProvenance: true}
	res, err := Check(ctx, []string{full.String()}, opts)
	if err != nil {
		t.Fatalf("Check of the signed and attested image: %v", err)
	}
	if c := res.Checked[0]; c.Signatures != 1 || c.Provenance != 1 {
		t.Errorf("checked %+v, want 1 signature and 1 provenance", c)
	}
	if got, want := res.Lines()[0], "VERIFIED image "+full.String()+" signatures=1 provenance=1"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	// The public key cosign wrote verifies what the signer signed; the
	// other key's does not.
	if _, err := Check(ctx, []string{full.String()}, Options{Verify: true, Key: other.pub}); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Check with the other key: %v, want ErrWrongKey", err)
	}

	for _, tt := range []struct {
		name string
		ref  name.Digest
	}{
		{"signed, no attestation", signedOnly},
		{"attested by another key", otherAtt},
		{"attestation of another predicate", notSLSA},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Check(ctx, []string{full.String(), tt.ref.String()}, opts)
			var re *RefError
			if !errors.Is(err, ErrNoProvenance) || !errors.As(err, &re) || re.Ref != tt.ref.String() {
				t.Fatalf("err = %v, want ErrNoProvenance naming %s", err, tt.ref)
			}
			// Not required: the signature alone passes, the count says 0.
			res, err := Check(ctx, []string{tt.ref.String()}, Options{Verify: true, Key: key.pub})
			if err != nil || res.Checked[0].Provenance != 0 || res.Checked[0].Signatures != 1 {
				t.Fatalf("without RequireProvenance: %+v, %v; want 1 signature, 0 provenance", res, err)
			}
		})
	}
	if err := (Options{RequireProvenance: true}).Validate(); err == nil {
		t.Error("RequireProvenance without Verify validated")
	}
}

// envelopeOf wraps a statement body in a DSSE envelope as an attestation
// layer holds it (signatures are not read by ParseAttestation).
func envelopeOf(payloadType string, body []byte) []byte {
	b, _ := json.Marshal(map[string]any{
		"payloadType": payloadType,
		"payload":     base64.StdEncoding.EncodeToString(body),
		"signatures":  []map[string]string{{"keyid": "", "sig": "AAAA"}},
	})
	return b
}

func TestParseAttestation(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	good := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"r/sortie","digest":{"sha256":"` + hex + `"}}],"predicateType":"https://slsa.dev/provenance/v1","predicate":{}}`
	st, err := ParseAttestation(envelopeOf(types.IntotoPayloadType, []byte(good)))
	if err != nil {
		t.Fatalf("ParseAttestation: %v", err)
	}
	if !IsSLSAProvenance(st.PredicateType) || !st.Names("sha256:"+hex) || st.Names("sha256:"+strings.Repeat("cd", 32)) {
		t.Errorf("statement %+v", st)
	}
	for _, tt := range []struct {
		name  string
		data  []byte
		inErr string
	}{
		{"not JSON", []byte("{"), "envelope"},
		{"trailing data", append(envelopeOf(types.IntotoPayloadType, []byte(good)), []byte(" {}")...), "trailing"},
		{"another payload type", envelopeOf("text/plain", []byte(good)), "payload type"},
		{"payload not base64", []byte(`{"payloadType":"` + types.IntotoPayloadType + `","payload":"%%"}`), "payload"},
		{"statement not JSON", envelopeOf(types.IntotoPayloadType, []byte("[1")), "statement"},
		{"not in-toto", envelopeOf(types.IntotoPayloadType, []byte(strings.Replace(good, "in-toto.io", "example.test", 1))), "_type"},
		{"no predicate type", envelopeOf(types.IntotoPayloadType, []byte(strings.Replace(good, "https://slsa.dev/provenance/v1", "", 1))), "predicateType"},
		{"no subject", envelopeOf(types.IntotoPayloadType, []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"p"}`)), "no subject"},
		{"short digest", envelopeOf(types.IntotoPayloadType, []byte(strings.Replace(good, hex, "ab", 1))), "sha256"},
		{"too big", make([]byte, maxAttestation+1), "bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAttestation(tt.data)
			if !errors.Is(err, ErrAttestation) || !strings.Contains(err.Error(), tt.inErr) {
				t.Fatalf("err = %v, want ErrAttestation mentioning %q", err, tt.inErr)
			}
		})
	}
}

func FuzzParseAttestation(f *testing.F) {
	hex := strings.Repeat("0f", 32)
	f.Add(envelopeOf(types.IntotoPayloadType, []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"a","digest":{"sha256":"`+hex+`"}}],"predicateType":"https://slsa.dev/provenance/v1","predicate":{"buildDefinition":{}}}`)))
	f.Add(envelopeOf(types.IntotoPayloadType, []byte(`{"_type":"https://in-toto.io/Statement/v0.1","subject":[{"digest":{}}]}`)))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":""}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseAttestation(data)
		if err != nil {
			if !errors.Is(err, ErrAttestation) {
				t.Fatalf("error %v is not ErrAttestation", err)
			}
			return
		}
		// What parses has what a statement must have.
		if st.PredicateType == "" || len(st.Subject) == 0 {
			t.Fatalf("accepted %+v", st)
		}
		for _, s := range st.Subject {
			if !st.Names("sha256:" + s.Digest["sha256"]) {
				t.Fatalf("subject %+v not named by its own digest", s)
			}
		}
	})
}
