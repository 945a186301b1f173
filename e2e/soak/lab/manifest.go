package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// Manifest describes a lab that is up: what a user or a test needs to run
// `soak run` against it. `up` writes it last, at Layout.Manifest.
type Manifest struct {
	// Kubeconfig is the admin kubeconfig; Context its context.
	Kubeconfig string `json:"kubeconfig"`
	Context    string `json:"context"`
	// Nodes are the node names.
	Nodes []string `json:"nodes"`
	// Registry is the loopback registry.
	Registry string `json:"registry"`
	// Images maps each pushed image's name to its reference by digest.
	Images map[string]string `json:"images"`
	// Values is the Helm values file that runs the pushed engine and driver
	// images (empty when up ran with --images=false).
	Values string `json:"values,omitempty"`
	// Targets is the targets file of the fixture targets.
	Targets string `json:"targets"`
	// Namespace is the namespace for `soak run --namespace`.
	Namespace string `json:"namespace"`
	// Up is when `up` finished.
	Up time.Time `json:"up"`
}

// ManifestFile is the manifest's name in the state directory.
const ManifestFile = "lab.json"

// WriteManifest writes m at l's manifest path.
func WriteManifest(l Layout, m Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return record.WriteFile(l.Manifest(), append(data, '\n'), 0o644)
}

// ReadManifest reads the manifest of the lab whose state directory is dir.
func ReadManifest(dir string) (Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
