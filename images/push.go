package images

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Pushed is one image written to a registry.
type Pushed struct {
	Name string
	// Ref is the image's reference by digest, <registry>/<name>@sha256:...
	Ref string
	// Tag is the tag reference also written, or empty.
	Tag string
}

// Push writes every artifact to <registry>/<name>, by digest and, when tag
// is not empty, under that tag as well. registry is a host with an optional
// path prefix, e.g. "ghcr.io/sortie-soak" or "127.0.0.1:5000". Options such
// as remote.WithAuthFromKeychain or remote.WithTransport are passed to every
// request; the context is added to them.
func Push(ctx context.Context, registry, tag string, arts []Artifact, opts ...remote.Option) ([]Pushed, error) {
	registry = strings.TrimSuffix(registry, "/")
	if registry == "" {
		return nil, fmt.Errorf("push: empty registry")
	}
	opts = append(append([]remote.Option(nil), opts...), remote.WithContext(ctx))
	var out []Pushed
	for _, a := range arts {
		ref, err := name.NewDigest(registry + "/" + a.Name + "@" + a.Digest.String())
		if err != nil {
			return out, fmt.Errorf("push %s: %w", a.Name, err)
		}
		p := Pushed{Name: a.Name, Ref: ref.String()}
		if err := writeArtifact(ref, a, opts); err != nil {
			return out, fmt.Errorf("push %s: %w", ref, err)
		}
		if tag != "" {
			t, err := name.NewTag(registry + "/" + a.Name + ":" + tag)
			if err != nil {
				return out, fmt.Errorf("push %s: %w", a.Name, err)
			}
			if err := writeArtifact(t, a, opts); err != nil {
				return out, fmt.Errorf("push %s: %w", t, err)
			}
			p.Tag = t.String()
		}
		out = append(out, p)
	}
	return out, nil
}

func writeArtifact(ref name.Reference, a Artifact, opts []remote.Option) error {
	if a.Index != nil {
		return remote.WriteIndex(ref, a.Index, opts...)
	}
	return remote.Write(ref, a.Image, opts...)
}
