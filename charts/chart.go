// Package chart carries sortie's Helm chart (the directory sortie/ next to
// this file) inside every binary that imports it, and loads and renders it
// with the Helm SDK, so the kickoff installs exactly the chart it was built
// with and tests render it without a cluster.
//
// The object names the chart gives a release are fixed by the release name
// alone; Names and PlanConfigMapName compute them for programs that look the
// objects up, and the chart's tests hold the two to each other.
package chart

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// files is the chart directory. "all:" keeps .helmignore, which Helm reads.
//
//go:embed all:sortie
var files embed.FS

// ChartName is the chart's name (Chart.yaml name) and its directory here.
const ChartName = "sortie"

// RenderKubeVersion is the Kubernetes version Render reports to the
// templates (.Capabilities.KubeVersion) when no cluster is asked. Helm's
// library default is older than the chart's kubeVersion floor (1.27, for
// gRPC readiness probes).
const RenderKubeVersion = "v1.30.0"

// The fixed parts of what the chart renders.
const (
	// EnginePort is the engines' gRPC port, on the pods and the Service.
	EnginePort = 8443
	// EngineHealthPort serves the engines' gRPC health alone, in
	// plaintext, for the kubelet's readiness probe.
	EngineHealthPort = 8444
	// TLSDir is where engine and driver pods mount the run's TLS files
	// (tls.enabled).
	TLSDir = "/tls"
	// EngineContainer and DriverContainer name the containers of the
	// engine pods and of the driver pod.
	EngineContainer = "engine"
	DriverContainer = "driver"
	// BackendNameEnv is the engine container's variable that carries its
	// backend name from the downward API (engine.backendNameFrom).
	BackendNameEnv = "SORTIE_BACKEND_NAME"
	// PlanPath is where the driver reads the plan.
	PlanPath = "/plan/plan.yaml"
	// ReportDir is where the driver pod mounts the report volume;
	// report.path and report.stream are relative to it.
	ReportDir = "/report"
	// MaxReleaseNameLen is the longest release name the chart takes, so
	// that <release>-sortie-engine-nodes is a valid Service name.
	MaxReleaseNameLen = 43
)

// Names are the names of the objects the chart makes for one release.
type Names struct {
	// EngineWorkload is the engines' DaemonSet or Deployment.
	EngineWorkload string
	// EngineService is the headless Service listing ready engines; a
	// plan's dns pool is <EngineService>.<namespace>.svc.cluster.local:8443.
	EngineService string
	// NetworkPolicy admits the driver to the engines' gRPC port.
	NetworkPolicy string
	// Job is the driver's Job.
	Job string
	// ReportClaim is the report PVC the chart creates when report.volume
	// is empty.
	ReportClaim string
	// TLSSecret is the Secret of the run's CA and certificates the pods
	// mount when tls.enabled is true and tls.secretName is empty; the
	// kickoff creates it.
	TLSSecret string
	// ServiceAccount is the ServiceAccount the chart creates when
	// serviceAccount.create is true and serviceAccount.name is empty.
	ServiceAccount string
	// EngineSelector and DriverSelector are label selectors of the engine
	// pods and of the driver pod.
	EngineSelector string
	DriverSelector string
}

// NamesFor returns the object names of release.
func NamesFor(release string) Names {
	base := release + "-sortie"
	return Names{
		EngineWorkload: base + "-engine",
		EngineService:  base + "-engine-nodes",
		NetworkPolicy:  base + "-engine",
		Job:            base + "-driver",
		ReportClaim:    base + "-report",
		TLSSecret:      base + "-tls",
		ServiceAccount: base,
		EngineSelector: selector(release, "engine"),
		DriverSelector: selector(release, "driver"),
	}
}

func selector(release, component string) string {
	return "app.kubernetes.io/component=" + component +
		",app.kubernetes.io/instance=" + release +
		",app.kubernetes.io/name=sortie"
}

// PlanConfigMapName is the name of the ConfigMap that holds plan for
// release: <release>-sortie-plan-<first 10 hex digits of sha256(plan)>.
func PlanConfigMapName(release, plan string) string {
	sum := sha256.Sum256([]byte(plan))
	return release + "-sortie-plan-" + hex.EncodeToString(sum[:])[:10]
}

// Load returns the embedded chart.
func Load() (*helmchart.Chart, error) {
	var bufs []*loader.BufferedFile
	err := fs.WalkDir(files, ChartName, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		bufs = append(bufs, &loader.BufferedFile{Name: strings.TrimPrefix(p, ChartName+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read embedded chart: %w", err)
	}
	c, err := loader.LoadFiles(bufs)
	if err != nil {
		return nil, fmt.Errorf("load embedded chart: %w", err)
	}
	return c, nil
}

// sourceRE matches the "# Source: <path>" line Helm puts before every
// rendered document of a release manifest.
var sourceRE = regexp.MustCompile(`(?m)^# Source: (.+)$`)

// Render renders the embedded chart as a client-only dry-run install of
// release into namespace (no cluster is contacted), with values over the
// chart's defaults. Values are checked against values.schema.json and the
// templates' own checks first; a refusal is an error that names the value.
//
// The result maps each template's path (sortie/templates/engine.yaml) to
// the YAML it rendered; templates that rendered nothing are left out, and
// so are NOTES.txt and partials.
func Render(values map[string]any, releaseName, namespace string) (map[string]string, error) {
	c, err := Load()
	if err != nil {
		return nil, err
	}
	kv, err := chartutil.ParseKubeVersion(RenderKubeVersion)
	if err != nil {
		return nil, fmt.Errorf("parse kube version %s: %w", RenderKubeVersion, err)
	}
	if values == nil {
		values = map[string]any{}
	}
	// A fresh Configuration per call: Install fills it with client-only
	// fakes, and callers may render concurrently.
	cfg := &action.Configuration{Log: func(string, ...any) {}}
	install := action.NewInstall(cfg)
	install.ClientOnly = true
	install.DryRun = true
	install.DryRunOption = "client"
	install.ReleaseName = releaseName
	install.Namespace = namespace
	install.KubeVersion = kv
	install.DisableHooks = true
	rel, err := install.Run(c, values)
	if err != nil {
		return nil, fmt.Errorf("render chart %s as release %s: %w", ChartName, releaseName, err)
	}
	return splitManifest(rel.Manifest)
}

// splitManifest splits a release manifest at its "# Source:" lines. Two
// documents from one template are joined with a "---" line.
func splitManifest(manifest string) (map[string]string, error) {
	out := map[string]string{}
	locs := sourceRE.FindAllStringSubmatchIndex(manifest, -1)
	if len(locs) == 0 && strings.TrimSpace(manifest) != "" {
		return nil, errors.New("rendered manifest has no \"# Source:\" lines")
	}
	for i, loc := range locs {
		end := len(manifest)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		name := manifest[loc[2]:loc[3]]
		body := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(manifest[loc[1]:end]), "---"))
		if body == "" {
			continue
		}
		if prev, ok := out[name]; ok {
			body = prev + "---\n" + body
		}
		out[name] = body + "\n"
	}
	return out, nil
}

// Paths returns the keys of a Render result in a stable order.
func Paths(manifests map[string]string) []string {
	keys := make([]string, 0, len(manifests))
	for k := range manifests {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Join returns every manifest of a Render result as one multi-document YAML
// stream in Paths order, each led by its "# Source:" line, as `helm
// template` prints it.
func Join(manifests map[string]string) string {
	var b strings.Builder
	for _, p := range Paths(manifests) {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s", path.Clean(p), manifests[p])
	}
	return b.String()
}
