package provenance

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// verifier checks the cosign signatures of digests with one set of
// cosign check options.
type verifier struct {
	remote []remote.Option
	co     *cosign.CheckOpts
}

// newVerifier loads the trust material the options name. Anything that
// keeps verification from running is ErrVerifierUnavailable.
func newVerifier(ctx context.Context, opts Options) (*verifier, error) {
	ro := remoteOptions(ctx, opts)
	co := &cosign.CheckOpts{
		RegistryClientOpts: []ociremote.Option{ociremote.WithRemoteOptions(ro...)},
		// The signed payload must name the digest being checked; without
		// this a signature of another image, copied over, would verify.
		ClaimVerifier: cosign.SimpleClaimVerifier,
	}
	switch opts.Mode() {
	case "key":
		v, err := loadPublicKey(opts.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: public key %s: %w", ErrVerifierUnavailable, opts.Key, err)
		}
		co.SigVerifier = v
		// Key-based signatures are checked against the key alone: the
		// Rekor transparency log is not reachable from every cluster's
		// kickoff host, and a key already says who signed.
		co.IgnoreTlog = true
	case "keyless":
		if opts.TrustedRoot == "" {
			return nil, fmt.Errorf("%w: keyless verification (identity %s, issuer %s) needs a Sigstore trusted root file; it is not fetched over the network",
				ErrVerifierUnavailable, opts.Identity, opts.Issuer)
		}
		tr, err := root.NewTrustedRootFromPath(opts.TrustedRoot)
		if err != nil {
			return nil, fmt.Errorf("%w: trusted root %s: %w", ErrVerifierUnavailable, opts.TrustedRoot, err)
		}
		co.TrustedMaterial = tr
		co.Identities = []cosign.Identity{{Subject: opts.Identity, Issuer: opts.Issuer}}
		// The certificate's SCT and the signature's Rekor entry are checked
		// from what the signature carries, against the trusted root, never
		// by asking Fulcio or Rekor.
		co.Offline = true
	default:
		return nil, fmt.Errorf("%w: no key and no identity", ErrVerifierUnavailable)
	}
	return &verifier{remote: ro, co: co}, nil
}

// loadPublicKey reads a PEM public key (cosign.pub) and returns a verifier
// of SHA-256 signatures.
func loadPublicKey(path string) (signature.Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(b)
	if err != nil {
		return nil, err
	}
	return signature.LoadVerifier(pub, crypto.SHA256)
}

// verify checks that the registry holds d and a cosign signature of it
// that verifies, and returns the number of signatures that did.
func (v *verifier) verify(ctx context.Context, d name.Digest) (int, error) {
	// The manifest first: a digest the registry lacks is named as such, not
	// reported as an unsigned image.
	if _, err := remote.Head(d, v.remote...); err != nil {
		return 0, err
	}
	sigs, _, err := cosign.VerifyImageSignatures(ctx, d, v.co)
	if err != nil {
		return 0, err
	}
	return len(sigs), nil
}

// reason maps an error of the registry or of cosign to the refusal's
// reason.
func reason(err error) error {
	var (
		noSigs   *cosign.ErrNoSignaturesFound
		noMatch  *cosign.ErrNoMatchingSignatures
		notFound *cosign.ErrImageTagNotFound
		terr     *transport.Error
	)
	switch {
	case errors.As(err, &noSigs):
		return ErrNoSignature
	case errors.As(err, &noMatch):
		return ErrWrongKey
	case errors.As(err, &notFound):
		return ErrNotFound
	case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
		return ErrNotFound
	default:
		// Connection refused, DNS, TLS, authentication, a registry error:
		// the check could not run, which is not a verdict on the image.
		return ErrVerifierUnavailable
	}
}

// provenance returns the number of attestations of d that verify (with the
// same key or identity as its signatures), whose statement names d, and
// whose predicate is SLSA build provenance. Attestations that do not
// verify are not counted; none at all, or none that verifies, is an error
// only the caller's RequireProvenance turns into a refusal.
func (v *verifier) provenance(ctx context.Context, d name.Digest) (int, error) {
	co := *v.co
	// The statement's subject must be this digest, as the signature's
	// payload must name it.
	co.ClaimVerifier = cosign.IntotoSubjectClaimVerifier
	atts, _, err := cosign.VerifyImageAttestations(ctx, d, &co)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range atts {
		pl, err := a.Payload()
		if err != nil {
			return 0, err
		}
		st, err := ParseAttestation(pl)
		if err != nil {
			return 0, err
		}
		if IsSLSAProvenance(st.PredicateType) && st.Names(d.DigestStr()) {
			n++
		}
	}
	return n, nil
}

// provenanceReason maps an error of the attestation check to the refusal's
// reason: no attestation, or none that verifies, is ErrNoProvenance; a
// registry that cannot be read is ErrVerifierUnavailable.
func provenanceReason(err error) error {
	var noMatch *cosign.ErrNoMatchingAttestations
	if errors.As(err, &noMatch) || errors.Is(err, ErrAttestation) {
		return ErrNoProvenance
	}
	return reason(err)
}
