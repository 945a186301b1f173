// Package provenance is the pre-flight that decides whether a release may
// run the images and chart it names: every reference must pin a digest (a
// tag is refused before anything else), a local chart directory must hash
// to the digest it is expected to have, and, when asked to verify, every
// image (and an OCI chart) must carry a cosign signature that verifies,
// checked against its registry with cosign's own verifier.
//
// Without verification the check still refuses tags and says, in the line
// Result.Summary returns, that provenance was NOT VERIFIED.
package provenance

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Reasons a check refuses, matched with errors.Is. Each refusal is a
// *RefError naming the reference, wrapping one of these.
var (
	// ErrTag: a reference names a tag (or nothing, which means :latest), or
	// a local chart has no expected digest. Checked before anything else.
	ErrTag = errors.New("not pinned by digest")
	// ErrNothingToCheck: no image reference was given; a pre-flight that
	// passes on nothing would hide a release that renders no image.
	ErrNothingToCheck = errors.New("no image reference to check")
	// ErrInvalidRef: a reference does not parse.
	ErrInvalidRef = errors.New("invalid reference")
	// ErrChartDigest: a local chart directory's content digest is not the
	// expected one.
	ErrChartDigest = errors.New("chart content digest differs from the expected one")
	// ErrNotFound: the registry does not have the manifest the digest names.
	ErrNotFound = errors.New("not found in the registry")
	// ErrNoSignature: the registry holds no cosign signature for the digest.
	ErrNoSignature = errors.New("no cosign signature")
	// ErrWrongKey: signatures exist but none verifies with the given key, or
	// (keyless) none carries the given identity and issuer, or none signs
	// this digest.
	ErrWrongKey = errors.New("no signature verifies with the given key or identity")
	// ErrVerifierUnavailable: the verification could not run: the key or
	// trusted root cannot be read, the registry cannot be reached or
	// answers with an error, or keyless trust material is missing.
	ErrVerifierUnavailable = errors.New("verifier unavailable")
	// ErrNoProvenance: Options.RequireProvenance was given and the image
	// carries no SLSA provenance attestation that verifies with the key or
	// identity and names the image's digest.
	ErrNoProvenance = errors.New("no SLSA provenance attestation")
)

// RefError is a refusal of one reference.
type RefError struct {
	// Kind is "image" or "chart".
	Kind string
	// Ref is the reference as given.
	Ref string
	// Reason is one of the Err* values of this package.
	Reason error
	// Err is the underlying error, if any.
	Err error
}

func (e *RefError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%s %s: %v", e.Kind, e.Ref, e.Reason)
	}
	return fmt.Sprintf("%s %s: %v: %v", e.Kind, e.Ref, e.Reason, e.Err)
}

