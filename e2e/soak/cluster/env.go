// Package cluster is what `soak run` (package kickoff) and `soak teardown`
// (package teardown) share: how they reach a cluster and Helm (Env, the
// Helm layer), the provenance check the kickoff's pre-flight calls through
// Env, and the run directory's run.env, which the kickoff writes and the
// teardown reads. It holds no job of its own.
package cluster

import (
	"context"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/internal/kube"
	"github.com/sortie-soak/sortie/provenance"
	"github.com/sortie-soak/sortie/saver"
)

// RunEnvFile is the run directory's record of a run's cluster, namespace,
// release and objects: the kickoff writes it, the teardown reads it.
const RunEnvFile = "run.env"

// Env is what `soak run` and `soak teardown` take from outside the
// process: how to reach the cluster and Helm, the time, and the provenance
// check. Tests replace all of them.
type Env struct {
	// NewClient builds the API client of one component of the run
	// (kickoff, saver, watchdog, churn).
	NewClient func(kubeconfig, context, component string) (kubernetes.Interface, error)
	// NewHelm builds the Helm layer.
	NewHelm func(kubeconfig, context string) (Helm, error)
	Clock   clock.Clock
	// ComponentClock is the clock of the saver, the watchdog and the churn
	// driver; nil means Clock. Tests move it apart from the kickoff's, so
	// the kickoff's own steps stay in a fixed order while they run.
	ComponentClock clock.Clock
	// Provenance checks the release's images and the chart.
	Provenance ProvenanceFunc
	// SaverLogs reads pod logs for the saver; nil reads them through the
	// saver's client.
	SaverLogs saver.LogReader
}

// RealEnv is the environment of the soak binary.
func RealEnv() Env {
	return Env{
		NewClient: func(path, context, component string) (kubernetes.Interface, error) {
			return kube.NewClient(path, context, "soak-"+component)
		},
		NewHelm: func(path, context string) (Helm, error) {
			return NewHelm(path, context), nil
		},
		Clock:      clock.Real{},
		Provenance: CheckProvenance,
	}
}

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

// OneLine flattens an error message to one line.
func OneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
