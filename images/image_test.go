package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var amd64 = Platform{OS: "linux", Arch: "amd64"}

// tarEntry is what the tests read back of a tar header.
type tarEntry struct {
	Name     string
	Type     byte
	Mode     int64
	UID, GID int
	Size     int64
	Uname    string
	Gname    string
	ModTime  int64
	PAX      int
	Data     string
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 64 {
			data = data[:64]
		}
		out = append(out, tarEntry{
			Name: h.Name, Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, Size: h.Size,
			Uname: h.Uname, Gname: h.Gname, ModTime: h.ModTime.Unix(), PAX: len(h.PAXRecords), Data: string(data),
		})
	}
}

func TestLayerTar(t *testing.T) {
	raw, err := LayerTar("sortie-engine", []byte("BINARY"), []byte("CERTS"))
	if err != nil {
		t.Fatal(err)
	}
	dir := func(name string, mode int64) tarEntry {
		return tarEntry{Name: name, Type: tar.TypeDir, Mode: mode}
	}
	file := func(name string, mode int64, data string) tarEntry {
		e := tarEntry{Name: name, Type: tar.TypeReg, Mode: mode, Size: int64(len(data)), Data: data}
		if len(e.Data) > 64 { // readTar keeps the first 64 bytes
			e.Data = e.Data[:64]
		}
		return e
	}
	home := dir("home/nonroot/", 0o700)
	home.UID, home.GID = 65532, 65532
	want := []tarEntry{
		dir("etc/", 0o755),
		file("etc/group", 0o644, group),
		file("etc/passwd", 0o644, passwd),
		dir("etc/ssl/", 0o755),
		dir("etc/ssl/certs/", 0o755),
		file("etc/ssl/certs/ca-certificates.crt", 0o644, "CERTS"),
		dir("home/", 0o755),
		home,
		dir("tmp/", 0o1777),
		dir("usr/", 0o755),
		dir("usr/local/", 0o755),
		dir("usr/local/bin/", 0o755),
		file("usr/local/bin/sortie-engine", 0o755, "BINARY"),
	}
	if diff := cmp.Diff(want, readTar(t, bytes.NewReader(raw))); diff != "" {
		t.Errorf("layer (-want +got):\n%s", diff)
	}
	if !strings.Contains(passwd, "nonroot:x:65532:65532:") || !strings.Contains(group, "nonroot:x:65532:") {
		t.Error("passwd or group lacks the nonroot user 65532")
	}

	again, err := LayerTar("sortie-engine", []byte("BINARY"), []byte("CERTS"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, again) {
		t.Error("LayerTar differs between two calls with the same input")
	}
	for _, bad := range []string{"", "a/b", "x\x00"} {
		if _, err := LayerTar(bad, nil, nil); err == nil {
			t.Errorf("LayerTar(%q): no error", bad)
		}
	}
}

func digestOf(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestImageDigestDependsOnlyOnInputs: the same binary gives the same digest
// (compression, config and manifest hold no time or randomness); any other
// byte in the binary, the CA bundle, the name or the platform gives another.
func TestImageDigestDependsOnlyOnInputs(t *testing.T) {
	build := func(name, bin, ca string, p Platform) v1.Hash {
		img, err := Image(name, []byte(bin), []byte(ca), p)
		if err != nil {
			t.Fatal(err)
		}
		return digestOf(t, img)
	}
	base := build("sortie", "binary", "ca", amd64)
	if again := build("sortie", "binary", "ca", amd64); again != base {
		t.Fatalf("same inputs, two digests: %s and %s", base, again)
	}
	others := map[string]v1.Hash{
		"binary":   build("sortie", "binarY", "ca", amd64),
		"ca":       build("sortie", "binary", "CA", amd64),
		"name":     build("sortie-gate", "binary", "ca", amd64),
		"platform": build("sortie", "binary", "ca", Platform{OS: "linux", Arch: "arm64"}),
	}
	for what, d := range others {
		if d == base {
			t.Errorf("changing the %s left the digest at %s", what, d)
		}
	}
}

func TestImageConfig(t *testing.T) {
	img, err := Image("sortie-engine", []byte("BINARY"), []byte("CERTS"), amd64)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.User; got != "65532:65532" {
		t.Errorf("User = %q, want 65532:65532", got)
	}
	if diff := cmp.Diff([]string{"/usr/local/bin/sortie-engine"}, cf.Config.Entrypoint); diff != "" {
		t.Errorf("Entrypoint (-want +got):\n%s", diff)
	}
	if len(cf.Config.Cmd) != 0 {
		t.Errorf("Cmd = %q, want none (the chart passes arguments)", cf.Config.Cmd)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform = %s/%s", cf.OS, cf.Architecture)
	}
	if !cf.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("created = %v, want the Unix epoch", cf.Created.Time)
	}
	if len(cf.History) != 1 || !cf.History[0].Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("history = %+v, want one entry at the Unix epoch", cf.History)
	}
	if len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("diff_ids = %v, want one layer", cf.RootFS.DiffIDs)
	}

	// The raw config: no time but the epoch appears anywhere in it.
	raw, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(raw), "1970-01-01T00:00:00Z"); got != 2 {
		t.Errorf("config holds the epoch %d times, want 2 (created, history): %s", got, raw)
	}

	mt, err := img.MediaType()
	if err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type = %s, %v", mt, err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Errorf("manifest = %+v", m)
	}

	// The layer as the image holds it (compressed, then read back).
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, e := range readTar(t, rc) {
		if e.ModTime != 0 || e.PAX != 0 || e.Uname != "" || e.Gname != "" {
			t.Errorf("entry %s: mtime %d, %d PAX records, owner names %q/%q; want epoch, none, none", e.Name, e.ModTime, e.PAX, e.Uname, e.Gname)
		}
	}
}

func TestNewArtifactIndex(t *testing.T) {
	arm64 := Platform{OS: "linux", Arch: "arm64"}
	var imgs []v1.Image
	for _, p := range []Platform{amd64, arm64} {
		img, err := Image("sortie", []byte("bin-"+p.Arch), []byte("ca"), p)
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	a, err := NewArtifact("sortie", imgs, []Platform{amd64, arm64})
	if err != nil {
		t.Fatal(err)
	}
	if a.Index == nil || a.Image != nil {
		t.Fatal("two platforms should give an index")
	}
	im, err := a.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range im.Manifests {
		got = append(got, m.Platform.OS+"/"+m.Platform.Architecture+"/"+m.Platform.Variant)
	}
	if diff := cmp.Diff([]string{"linux/amd64/", "linux/arm64/v8"}, got); diff != "" {
		t.Errorf("index platforms (-want +got):\n%s", diff)
	}
	b, err := NewArtifact("sortie", imgs, []Platform{amd64, arm64})
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Errorf("index digest differs between two calls: %s, %s", a.Digest, b.Digest)
	}
	if _, err := NewArtifact("sortie", imgs, []Platform{amd64}); err == nil {
		t.Error("NewArtifact with 2 images for 1 platform: no error")
	}
}
