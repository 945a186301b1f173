package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	chart "github.com/sortie-soak/sortie/charts"
)

// Helm is the part of Helm the kickoff and teardown use: the release of the
// embedded sortie chart. The real one drives Helm's action package; tests
// put a fake here that records the calls.
type Helm interface {
	// Install installs the chart as release into namespace with values over
	// the chart's defaults. It does not wait for anything to be ready.
	Install(ctx context.Context, release, namespace string, values map[string]any) error
	// Upgrade replaces the release's values with values (over the chart's
	// defaults, not over the values of the last revision).
	Upgrade(ctx context.Context, release, namespace string, values map[string]any) error
	// Uninstall deletes the release and the objects it made.
	Uninstall(ctx context.Context, release, namespace string) error
	// Status returns the release's status ("deployed", "failed", ...), or
	// ErrNoRelease when the namespace holds no release of that name.
	Status(ctx context.Context, release, namespace string) (string, error)
}

// ErrNoRelease is Status's answer for a release that does not exist.
var ErrNoRelease = errors.New("no such release")

// HelmTimeout bounds one Helm operation against the cluster.
const HelmTimeout = 5 * time.Minute

// actionHelm is Helm through its Go SDK (helm.sh/helm/v3/pkg/action), with
// the release history kept in Secrets, as the helm command keeps it, so
// `helm status` and `helm uninstall` work on a kickoff's release too.
type actionHelm struct {
	// config returns the action configuration for one namespace.
	config func(namespace string) (*action.Configuration, error)
}

var _ Helm = (*actionHelm)(nil)

// NewHelm returns the Helm SDK implementation for the kubeconfig at path
// (empty: the default loading rules) and context.
func NewHelm(kubeconfig, kubeContext string) Helm {
	return &actionHelm{config: func(namespace string) (*action.Configuration, error) {
		flags := genericclioptions.NewConfigFlags(true)
		if kubeconfig != "" {
			flags.KubeConfig = &kubeconfig
		}
		if kubeContext != "" {
			flags.Context = &kubeContext
		}
		flags.Namespace = &namespace
		cfg := new(action.Configuration)
		if err := cfg.Init(flags, namespace, "secret", func(string, ...any) {}); err != nil {
			return nil, fmt.Errorf("helm configuration: %w", err)
		}
		return cfg, nil
	}}
}

// NewHelmWith returns the Helm SDK implementation over the action
// configuration config returns for a namespace. Tests give one whose
// release history is in memory and whose Kubernetes client only prints.
func NewHelmWith(config func(namespace string) (*action.Configuration, error)) Helm {
	return &actionHelm{config: config}
}

// load is what an install and an upgrade start from: the action
// configuration of namespace and the chart.
func (h *actionHelm) load(namespace string) (*action.Configuration, *helmchart.Chart, error) {
	cfg, err := h.config(namespace)
	if err != nil {
		return nil, nil, err
	}
	c, err := chart.Load()
	if err != nil {
		return nil, nil, err
	}
	return cfg, c, nil
}

func (h *actionHelm) Install(ctx context.Context, release, namespace string, values map[string]any) error {
	cfg, c, err := h.load(namespace)
	if err != nil {
		return err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName = release
	in.Namespace = namespace
	in.Timeout = HelmTimeout
	// The kickoff waits for the engines itself, with its own clock and its
	// own account of what is ready.
	in.Wait = false
	if _, err := in.RunWithContext(ctx, c, values); err != nil {
		return fmt.Errorf("helm install %s: %w", release, err)
	}
	return nil
}

func (h *actionHelm) Upgrade(ctx context.Context, release, namespace string, values map[string]any) error {
	cfg, c, err := h.load(namespace)
	if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = namespace
	up.Timeout = HelmTimeout
	// The kickoff passes every value it means each time: nothing is carried
	// over from the engines-only revision by accident.
	up.ResetValues = true
	up.MaxHistory = 10
	if _, err := up.RunWithContext(ctx, release, c, values); err != nil {
		return fmt.Errorf("helm upgrade %s: %w", release, err)
	}
	return nil
}

func (h *actionHelm) Uninstall(ctx context.Context, release, namespace string) error {
	cfg, err := h.config(namespace)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Timeout = HelmTimeout
	un.DeletionPropagation = "background"
	if _, err := un.Run(release); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", release, err)
	}
	return nil
}

func (h *actionHelm) Status(ctx context.Context, release, namespace string) (string, error) {
	cfg, err := h.config(namespace)
	if err != nil {
		return "", err
	}
	rel, err := action.NewStatus(cfg).Run(release)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return "", ErrNoRelease
	}
	if err != nil {
		return "", fmt.Errorf("helm status %s: %w", release, err)
	}
	if rel.Info == nil {
		return "unknown", nil
	}
	return rel.Info.Status.String(), nil
}
