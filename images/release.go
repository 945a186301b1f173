package images

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/provenance"
)

// Reasons a release refuses, matched with errors.Is.
var (
	// ErrRegistryUnreachable: the registry does not answer, or refuses the
	// credentials. Checked before anything is built.
	ErrRegistryUnreachable = errors.New("registry unreachable")
	// ErrDigestMismatch: after the push, the registry serves another
	// digest (or nothing) for the image than the one built.
	ErrDigestMismatch = errors.New("registry serves another digest than the one pushed")
	// ErrSource: the source commit the provenance names is unknown.
	ErrSource = errors.New("source commit unknown")
)

// BuildType is the SLSA build type of sortie's image builds: the recipe
// BuildFlags, buildEnv and Image describe, whose parameters the
// provenance's externalParameters and internalParameters record.
const BuildType = "https://github.com/sortie-soak/sortie/images/build/v1"

// DefaultBuilderID is the SLSA builder identity of a release run by hand. A
// CI sets its own (for example its workflow's URI) with --builder-id.
const DefaultBuilderID = "https://github.com/sortie-soak/sortie/images/cmd/sortie-images"

// Source is the source the images were built from, as the provenance
// records it.
type Source struct {
	// URI is the repository, e.g. "git+https://github.com/sortie-soak/sortie".
	URI string
	// Commit is the full commit hash.
	Commit string
	// Dirty says the working tree had changes the commit does not hold.
	Dirty bool
}

// GitSource reads the commit of the checkout at dir and whether its
// working tree is dirty, with the git command.
func GitSource(ctx context.Context, dir, uri string) (Source, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return Source{}, fmt.Errorf("%w: git rev-parse HEAD in %s: %w (give --commit)", ErrSource, dir, err)
	}
	s := Source{URI: uri, Commit: strings.TrimSpace(string(out))}
	st, err := exec.CommandContext(ctx, "git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return Source{}, fmt.Errorf("%w: git status in %s: %w", ErrSource, dir, err)
	}
	s.Dirty = len(strings.TrimSpace(string(st))) > 0
	return s, nil
}

