package provenance

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chartFiles is a small chart, enough to show what the digest covers.
var chartFiles = map[string]string{
	"Chart.yaml":                  "apiVersion: v2\nname: sortie\nversion: 0.1.0\n",
	"values.yaml":                 "images: {}\n",
	"templates/engine.yaml":       "kind: DaemonSet\n",
	"templates/engine-nodes.yaml": "kind: Service\n",
	"templates-x/a.yaml":          "sorted by whole path, not walk order\n",
}

func writeChart(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sortie")
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sha256sumListing is the documented definition, computed independently:
// `sha256sum` lines of the files sorted by path, then their sha256.
func sha256sumListing(files map[string]string) string {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	// Byte order, as LC_ALL=C sort.
	for i := range paths {
		for j := i + 1; j < len(paths); j++ {
			if paths[j] < paths[i] {
				paths[i], paths[j] = paths[j], paths[i]
			}
		}
	}
	var listing strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&listing, "%x  %s\n", sha256.Sum256([]byte(files[p])), p)
	}
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(listing.String())))
}

func TestChartDirDigest(t *testing.T) {
	dir := writeChart(t, chartFiles)
	got, err := ChartDirDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256sumListing(chartFiles); got != want {
		t.Errorf("ChartDirDigest = %s, want %s", got, want)
	}
	// The same content elsewhere has the same digest.
	if again, _ := ChartDirDigest(writeChart(t, chartFiles)); again != got {
		t.Errorf("same content, another directory: %s, want %s", again, got)
	}

	changes := map[string]func(map[string]string){
		"a byte of a file": func(m map[string]string) { m["values.yaml"] = "images: {} \n" },
		"a renamed file": func(m map[string]string) {
			m["templates/driver.yaml"] = m["templates/engine.yaml"]
			delete(m, "templates/engine.yaml")
		},
		"an added file": func(m map[string]string) { m[".helmignore"] = "" },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range chartFiles {
				files[k] = v
			}
			change(files)
			d, err := ChartDirDigest(writeChart(t, files))
			if err != nil {
				t.Fatal(err)
			}
			if d == got {
				t.Errorf("digest unchanged by %s", name)
			}
		})
	}

	t.Run("symlink refused", func(t *testing.T) {
		dir := writeChart(t, chartFiles)
		if err := os.Symlink("values.yaml", filepath.Join(dir, "link.yaml")); err != nil {
			t.Fatal(err)
		}
		if _, err := ChartDirDigest(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ChartDirDigest with a symlink: %v", err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		if _, err := ChartDirDigest(filepath.Join(dir, "Chart.yaml")); err == nil {
			t.Error("ChartDirDigest of a file: no error")
		}
	})
}

func TestCheckLocalChart(t *testing.T) {
	dir := writeChart(t, chartFiles)
	want := sha256sumListing(chartFiles)
	image := "ghcr.io/sortie-soak/sortie-engine@sha256:" + strings.Repeat("e", 64)

	res, err := Check(context.Background(), []string{image}, Options{Chart: dir, ChartDigest: want})
	if err != nil {
		t.Fatalf("Check with the right digest: %v", err)
	}
	if got := res.Lines(); got[1] != "PINNED chart "+dir+" "+want {
		t.Errorf("Lines = %q", got)
	}

	_, err = Check(context.Background(), []string{image}, Options{Chart: dir, ChartDigest: "sha256:" + strings.Repeat("0", 64)})
	if !errors.Is(err, ErrChartDigest) || !strings.Contains(err.Error(), "content is "+want) {
		t.Errorf("Check with another digest: %v, want ErrChartDigest giving the content digest", err)
	}

	_, err = Check(context.Background(), []string{image}, Options{Chart: dir})
	if !errors.Is(err, ErrTag) || !strings.Contains(err.Error(), "chart "+dir) {
		t.Errorf("Check of a chart without an expected digest: %v, want ErrTag naming it", err)
	}

	_, err = Check(context.Background(), []string{image}, Options{Chart: filepath.Join(dir, "none"), ChartDigest: want})
	if !errors.Is(err, ErrChartDigest) {
		t.Errorf("Check of a missing chart directory: %v, want ErrChartDigest", err)
	}

	// Nothing but a chart: refused, a release always runs images.
	_, err = Check(context.Background(), nil, Options{Chart: dir, ChartDigest: want})
	if !errors.Is(err, ErrNothingToCheck) {
		t.Errorf("Check of no image: %v, want ErrNothingToCheck", err)
	}
}
