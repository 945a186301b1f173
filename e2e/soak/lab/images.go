package lab

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sortie-soak/sortie/images"
)

// ImageTag is the tag of the lab's own images besides their digest.
const ImageTag = "lab"

// TargetBinary is the fixture target the lab deploys as its targets.
var TargetBinary = images.Binary{Name: "sortie-target", Package: "fixture/cmd/sortie-target"}

// PushBinary wraps one static binary in an image the way sortie's images
// are built (images.Image: an empty base, user 65532, no timestamps) and
// pushes it to the registry as <registry>/<name>:lab. It returns the
// reference by digest. The lab's images carry no CA bundle: they talk
// only to the cluster, whose CA comes with the service account token.
func PushBinary(ctx context.Context, registry, imgName, binary string) (string, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	img, err := images.Image(imgName, data, []byte{}, images.Platform{OS: "linux", Arch: "amd64"})
	if err != nil {
		return "", fmt.Errorf("image %s: %w", imgName, err)
	}
	tag, err := name.NewTag(registry+"/"+imgName+":"+ImageTag, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", tag, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Name() + "@" + d.String(), nil
}

// BuildTarget compiles the checkout's fixture target into dir, as sortie's
// images are compiled (images.GoBuild: static, reproducible flags).
func BuildTarget(ctx context.Context, o Options, dir string) (string, error) {
	bo := images.BuildOptions{ModuleDir: o.Source, Go: o.Go}
	p := images.Platform{OS: "linux", Arch: "amd64"}
	if err := images.GoBuild(ctx, bo, []images.Binary{TargetBinary}, p, dir); err != nil {
		return "", err
	}
	return filepath.Join(dir, TargetBinary.Name), nil
}

// PushSortieImages runs this checkout's `sortie-images build --push` to the
// registry, the lock written into the state directory (the checkout's own
// images.lock is left alone), and returns each image's reference by digest.
func PushSortieImages(ctx context.Context, o Options, x Exec) (map[string]string, error) {
	lock := o.Layout().Path("images.lock")
	out, err := x.Run(ctx, o.Go, "run", "-C", o.Source, "./images/cmd/sortie-images", "build",
		"--module", ".", "--push", o.Registry, "--out", "", "--lock", lock)
	if err != nil {
		return nil, fmt.Errorf("sortie-images build --push %s: %w\n%s", o.Registry, err, tail(out, 30))
	}
	refs := ParsePushed(string(out))
	if len(refs) == 0 {
		return nil, fmt.Errorf("sortie-images build --push %s pushed nothing:\n%s", o.Registry, tail(out, 30))
	}
	return refs, nil
}

// ParsePushed reads sortie-images' "PUSHED <name> <ref> [<tag ref>]" lines.
func ParsePushed(out string) map[string]string {
	refs := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == "PUSHED" {
			refs[f[1]] = f[2]
		}
	}
	return refs
}

// ChartValues returns Helm values over the chart's defaults that run the
// engine and driver images pushed to the lab's registry, by digest.
func ChartValues(refs map[string]string) ([]byte, error) {
	var b strings.Builder
	b.WriteString("# Written by soak lab up: the chart's images from the lab's registry.\nimages:\n")
	keys := map[string]string{}
	for _, bin := range images.Binaries {
		if bin.ValuesKey != "" {
			keys[bin.ValuesKey] = bin.Name
		}
	}
	var vk []string
	for k := range keys {
		vk = append(vk, k)
	}
	sort.Strings(vk)
	for _, k := range vk {
		ref, ok := refs[keys[k]]
		if !ok {
			return nil, fmt.Errorf("chart values: image %s was not pushed", keys[k])
		}
		repo, digest, ok := strings.Cut(ref, "@")
		if !ok {
			return nil, fmt.Errorf("chart values: %s is not a reference by digest", ref)
		}
		fmt.Fprintf(&b, "  %s:\n    repository: %s\n    digest: %q\n", k, repo, digest)
	}
	return []byte(b.String()), nil
}
