package kickoff

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/render"
)

// TestActionHelm drives the Helm SDK layer through Helm's own actions,
// with the release history in memory and a Kubernetes client that only
// prints: the embedded chart takes the kickoff's values for the engines
// alone, then for the run, and the release goes away with uninstall.
func TestActionHelm(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(chart.RenderKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := *chartutil.DefaultCapabilities
	caps.KubeVersion = *kv
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: &caps,
		Log:          func(string, ...any) {},
	}
	h := cluster.NewHelmWith(func(string) (*action.Configuration, error) { return cfg, nil })
	ctx := context.Background()

	k := &kickoff{o: DefaultRunOptions(), base: map[string]any{}, pvc: "soak-sortie-report", names: chart.NamesFor("soak"),
		reportName: "e2e-20310304T100000Z.json", streamName: "e2e-20310304T100000Z.jsonl",
		targets: []render.Target{{Name: "svc-1", URL: "http://svc-1.aether-test.mesh:18081/", Weight: 1}}, statsdAddr: "10.96.0.10:9125"}
	if _, err := h.Status(ctx, "soak", "sortie"); !errors.Is(err, cluster.ErrNoRelease) {
		t.Fatalf("status before install: %v, want ErrNoRelease", err)
	}
	if err := h.Install(ctx, "soak", "sortie", k.values(false, "")); err != nil {
		t.Fatal(err)
	}
	rel, err := cfg.Releases.Last("soak")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rel.Manifest, "kind: Job") || !strings.Contains(rel.Manifest, "kind: DaemonSet") ||
		!strings.Contains(rel.Manifest, "priorityClassName: sortie-soak") ||
		!strings.Contains(rel.Manifest, "- --allow-targets\n            - \"svc-1.aether-test.mesh,10.96.0.10\"") ||
		!strings.Contains(rel.Manifest, "secretName: soak-sortie-tls") {
		t.Errorf("engines-only manifest:\n%s", rel.Manifest)
	}
	if st, err := h.Status(ctx, "soak", "sortie"); err != nil || st != "deployed" {
		t.Errorf("status after install: %q, %v", st, err)
	}

	plan := "version: v1\npools:\n  - {name: nodes, dns: \"soak-sortie-engine-nodes.sortie.svc.cluster.local:8443\"}\n"
	if err := h.Upgrade(ctx, "soak", "sortie", k.values(true, plan)); err != nil {
		t.Fatal(err)
	}
	rel, err = cfg.Releases.Last("soak")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: Job", "name: " + chart.PlanConfigMapName("soak", plan), "claimName: soak-sortie-report",
		"/report/e2e-20310304T100000Z.json", "/report/e2e-20310304T100000Z.jsonl"} {
		if !strings.Contains(rel.Manifest, want) {
			t.Errorf("run manifest lacks %q", want)
		}
	}
	// The kickoff's PVC, not one of the chart's.
	if strings.Contains(rel.Manifest, "kind: PersistentVolumeClaim") {
		t.Errorf("the release makes its own PVC:\n%s", rel.Manifest)
	}
	if rel.Version != 2 {
		t.Errorf("revision %d, want 2", rel.Version)
	}

	if err := h.Uninstall(ctx, "soak", "sortie"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Status(ctx, "soak", "sortie"); !errors.Is(err, cluster.ErrNoRelease) {
		t.Errorf("status after uninstall: %v, want ErrNoRelease", err)
	}
	if err := h.Uninstall(ctx, "soak", "sortie"); err == nil {
		t.Error("a second uninstall succeeded")
	}
}
