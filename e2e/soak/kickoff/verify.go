package kickoff

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/record"
)

// chartDir is where the run directory keeps the chart the run installs.
const chartDir = "chart"

// writeEmbeddedChart writes the chart embedded in this binary (the one the
// kickoff installs) under dir/chart/sortie, so the run directory records
// exactly what was installed and the provenance check hashes it from disk.
// It returns the directory and the content digest of the chart as it is in
// memory (the digest provenance.ChartDirDigest gives for the chart's source
// directory).
func writeEmbeddedChart(dir string) (path, digest string, err error) {
	c, err := chart.Load()
	if err != nil {
		return "", "", err
	}
	root := filepath.Join(dir, chartDir, chart.ChartName)
	files := append(c.Raw[:0:0], c.Raw...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	sum := sha256.New()
	for _, f := range files {
		if strings.HasPrefix(f.Name, "/") || strings.Contains("/"+f.Name+"/", "/../") {
			return "", "", fmt.Errorf("embedded chart file %q: not a relative path", f.Name)
		}
		p := filepath.Join(root, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", "", err
		}
		if err := record.WriteFile(p, f.Data, 0o644); err != nil {
			return "", "", err
		}
		fmt.Fprintf(sum, "%x  %s\n", sha256.Sum256(f.Data), f.Name)
	}
	return root, fmt.Sprintf("sha256:%x", sum.Sum(nil)), nil
}
