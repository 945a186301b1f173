package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The non-root user and group every image runs as (the number distroless
// images use, so volume ownership and PodSecurity settings carry over).
const (
	UID      = 65532
	GID      = 65532
	UserName = "nonroot"
)

// BinDir is where an image holds its binary.
const BinDir = "/usr/local/bin"

// CACertsPath is where an image holds its CA bundle (Go's crypto/x509 looks
// there first on Linux; SSL_CERT_FILE names it as well).
const CACertsPath = "/etc/ssl/certs/ca-certificates.crt"

// epoch is the only timestamp an image holds: layer file times, the config's
// created and its history entry.
var epoch = time.Unix(0, 0).UTC()

// Files are the contents of an image besides its binary.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

// entry is one file or directory of the layer.
type entry struct {
	name     string // relative, no leading slash; directories end in "/"
	mode     int64
	uid, gid int
	data     []byte // nil for a directory
}

// LayerTar returns the uncompressed tar of an image's only layer: the
// binary at /usr/local/bin/<name>, the CA bundle, /etc/passwd and
// /etc/group with the non-root user, its home and /tmp. Entries are sorted
// by path (a directory before its contents), owned by root except the
// user's home, with fixed modes, empty user and group names and the Unix
// epoch as every time, so equal inputs give equal bytes.
func LayerTar(name string, binary, caCerts []byte) ([]byte, error) {
	if name == "" || bytes.ContainsAny([]byte(name), "/\x00") {
		return nil, fmt.Errorf("binary name %q: want a plain file name", name)
	}
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: caCerts},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: "usr/local/bin/" + name, mode: 0o755, data: binary},
	}
	// The list above is written sorted; sorting again keeps it so when an
	// entry is added out of place.
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: epoch,
			// USTAR holds everything above and nothing else: no PAX records
			// with access or change times, no user names.
			Format: tar.FormatUSTAR,
		}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return buf.Bytes(), nil
}

// gzipBytes compresses b with a gzip header that holds no name and no time
// (Go's writer always writes the same OS byte), so equal input gives equal
// output with the same Go release. The default level: the best one is three
// times slower on these binaries for under 1 % less.
func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	zw.ModTime = time.Time{}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Image returns the OCI image of one binary for one platform: an empty
// base, the single layer of LayerTar, and a config that runs the binary as
// 65532:65532 with every timestamp at the Unix epoch.
func Image(name string, binary, caCerts []byte, p Platform) (v1.Image, error) {
	raw, err := LayerTar(name, binary, caCerts)
	if err != nil {
		return nil, err
	}
	gz, err := gzipBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("compress layer of %s: %w", name, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer of %s: %w", name, err)
	}

	cfg := &v1.ConfigFile{
		Created:      v1.Time{Time: epoch},
		OS:           p.OS,
		Architecture: p.Arch,
		Config: v1.Config{
			Entrypoint: []string{BinDir + "/" + name},
			User:       fmt.Sprintf("%d:%d", UID, GID),
			WorkingDir: "/",
			Env: []string{
				"PATH=" + BinDir,
				"SSL_CERT_FILE=" + CACertsPath,
			},
			Labels: map[string]string{
				"org.opencontainers.image.title":  name,
				"org.opencontainers.image.source": "https://github.com/sortie-soak/sortie",
			},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	if p.Arch == "arm64" {
		cfg.Variant = "v8"
	}
	// The config goes on the empty base first; Append then adds the layer's
	// diff ID and history entry to it.
	base, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "sortie-images: " + BinDir + "/" + name,
			Comment:   "static binary, CA certificates, non-root user " + UserName,
		},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return img, nil
}

// Artifact is a built image: one platform's image, or an index over
// several platforms' images.
type Artifact struct {
	Name   string
	Image  v1.Image      // set when one platform was built
	Index  v1.ImageIndex // set when several were
	Digest v1.Hash
}

// NewArtifact wraps one image per platform: the image itself when there is
// one, else an OCI index listing each with its platform.
func NewArtifact(name string, imgs []v1.Image, platforms []Platform) (Artifact, error) {
	if len(imgs) == 0 || len(imgs) != len(platforms) {
		return Artifact{}, fmt.Errorf("image %s: %d images for %d platforms", name, len(imgs), len(platforms))
	}
	a := Artifact{Name: name}
	if len(imgs) == 1 {
		a.Image = imgs[0]
		d, err := imgs[0].Digest()
		if err != nil {
			return Artifact{}, fmt.Errorf("digest of %s: %w", name, err)
		}
		a.Digest = d
		return a, nil
	}
	adds := make([]mutate.IndexAddendum, len(imgs))
	for i, img := range imgs {
		p := platforms[i]
		vp := &v1.Platform{OS: p.OS, Architecture: p.Arch}
		if p.Arch == "arm64" {
			vp.Variant = "v8"
		}
		adds[i] = mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: vp}}
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	d, err := idx.Digest()
	if err != nil {
		return Artifact{}, fmt.Errorf("digest of %s: %w", name, err)
	}
	a.Index = idx
	a.Digest = d
	return a, nil
}
