package images

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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

func TestPushAndPull(t *testing.T) {
	host := newRegistry(t)
	single, _ := buildTiny(t, tinyModule(t))
	multi, _ := buildTiny(t, tinyModule(t), amd64, Platform{OS: "linux", Arch: "arm64"})
	ctx := context.Background()

	for _, tt := range []struct {
		name string
		res  Result
		tag  string
	}{
		{"image by digest", single, ""},
		{"index by digest and tag", multi, "v0.1.0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			prefix := host + "/" + strings.ReplaceAll(tt.name, " ", "-")
			pushed, err := Push(ctx, prefix, tt.tag, tt.res.Artifacts)
			if err != nil {
				t.Fatalf("Push: %v", err)
			}
			a := tt.res.Artifacts[0]
			wantRef := prefix + "/hello@" + a.Digest.String()
			if len(pushed) != 1 || pushed[0].Ref != wantRef {
				t.Fatalf("pushed %+v, want %s", pushed, wantRef)
			}
			refs := []string{pushed[0].Ref}
			if tt.tag != "" {
				if pushed[0].Tag != prefix+"/hello:"+tt.tag {
					t.Errorf("tag ref = %q", pushed[0].Tag)
				}
				refs = append(refs, pushed[0].Tag)
			}
			for _, r := range refs {
				ref, err := name.ParseReference(r)
				if err != nil {
					t.Fatal(err)
				}
				desc, err := remote.Get(ref, remote.WithContext(ctx))
				if err != nil {
					t.Fatalf("pull %s: %v", r, err)
				}
				if desc.Digest != a.Digest {
					t.Errorf("pulled %s: digest %s, pushed %s", r, desc.Digest, a.Digest)
				}
				if a.Index != nil {
					idx, err := desc.ImageIndex()
					if err != nil {
						t.Fatal(err)
					}
					if d, err := idx.Digest(); err != nil || d != a.Digest {
						t.Errorf("pulled index digest %s, %v", d, err)
					}
					continue
				}
				img, err := desc.Image()
				if err != nil {
					t.Fatal(err)
				}
				// Every blob came through: the layer's digest as pulled
				// matches the built one.
				pl, err := img.Layers()
				if err != nil {
					t.Fatal(err)
				}
				bl, _ := a.Image.Layers()
				pd, _ := pl[0].Digest()
				bd, _ := bl[0].Digest()
				if pd != bd {
					t.Errorf("layer %s pulled, %s built", pd, bd)
				}
			}
		})
	}
}

func TestPushUnreachable(t *testing.T) {
	host := newRegistry(t)
	// A listener that is closed: connection refused on loopback.
	srv := httptest.NewServer(nil)
	dead := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	res, _ := buildTiny(t, tinyModule(t))
	if _, err := Push(context.Background(), dead, "", res.Artifacts); err == nil {
		t.Fatal("push to a closed port: no error")
	}
	if _, err := Push(context.Background(), "", "", res.Artifacts); err == nil {
		t.Fatal("push to an empty registry: no error")
	}
	if _, err := Push(context.Background(), host, "not a tag!", res.Artifacts); err == nil {
		t.Fatal("push with an invalid tag: no error")
	}
}
