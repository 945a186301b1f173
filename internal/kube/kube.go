// Package kube builds the Kubernetes API client the harness programs
// (watchdog, churn, saver, the kickoff) share, from a kubeconfig file and
// context named on the command line.
package kube

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sortie-soak/sortie/internal/clock"
)

// DefaultTimeout bounds one API request. Callers also pass their own
// context, so a signal ends a request at once; this is the backstop for a
// server that accepts the connection and never answers.
const DefaultTimeout = 30 * time.Second

// NewClient returns a clientset for the kubeconfig at path (empty: the
// usual $KUBECONFIG / ~/.kube/config search, then the in-cluster service
// account) and the named context (empty: the file's current context).
// userAgent names the program in the API server's audit log.
func NewClient(path, context, userAgent string) (kubernetes.Interface, error) {
	cfg, err := Config(path, context, userAgent)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return cs, nil
}

// Config is the client configuration NewClient builds on: every request
// bounded by DefaultTimeout, and a rate limit fit for the harness.
func Config(path, context, userAgent string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = userAgent
	cfg.Timeout = DefaultTimeout
	// The programs make a handful of calls a minute, but a preflight asks
	// one access review per target; the client-side default (5 qps) would
	// make that crawl for no benefit.
	cfg.QPS = 20
	cfg.Burst = 40
	return cfg, nil
}

// Env is what a harness program takes from outside the process: how to
// reach the cluster and the time. Tests replace both.
type Env struct {
	// NewClient builds the API client from --kubeconfig and --context.
	NewClient func(kubeconfig, context string) (kubernetes.Interface, error)
	Clock     clock.Clock
}

// RealEnv is the environment of a binary: a client from the kubeconfig,
// named userAgent in the API server's audit log, and the wall clock.
func RealEnv(userAgent string) Env {
	return Env{
		NewClient: func(path, context string) (kubernetes.Interface, error) {
			return NewClient(path, context, userAgent)
		},
		Clock: clock.Real{},
	}
}

// EventTime is when an event was last seen, from whichever field its
// reporter set: lastTimestamp for the core shape, eventTime for the
// events.k8s.io one, firstTimestamp, else when it was made.
func EventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
