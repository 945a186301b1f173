package kickoff

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sortie-soak/sortie/internal/helmvalues"
	"github.com/sortie-soak/sortie/internal/runca"
)

// tlsOn reports whether the release runs the engines' control plane over
// the run's mTLS: the chart's default, unless the --values file turns it
// off (tls.enabled: false, debugging only).
func (k *kickoff) tlsOn() bool {
	on, ok := helmvalues.Lookup(k.base, "tls.enabled").(bool)
	return !ok || on
}

// tlsSecretName is the Secret the release mounts: the --values file's
// tls.secretName, or the chart's R-sortie-tls.
func (k *kickoff) tlsSecretName() string {
	if name, ok := helmvalues.Lookup(k.base, "tls.secretName").(string); ok && name != "" {
		return name
	}
	return k.names.TLSSecret
}

// allowTargets is the engines' --allow-targets: the --values file's
// engine.allowTargets when it sets one, else the host of every target and
// the statsd address the run resolved.
func (k *kickoff) allowTargets() []any {
	if v, ok := helmvalues.Lookup(k.base, "engine.allowTargets").([]any); ok && len(v) > 0 {
		return v
	}
	seen := map[string]bool{}
	var hosts []any
	add := func(h string) {
		h = strings.ToLower(h)
		if h != "" && !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	for _, t := range k.targets {
		if u, err := url.Parse(t.URL); err == nil {
			add(u.Hostname())
		}
	}
	if host, _, err := net.SplitHostPort(k.statsdAddr); err == nil {
		add(host)
	}
	return hosts
}

// tlsValidity is how long the run's certificates are valid: the default,
// or the planned run and a day to resume and save it when that is longer.
func (k *kickoff) tlsValidity() time.Duration {
	return max(runca.DefaultValidity, k.o.PlannedDuration()+24*time.Hour)
}

// beforeEngines resolves the statsd address, which the engines'
// allowlist names, and makes the run's CA, which they mount.
func (k *kickoff) beforeEngines(ctx context.Context) error {
	var err error
	if k.statsdAddr, err = k.statsd(ctx); err != nil {
		return err
	}
	return k.createRunTLS(ctx)
}

// createRunTLS makes the run's CA and certificates and stores them in the
// release's Secret, before the engines are installed: a new CA for every
// run, so no certificate of an earlier run opens these engines. A Secret
// left by an earlier run of the release is replaced. The CA's key is kept
// nowhere.
func (k *kickoff) createRunTLS(ctx context.Context) error {
	name := k.tlsSecretName()
	if !k.tlsOn() {
		k.line("NOTE tls.enabled=false in --values: the engines' control plane runs in PLAINTEXT; anyone who reaches their port may command them")
		return nil
	}
	b, err := runca.New(runca.Options{
		Run: k.tag, Now: k.clk.Now(), Validity: k.tlsValidity(),
		EngineDNS: []string{fmt.Sprintf("%s.%s.svc.cluster.local", k.names.EngineService, k.o.Namespace)},
		EngineIPs: []net.IP{},
	})
	if err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: k.o.Namespace,
			Labels:    map[string]string{"app.kubernetes.io/part-of": "sortie", "app.kubernetes.io/instance": k.o.Release},
		},
		Type: corev1.SecretTypeOpaque,
		Data: b.Files(),
	}
	secrets := k.cs.CoreV1().Secrets(k.o.Namespace)
	how := "created"
	_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		how = "replaced (an earlier run's)"
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("secret/%s (the run's CA): %w", name, err)
	}
	k.step("secret/%s %s: the run's CA and its engine and driver certificates, valid %s", name, how, k.tlsValidity())
	return nil
}
