package saver

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// LogReader opens the log of one container of a pod. The saver reads every
// log through it: client-go's fake clientset answers GetLogs with a fixed
// body, so tests put a scripted reader here instead.
type LogReader interface {
	// Logs opens the whole log of container (the current instance, or the
	// one before the last restart when previous is true). A read error
	// before io.EOF means the log is not whole.
	Logs(ctx context.Context, namespace, pod, container string, previous bool) (io.ReadCloser, error)
}

// ClientLogs reads logs through the API server's pods/log subresource.
type ClientLogs struct {
	Client kubernetes.Interface
}

var _ LogReader = ClientLogs{}

// Logs streams the log from the API server.
func (c ClientLogs) Logs(ctx context.Context, namespace, pod, container string, previous bool) (io.ReadCloser, error) {
	rc, err := c.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: container,
		Previous:  previous,
	}).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("logs of pod/%s container %s: %w", pod, container, err)
	}
	return rc, nil
}
