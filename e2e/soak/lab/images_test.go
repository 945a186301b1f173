package lab

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"gopkg.in/yaml.v3"
)

// TestPushBinary pushes an image to a real registry on loopback and reads
// it back by the digest PushBinary returned.
func TestPushBinary(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://")
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	ref, err := PushBinary(context.Background(), reg, "pause", bin)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ref, reg+"/pause@sha256:") {
		t.Fatalf("ref %q is not a digest reference in %s", ref, reg)
	}
	d, err := name.NewDigest(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(d)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || !strings.HasSuffix(cf.Config.Entrypoint[0], "/pause") {
		t.Errorf("config %+v: want user 65532 running the binary", cf.Config)
	}
	// The same binary gives the same digest (a sandbox image by digest in
	// containerd's config stays valid from one up to the next).
	again, err := PushBinary(context.Background(), reg, "pause", bin)
	if err != nil || again != ref {
		t.Errorf("second push %q, %v; want %q", again, err, ref)
	}
}

func TestParsePushedAndValues(t *testing.T) {
	out := "IMAGE sortie-engine sha256:aa\nPUSHED sortie-engine 127.0.0.1:5000/sortie-engine@sha256:" + strings.Repeat("a", 64) + "\n" +
		"PUSHED sortie 127.0.0.1:5000/sortie@sha256:" + strings.Repeat("b", 64) + " 127.0.0.1:5000/sortie:lab\n" +
		"LOCK x\n"
	refs := ParsePushed(out)
	if len(refs) != 2 {
		t.Fatalf("refs %v", refs)
	}
	values, err := ChartValues(refs)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Images map[string]struct{ Repository, Digest string }
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatalf("values do not parse: %v\n%s", err, values)
	}
	if e := v.Images["engine"]; e.Repository != "127.0.0.1:5000/sortie-engine" || e.Digest != "sha256:"+strings.Repeat("a", 64) {
		t.Errorf("engine values %+v", e)
	}
	if d := v.Images["driver"]; d.Repository != "127.0.0.1:5000/sortie" || d.Digest != "sha256:"+strings.Repeat("b", 64) {
		t.Errorf("driver values %+v", d)
	}
	delete(refs, "sortie")
	if _, err := ChartValues(refs); err == nil {
		t.Error("values without the driver image were written")
	}
}
