package soak

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ProvenanceRequest is what the pre-flight asks of the provenance check:
// every image the rendered release (and the saver's reader pod) would run,
// and the chart, checked by digest and, with Verify, by signature.
type ProvenanceRequest struct {
	// Images are the image references, sorted, each once.
	Images []string
	// Verify requires a valid signature on each reference: with Key (a
	// cosign public key file) or keyless with Identity and Issuer.
	Verify           bool
	Key              string
	Identity, Issuer string
}

// ProvenanceFunc checks a run's references. It returns the lines to print
// (one per finding, the last saying "provenance NOT VERIFIED" when
// signatures were not checked) and a non-nil error that names the reason
// when the run must not start.
type ProvenanceFunc func(ctx context.Context, req ProvenanceRequest) (lines []string, err error)

// DigestOnly is the provenance check without signatures: every reference
// must be a digest reference, and --verify is refused because this build
// cannot check a signature.
func DigestOnly(_ context.Context, req ProvenanceRequest) ([]string, error) {
	var tags []string
	for _, ref := range req.Images {
		if !isDigestRef(ref) {
			tags = append(tags, ref)
		}
	}
	if len(tags) > 0 {
		return nil, fmt.Errorf("not a digest reference (a tag can change under a run): %s", strings.Join(tags, ", "))
	}
	if req.Verify {
		return nil, errors.New("--verify: this build has no signature verifier")
	}
	return []string{
		fmt.Sprintf("%d images, each a digest reference", len(req.Images)),
		"provenance NOT VERIFIED: signatures were not checked (--verify checks them)",
	}, nil
}

// isDigestRef reports whether ref pins its content: name@sha256:<64 hex>.
func isDigestRef(ref string) bool {
	_, d, ok := strings.Cut(ref, "@")
	if !ok {
		return false
	}
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for _, c := range hex {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
