package provenance

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/cosign/v2/pkg/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// ErrSigningKey: the private key cannot be used: the file is missing or
// unreadable, is not a cosign private key, or the password does not
// decrypt it.
var ErrSigningKey = errors.New("signing key unusable")

// Signer signs image digests with a cosign private key, writing what
// `cosign sign --key` and `cosign attest --key` (both with
// --tlog-upload=false) write: a signature of the simple-signing payload
// that names the digest, under the tag sha256-<hex>.sig, and a DSSE
// envelope of an in-toto statement under sha256-<hex>.att. Check, and
// `cosign verify --key --insecure-ignore-tlog`, verify both.
type Signer struct {
	sv signature.SignerVerifier
}

// LoadSigner reads a cosign private key (the ENCRYPTED SIGSTORE or COSIGN
// PRIVATE KEY that `cosign generate-key-pair` writes as cosign.key) and
// decrypts it with password. Every failure is ErrSigningKey, naming the
// file.
func LoadSigner(path string, password []byte) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSigningKey, err)
	}
	sv, err := cosign.LoadPrivateKey(b, password, nil)
	if err != nil {
		// A wrong password and a damaged file read the same to the
		// decrypter; say both.
		return nil, fmt.Errorf("%w: private key %s: %w (not a cosign private key, or the wrong password)", ErrSigningKey, path, err)
	}
	return &Signer{sv: sv}, nil
}

// PublicKeyPEM is the public half of the key, as cosign.pub holds it: what
// Options.Key and `soak run --key` verify with.
func (s *Signer) PublicKeyPEM() ([]byte, error) {
	pub, err := s.sv.PublicKey()
	if err != nil {
		return nil, err
	}
	return cryptoutils.MarshalPublicKeyToPEM(pub)
}

// Sign uploads a signature of d: the signed payload names d, so the
// signature cannot be copied onto another image.
func (s *Signer) Sign(ctx context.Context, d name.Digest, ro ...remote.Option) error {
	pl, err := payload.Cosign{Image: d}.MarshalJSON()
	if err != nil {
		return err
	}
	raw, err := s.sv.SignMessage(bytes.NewReader(pl))
	if err != nil {
		return fmt.Errorf("sign %s: %w", d, err)
	}
	sig, err := static.NewSignature(pl, base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		return err
	}
	oo := ociOptions(ctx, ro)
	se, err := ociremote.SignedEntity(d, oo...)
	if err != nil {
		return fmt.Errorf("sign %s: %w", d, err)
	}
	if se, err = mutate.AttachSignatureToEntity(se, sig); err != nil {
		return fmt.Errorf("sign %s: %w", d, err)
	}
	if err := ociremote.WriteSignatures(d.Repository, se, oo...); err != nil {
		return fmt.Errorf("upload signature of %s: %w", d, err)
	}
	return nil
}

// Attest uploads statement (an in-toto statement whose subject is d, see
// NewSLSAStatement), signed in a DSSE envelope, as an attestation of d,
// annotated with its predicate type as cosign annotates it.
func (s *Signer) Attest(ctx context.Context, d name.Digest, statement Statement, ro ...remote.Option) error {
	if !statement.Names(d.DigestStr()) {
		return fmt.Errorf("attest %s: the statement's subject is not this digest", d)
	}
	body, err := statement.Marshal()
	if err != nil {
		return fmt.Errorf("attest %s: %w", d, err)
	}
	env, err := dsse.WrapSigner(s.sv, types.IntotoPayloadType).SignMessage(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("attest %s: %w", d, err)
	}
	att, err := static.NewAttestation(env,
		static.WithLayerMediaType(types.DssePayloadType),
		static.WithAnnotations(map[string]string{"predicateType": statement.PredicateType}))
	if err != nil {
		return err
	}
	oo := ociOptions(ctx, ro)
	se, err := ociremote.SignedEntity(d, oo...)
	if err != nil {
		return fmt.Errorf("attest %s: %w", d, err)
	}
	if se, err = mutate.AttachAttestationToEntity(se, att); err != nil {
		return fmt.Errorf("attest %s: %w", d, err)
	}
	if err := ociremote.WriteAttestations(d.Repository, se, oo...); err != nil {
		return fmt.Errorf("upload attestation of %s: %w", d, err)
	}
	return nil
}

// ociOptions are cosign's registry options for ro and ctx.
func ociOptions(ctx context.Context, ro []remote.Option) []ociremote.Option {
	all := append(append([]remote.Option(nil), ro...), remote.WithContext(ctx))
	return []ociremote.Option{ociremote.WithRemoteOptions(all...)}
}