// Unwrap returns the reason and the underlying error, so errors.Is finds
// either.
func (e *RefError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// Options say what a Check verifies.
type Options struct {
	// Chart is the chart the release installs: an OCI reference
	// "oci://host/repo/chart@sha256:<hex>", or a local chart directory
	// whose content digest (ChartDirDigest) must equal ChartDigest. Empty:
	// no chart is checked.
	Chart string
	// ChartDigest is the expected content digest of a local chart directory
	// ("sha256:<hex>"). Required when Chart is a directory.
	ChartDigest string

	// Verify asks for cosign signature verification of every image (and of
	// an OCI chart). Without it, Check only refuses tags and the summary
	// says provenance NOT VERIFIED.
	Verify bool
	// Key is the path of a cosign public key (PEM, as `cosign
	// generate-key-pair` writes cosign.pub): key-based verification. The
	// transparency log is not consulted (signatures made with
	// --tlog-upload=false verify as well as those that were uploaded).
	Key string
	// Identity and Issuer select keyless verification: a signature must
	// carry a Fulcio certificate for this identity (e-mail or URI) issued
	// after an OIDC login at this issuer.
	Identity string
	Issuer   string
	// TrustedRoot is the path of a Sigstore trusted root (trusted_root.json,
	// as `cosign trusted-root create` writes or the Sigstore TUF repository
	// serves) holding the Fulcio CA, Rekor and CT log keys that keyless
	// verification checks against. Keyless verification needs it: this
	// package never fetches trust material over the network.
	TrustedRoot string
	// RequireProvenance refuses an image that carries no SLSA build
	// provenance attestation (an in-toto statement, signed like the image,
	// whose subject is the image's digest), as `sortie-images release`
	// attaches. Without it, such attestations are counted, not required.
	RequireProvenance bool

	// RemoteOptions configure registry access (transport, auth). Default:
	// credentials from the Docker config (authn.DefaultKeychain).
	RemoteOptions []remote.Option
}

// Mode is the kind of verification the options ask for.
func (o Options) Mode() string {
	switch {
	case !o.Verify:
		return "none"
	case o.Key != "":
		return "key"
	default:
		return "keyless"
	}
}

// Validate returns every problem of the options at once.
func (o Options) Validate() error {
	var errs []error
	if o.Verify {
		keyless := o.Identity != "" || o.Issuer != "" || o.TrustedRoot != ""
		switch {
		case o.Key != "" && keyless:
			errs = append(errs, errors.New("verify with a key or keyless (identity and issuer), not both"))
		case o.Key == "" && !keyless:
			errs = append(errs, errors.New("verify needs a public key, or an identity and an issuer"))
		case o.Key == "":
			if o.Identity == "" {
				errs = append(errs, errors.New("keyless verification needs an identity"))
			}
			if o.Issuer == "" {
				errs = append(errs, errors.New("keyless verification needs an OIDC issuer"))
			}
		}
	} else if o.Key != "" || o.Identity != "" || o.Issuer != "" || o.TrustedRoot != "" || o.RequireProvenance {
		errs = append(errs, errors.New("a key, identity, issuer, trusted root or required provenance is given without verify"))
	}
	if o.ChartDigest != "" && !digestRE.MatchString(o.ChartDigest) {
		errs = append(errs, fmt.Errorf("chart digest %q: want sha256: and 64 lower-case hex digits", o.ChartDigest))
	}
	if o.ChartDigest != "" && strings.HasPrefix(o.Chart, ociPrefix) {
		errs = append(errs, errors.New("a chart digest is for a local chart directory; an OCI chart carries its digest in its reference"))
	}
	return errors.Join(errs...)
}

// Checked is one reference that passed.
type Checked struct {
	Kind   string // "image" or "chart"
	Ref    string // as given
	Digest string // the pinned digest
	// Signatures is the number of signatures that verified (0 without
	// verification, and for a local chart).
	Signatures int
	// Provenance is the number of SLSA provenance attestations of an image
	// that verified and name its digest (0 without verification).
	Provenance int
}

// Result is what a Check that passed found.
type Result struct {
	// Verified is true when every signature was verified.
	Verified bool
	// Mode is "none", "key" or "keyless".
	Mode string
	// Checked lists the images in the order given (duplicates once), then
	// the chart if one was named.
	Checked []Checked
}

// NotVerified is the line a kickoff prints when signatures were not
// checked.
const NotVerified = "provenance NOT VERIFIED"

// Summary is the one line a kickoff prints about provenance: "provenance
// VERIFIED mode=key images=6 chart=1" or "provenance NOT VERIFIED
// (--verify not given) images=6 chart=1 pinned by digest".
func (r Result) Summary() string {
	images, charts := 0, 0
	for _, c := range r.Checked {
		if c.Kind == "chart" {
			charts++
		} else {
			images++
		}
	}
	if !r.Verified {
		return fmt.Sprintf("%s (--verify not given) images=%d chart=%d pinned by digest", NotVerified, images, charts)
	}
	return fmt.Sprintf("provenance VERIFIED mode=%s images=%d chart=%d", r.Mode, images, charts)
}

// Lines are one line per reference then the summary:
//
//	PINNED image <ref>
//	VERIFIED image <ref> signatures=<n> provenance=<n>
//	PINNED chart <dir> <digest>
//	provenance ...
func (r Result) Lines() []string {
	var out []string
	for _, c := range r.Checked {
		switch {
		case c.Kind == "chart" && !strings.HasPrefix(c.Ref, ociPrefix):
			out = append(out, fmt.Sprintf("PINNED chart %s %s", c.Ref, c.Digest))
		case r.Verified && c.Kind == "image":
			out = append(out, fmt.Sprintf("VERIFIED %s %s signatures=%d provenance=%d", c.Kind, c.Ref, c.Signatures, c.Provenance))
		case r.Verified:
			out = append(out, fmt.Sprintf("VERIFIED %s %s signatures=%d", c.Kind, c.Ref, c.Signatures))
		default:
			out = append(out, fmt.Sprintf("PINNED %s %s", c.Kind, c.Ref))
		}
	}
	return append(out, r.Summary())
}

const ociPrefix = "oci://"

// pinned is a reference that passed the digest check.
type pinned struct {
	kind   string
	ref    string      // as given
	digest name.Digest // zero for a local chart
	dir    bool        // a local chart directory
}

// pin checks that ref names a digest.
func pin(kind, ref string) (pinned, error) {
	s := strings.TrimPrefix(ref, ociPrefix)
	if kind == "chart" && s == ref {
		return pinned{kind: kind, ref: ref, dir: true}, nil
	}
	parsed, err := name.ParseReference(s)
	if err != nil {
		return pinned{}, &RefError{Kind: kind, Ref: ref, Reason: ErrInvalidRef, Err: err}
	}
	d, ok := parsed.(name.Digest)
	if !ok {
		return pinned{}, &RefError{Kind: kind, Ref: ref, Reason: ErrTag,
			Err: fmt.Errorf("tag %q: use %s@sha256:<digest>", parsed.Identifier(), parsed.Context().Name())}
	}
	return pinned{kind: kind, ref: ref, digest: d}, nil
}

// Check runs the pre-flight over the image references a release would run
// and the chart of opts:
//
//  1. there is at least one image reference (else ErrNothingToCheck), and
//     every reference must pin a digest; all tags are reported together,
//     before options are validated, files read or registries contacted;
//  2. a local chart directory must hash to opts.ChartDigest;
//  3. with opts.Verify, each image and an OCI chart must exist in its
//     registry and carry a cosign signature that verifies.
//
// The error joins a *RefError per refused reference (errors.Is finds the
// reason); an unusable option is returned as is. A nil error means every
// step held; the Result says whether signatures were verified.
func Check(ctx context.Context, refs []string, opts Options) (Result, error) {
	var (
		ps   []pinned
		errs []error
		seen = map[string]bool{}
	)
	if len(refs) == 0 {
		return Result{}, ErrNothingToCheck
	}
	for _, ref := range refs {
		if seen[ref] {
			continue
		}
		seen[ref] = true
		p, err := pin("image", ref)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ps = append(ps, p)
	}
	if opts.Chart != "" {
		p, err := pin("chart", opts.Chart)
		if err != nil {
			errs = append(errs, err)
		} else if p.dir && opts.ChartDigest == "" {
			errs = append(errs, &RefError{Kind: "chart", Ref: opts.Chart, Reason: ErrTag,
				Err: errors.New("a local chart needs its expected content digest")})
		} else {
			ps = append(ps, p)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	if err := opts.Validate(); err != nil {
		return Result{}, fmt.Errorf("provenance options: %w", err)
	}

	res := Result{Mode: opts.Mode()}
	for _, p := range ps {
		c := Checked{Kind: p.kind, Ref: p.ref, Digest: p.digest.DigestStr()}
		if p.dir {
			got, err := ChartDirDigest(p.ref)
			if err != nil {
				return Result{}, &RefError{Kind: "chart", Ref: p.ref, Reason: ErrChartDigest, Err: err}
			}
			if got != opts.ChartDigest {
				return Result{}, &RefError{Kind: "chart", Ref: p.ref, Reason: ErrChartDigest,
					Err: fmt.Errorf("content is %s, expected %s", got, opts.ChartDigest)}
			}
			c.Digest = got
		}
		res.Checked = append(res.Checked, c)
	}
	if !opts.Verify {
		return res, nil
	}

	if err := verifyAll(ctx, ps, opts, res.Checked); err != nil {
		return Result{}, err
	}
	res.Verified = true
	return res, nil
}

// verifyAll checks the signature (and attestations) of every reference of
// ps, filling in the counts of checked (one entry per reference, in the
// same order), and returns a *RefError per refused reference, joined.
func verifyAll(ctx context.Context, ps []pinned, opts Options, checked []Checked) error {
	v, err := newVerifier(ctx, opts)
	if err != nil {
		return err
	}
	var errs []error
	for i, p := range ps {
		if p.dir {
			continue // a local chart is pinned by its content digest
		}
		n, err := v.verify(ctx, p.digest)
		if err != nil {
			errs = append(errs, &RefError{Kind: p.kind, Ref: p.ref, Reason: reason(err), Err: err})
			continue
		}
		checked[i].Signatures = n
		if p.kind != "image" {
			continue
		}
		np, err := v.provenance(ctx, p.digest)
		switch {
		case err != nil && opts.RequireProvenance:
			errs = append(errs, &RefError{Kind: p.kind, Ref: p.ref, Reason: provenanceReason(err), Err: err})
		case err == nil && np == 0 && opts.RequireProvenance:
			errs = append(errs, &RefError{Kind: p.kind, Ref: p.ref, Reason: ErrNoProvenance,
				Err: errors.New("attestations verify but none is SLSA provenance")})
		}
		checked[i].Provenance = np
	}
	return errors.Join(errs...)
}

// remoteOptions are the registry options of every request.
func remoteOptions(ctx context.Context, opts Options) []remote.Option {
	ro := opts.RemoteOptions
	if len(ro) == 0 {
		ro = []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	}
	return append(append([]remote.Option(nil), ro...), remote.WithContext(ctx))
}
