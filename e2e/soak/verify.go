package soak

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/provenance"
	"github.com/sortie-soak/sortie/record"
)

// ProvenanceRequest is what the pre-flight asks of the provenance check:
// every image the rendered release (and the saver's reader pod) would run,
// and the chart, checked by digest and, with Verify, by signature.
type ProvenanceRequest struct {
	// Images are the image references, sorted, each once.
	Images []string
	// Chart is the directory holding the chart the run installs (the
	// binary's embedded chart, written into the run directory), and
	// ChartDigest the content digest it must have.
	Chart, ChartDigest string
	// Verify requires a valid signature on each image: with Key (a cosign
	// public key file) or keyless with Identity and Issuer against the
	// Sigstore TrustedRoot file.
	Verify                        bool
	Key                           string
	Identity, Issuer, TrustedRoot string
}

// ProvenanceFunc checks a run's references. It returns the lines to print
// (one per reference, the last the summary, which says "provenance NOT
// VERIFIED" when signatures were not checked) and a non-nil error that
// names each refused reference and why.
type ProvenanceFunc func(ctx context.Context, req ProvenanceRequest) (lines []string, err error)

// CheckProvenance is the provenance check of package provenance: digests
// first (a tag is refused before anything else), the chart's content
// digest, then cosign signatures with Verify.
func CheckProvenance(ctx context.Context, req ProvenanceRequest) ([]string, error) {
	res, err := provenance.Check(ctx, req.Images, provenance.Options{
		Chart:       req.Chart,
		ChartDigest: req.ChartDigest,
		Verify:      req.Verify,
		Key:         req.Key,
		Identity:    req.Identity,
		Issuer:      req.Issuer,
		TrustedRoot: req.TrustedRoot,
	})
	if err != nil {
		return nil, err
	}
	return res.Lines(), nil
}

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