// ProbeRegistry checks that the registry (host[:port][/prefix]) answers
// for <registry>/<first image>: a manifest request that gets any answer but
// an authentication refusal means it is reachable. It is asked before a
// build, so an unreachable registry costs seconds, not a build.
func ProbeRegistry(ctx context.Context, registry string, ro ...remote.Option) error {
	ref, err := name.NewTag(strings.TrimSuffix(registry, "/") + "/" + Binaries[0].Name + ":sortie-release-probe")
	if err != nil {
		return fmt.Errorf("%w: registry %q: %w", ErrRegistryUnreachable, registry, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = remote.Head(ref, append(append([]remote.Option(nil), ro...), remote.WithContext(ctx))...)
	var terr *transport.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
		return nil // it answers: the probe tag does not exist
	default:
		return fmt.Errorf("%w: %s: %w", ErrRegistryUnreachable, registry, err)
	}
}

// VerifyPushed asks the registry for ref (by digest) and checks that it
// serves exactly that digest.
func VerifyPushed(ctx context.Context, ref name.Digest, ro ...remote.Option) error {
	desc, err := remote.Head(ref, append(append([]remote.Option(nil), ro...), remote.WithContext(ctx))...)
	if err != nil {
		return fmt.Errorf("%w: %s after the push: %w", ErrDigestMismatch, ref, err)
	}
	if desc.Digest.String() != ref.DigestStr() {
		return fmt.Errorf("%w: %s: the registry serves %s", ErrDigestMismatch, ref, desc.Digest)
	}
	return nil
}

// ReleaseOptions say where a release goes and who signs it.
type ReleaseOptions struct {
	// Registry is host[:port][/prefix]; each image goes to
	// <Registry>/<name>@<digest>.
	Registry string
	// Tag, when not empty, also tags each image.
	Tag string
	// Signer signs each image and its provenance.
	Signer *provenance.Signer
	// Source is the commit the images were built from.
	Source Source
	// BuilderID is the provenance's builder identity (DefaultBuilderID when
	// empty).
	BuilderID string
	// Started is when the build started; the clock gives the end.
	Started time.Time
	Clock   clock.Clock
	// Remote are the registry options of every request.
	Remote []remote.Option
}

// Released is one image a release pushed, signed and attested.
type Released struct {
	Name string
	Ref  string // <registry>/<name>@<digest>
	Tag  string // the tag reference, when tagged
	// Signed and Attested say how far the image got.
	Signed, Attested bool
}

// Release pushes every image of res, checks that the registry serves each
// one's digest, signs it by digest and attaches its SLSA provenance signed
// with the same key. It stops at the first image that fails, naming it;
// the list says what was done up to there.
func Release(ctx context.Context, o ReleaseOptions, res Result) ([]Released, error) {
	if o.Signer == nil {
		return nil, errors.New("release: no signer")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	finished := o.Clock.Now() // the build's end: what follows is publishing
	pushed, err := Push(ctx, o.Registry, o.Tag, res.Artifacts, o.Remote...)
	out := make([]Released, len(pushed))
	for i, p := range pushed {
		out[i] = Released{Name: p.Name, Ref: p.Ref, Tag: p.Tag}
	}
	if err != nil {
		return out, err
	}
	for i, a := range res.Artifacts {
		ref, err := name.NewDigest(pushed[i].Ref)
		if err != nil {
			return out, fmt.Errorf("image %s: %w", a.Name, err)
		}
		if err := VerifyPushed(ctx, ref, o.Remote...); err != nil {
			return out, fmt.Errorf("image %s: %w", a.Name, err)
		}
		if err := o.Signer.Sign(ctx, ref, o.Remote...); err != nil {
			return out, fmt.Errorf("image %s: %w", a.Name, err)
		}
		out[i].Signed = true
		st, err := provenance.NewSLSAStatement(ref.Context().Name(), ref.DigestStr(), slsaProvenance(a.Name, res, o, finished))
		if err != nil {
			return out, fmt.Errorf("image %s: %w", a.Name, err)
		}
		if err := o.Signer.Attest(ctx, ref, st, o.Remote...); err != nil {
			return out, fmt.Errorf("image %s: %w", a.Name, err)
		}
		out[i].Attested = true
	}
	return out, nil
}

// slsaProvenance is the provenance of the image name built in res: what
// was built from where (the package, the platforms, the source commit),
// with what (the toolchain, flags and CA bundle), by whom and when.
func slsaProvenance(imgName string, res Result, o ReleaseOptions, finished time.Time) provenance.SLSAProvenance {
	b, _ := Lookup(imgName)
	platforms := make([]string, len(res.Platforms))
	for i, p := range res.Platforms {
		platforms[i] = p.String()
	}
	builder := o.BuilderID
	if builder == "" {
		builder = DefaultBuilderID
	}
	deps := []provenance.ResourceDescriptor{{
		Name:   "source",
		URI:    o.Source.URI,
		Digest: map[string]string{"gitCommit": o.Source.Commit},
	}}
	if hex, ok := strings.CutPrefix(res.CACertsDigest, "sha256:"); ok {
		deps = append(deps, provenance.ResourceDescriptor{Name: "ca-bundle", URI: res.CASource, Digest: map[string]string{"sha256": hex}})
	}
	return provenance.SLSAProvenance{
		BuildDefinition: provenance.BuildDefinition{
			BuildType: BuildType,
			ExternalParameters: map[string]any{
				"image":     imgName,
				"package":   "./" + b.Package,
				"platforms": platforms,
				"source":    map[string]any{"uri": o.Source.URI, "commit": o.Source.Commit, "dirty": o.Source.Dirty},
			},
			InternalParameters: map[string]any{
				"go":      res.GoVersion,
				"flags":   BuildFlags,
				"env":     []string{"CGO_ENABLED=0", "GOFLAGS=", "GOEXPERIMENT="},
				"user":    "65532:65532",
				"caCerts": CACertsPath,
			},
			ResolvedDependencies: deps,
		},
		RunDetails: provenance.RunDetails{
			Builder:  provenance.Builder{ID: builder},
			Metadata: provenance.BuildMetadata{StartedOn: o.Started.UTC(), FinishedOn: finished.UTC()},
		},
	}
}
