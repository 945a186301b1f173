package saver

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sortie-soak/sortie/internal/kube"
)

// userAgent names the saver in the API server's audit log.
const userAgent = "sortie-save"

// clients builds the saver's API clients from a kubeconfig the way kubectl
// finds it. The first makes every call but pod logs, each request bounded
// by kube.DefaultTimeout (an API server that takes the connection and never
// answers must not hold the saver). The second reads pod logs, which stream
// for as long as the log is: one request's bound would cut an engine's log
// of an 8-hour run, so a log read is bounded by its step's context instead
// (Save runs every step on a bounded context).
func clients(kubeconfig, context string) (kubernetes.Interface, LogReader, error) {
	cfg, err := kube.Config(kubeconfig, context, userAgent)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	lcfg := rest.CopyConfig(cfg)
	lcfg.Timeout = 0
	lcs, err := kubernetes.NewForConfig(lcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, ClientLogs{Client: lcs}, nil
}
