package provenance

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sigstore/cosign/v2/pkg/types"
)

// The in-toto and SLSA names a release writes and Check looks for.
const (
	// StatementType is the in-toto statement version written.
	StatementType = "https://in-toto.io/Statement/v1"
	// SLSAPredicateType is SLSA build provenance v1.0, what
	// `cosign attest --type slsaprovenance1` writes.
	SLSAPredicateType = "https://slsa.dev/provenance/v1"
	// SLSAPredicateTypeV02 is the older SLSA provenance that `cosign attest
	// --type slsaprovenance` writes; Check counts it as provenance too.
	SLSAPredicateTypeV02 = "https://slsa.dev/provenance/v0.2"
)

// ErrAttestation: an attestation's envelope or statement does not parse or
// lacks what a statement must have.
var ErrAttestation = errors.New("malformed attestation")

// Statement is an in-toto statement: what it is about (Subject) and a
// predicate of the given type.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// Subject is one artifact a statement is about: an image by its name
// (repository) and sha256 digest.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Names reports whether digest ("sha256:<hex>") is one of the subjects.
func (s Statement) Names(digest string) bool {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		return false
	}
	for _, sub := range s.Subject {
		if sub.Digest["sha256"] == hex {
			return true
		}
	}
	return false
}

// Marshal is the statement as JSON, the payload a DSSE envelope signs.
func (s Statement) Marshal() ([]byte, error) { return json.Marshal(s) }

// SLSAProvenance is the SLSA v1.0 build provenance predicate: how an image
// was built (BuildDefinition) and by whom, when (RunDetails).
type SLSAProvenance struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

// BuildDefinition is what the build was asked to do. ExternalParameters
// are the inputs a user controls (the image, its package, the source
// commit); InternalParameters what the builder fixed (toolchain, flags).
type BuildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   map[string]any       `json:"externalParameters"`
	InternalParameters   map[string]any       `json:"internalParameters,omitempty"`
	ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies,omitempty"`
}

// ResourceDescriptor names an input of the build: the source at a commit,
// the CA bundle by its digest.
type ResourceDescriptor struct {
	Name   string            `json:"name,omitempty"`
	URI    string            `json:"uri,omitempty"`
	Digest map[string]string `json:"digest,omitempty"`
}

// RunDetails says who built and when.
type RunDetails struct {
	Builder  Builder       `json:"builder"`
	Metadata BuildMetadata `json:"metadata"`
}

// Builder is the builder's identity: a URI a verifier can hold a policy on.
type Builder struct {
	ID string `json:"id"`
}

// BuildMetadata are the build's times.
type BuildMetadata struct {
	InvocationID string    `json:"invocationId,omitempty"`
	StartedOn    time.Time `json:"startedOn"`
	FinishedOn   time.Time `json:"finishedOn"`
}

// NewSLSAStatement is the SLSA v1.0 provenance statement of the image repo
// (e.g. "registry.example/sortie-engine") at digest.
func NewSLSAStatement(repo, digest string, p SLSAProvenance) (Statement, error) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || !digestRE.MatchString(digest) {
		return Statement{}, fmt.Errorf("statement for %s: digest %q is not sha256:<64 hex digits>", repo, digest)
	}
	pred, err := json.Marshal(p)
	if err != nil {
		return Statement{}, err
	}
	return Statement{
		Type:          StatementType,
		Subject:       []Subject{{Name: repo, Digest: map[string]string{"sha256": hex}}},
		PredicateType: SLSAPredicateType,
		Predicate:     pred,
	}, nil
}

// maxAttestation bounds an attestation a registry hands over: a provenance
// statement is a few kilobytes.
const maxAttestation = 1 << 20

// envelope is a DSSE envelope; the signatures were checked by cosign
// before the statement is read.
type envelope struct {
	PayloadType string `json:"payloadType"`
	Payload     string `json:"payload"`
}

// ParseAttestation reads the in-toto statement out of a DSSE envelope, as
// an attestation layer holds it. It checks the envelope's payload type, the
// statement's type, that there is a predicate type and that every subject
// has a sha256 digest; it does not check signatures.
func ParseAttestation(data []byte) (Statement, error) {
	if len(data) > maxAttestation {
		return Statement{}, fmt.Errorf("%w: %d bytes, more than %d", ErrAttestation, len(data), maxAttestation)
	}
	var env envelope
	if err := strictJSON(data, &env); err != nil {
		return Statement{}, fmt.Errorf("%w: envelope: %w", ErrAttestation, err)
	}
	if env.PayloadType != types.IntotoPayloadType {
		return Statement{}, fmt.Errorf("%w: envelope payload type %q, want %q", ErrAttestation, env.PayloadType, types.IntotoPayloadType)
	}
	body, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return Statement{}, fmt.Errorf("%w: envelope payload: %w", ErrAttestation, err)
	}
	var st Statement
	if err := strictJSON(body, &st); err != nil {
		return Statement{}, fmt.Errorf("%w: statement: %w", ErrAttestation, err)
	}
	var errs []error
	if !strings.HasPrefix(st.Type, "https://in-toto.io/Statement/") {
		errs = append(errs, fmt.Errorf("statement _type %q is not an in-toto statement", st.Type))
	}
	if st.PredicateType == "" {
		errs = append(errs, errors.New("statement has no predicateType"))
	}
	if len(st.Subject) == 0 {
		errs = append(errs, errors.New("statement has no subject"))
	}
	for i, sub := range st.Subject {
		if !digestRE.MatchString("sha256:" + sub.Digest["sha256"]) {
			errs = append(errs, fmt.Errorf("subject %d (%q) has no sha256 digest", i, sub.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Statement{}, fmt.Errorf("%w: %w", ErrAttestation, err)
	}
	return st, nil
}

// strictJSON decodes one JSON value into v; fields v does not name are
// allowed (an envelope carries signatures, a statement may grow), trailing
// data is not.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// IsSLSAProvenance reports whether a predicate type is SLSA build
// provenance (v1.0 or v0.2).
func IsSLSAProvenance(predicateType string) bool {
	return predicateType == SLSAPredicateType || predicateType == SLSAPredicateTypeV02
}
