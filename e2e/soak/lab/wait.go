package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/clock"
)

// pollInterval is how often a readiness wait looks again.
const pollInterval = 200 * time.Millisecond

// TimeoutError is a readiness wait that ran out of time.
type TimeoutError struct {
	What  string
	After time.Duration
	// Last is the last reason the condition gave for not being met.
	Last error
}

func (e *TimeoutError) Error() string {
	if e.Last != nil {
		return fmt.Sprintf("%s: not ready after %s: %v", e.What, e.After, e.Last)
	}
	return fmt.Sprintf("%s: not ready after %s", e.What, e.After)
}

func (e *TimeoutError) Unwrap() error { return e.Last }

// Cond says whether what a wait waits for is there; the error says why not.
type Cond func(ctx context.Context) error

// WaitFor polls cond until it returns nil, ctx ends or timeout passes on
// clk. It returns how long it waited.
func WaitFor(ctx context.Context, clk clock.Clock, what string, timeout time.Duration, cond Cond) (time.Duration, error) {
	t0 := clk.Now()
	for {
		last := cond(ctx)
		if last == nil {
			return clk.Now().Sub(t0), nil
		}
		if clk.Now().Sub(t0) >= timeout {
			return clk.Now().Sub(t0), &TimeoutError{What: what, After: timeout, Last: last}
		}
		if err := clk.Sleep(ctx, pollInterval); err != nil {
			return clk.Now().Sub(t0), fmt.Errorf("%s: %w", what, err)
		}
	}
}

// Alive wraps cond so that a wait ends at once when the process that is
// to become ready has died, naming its log.
func Alive(l Layout, name string, cond Cond) Cond {
	return func(ctx context.Context) error {
		if p, err := readPidFile(l, name); err == nil && !p.alive() {
			return &DiedError{Name: name, Log: LogPath(l, name)}
		}
		return cond(ctx)
	}
}

// DiedError is a lab process that exited while the lab waited for it.
type DiedError struct{ Name, Log string }

func (e *DiedError) Error() string {
	return fmt.Sprintf("%s exited; its log: %s", e.Name, e.Log)
}

// HTTPOK is met when url answers 200.
func HTTPOK(url string) Cond {
	c := &http.Client{Timeout: 2 * time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// SocketAccepts is met when the unix socket at path accepts a connection.
func SocketAccepts(path string) Cond {
	return func(ctx context.Context) error {
		if _, err := os.Stat(path); err != nil {
			return err
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// APIReady is met when the API server's /readyz answers ok.
func APIReady(cs kubernetes.Interface) Cond {
	return func(ctx context.Context) error {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %w: %s", err, body)
		}
		return nil
	}
}

// NodeReady is met when node name has the condition Ready=True.
func NodeReady(cs kubernetes.Interface, name string) Cond {
	return func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: Ready=%s: %s", name, c.Status, c.Message)
			}
		}
		return fmt.Errorf("node %s: no Ready condition yet", name)
	}
}

// DeploymentAvailable is met when every replica of the Deployment's latest
// generation is updated and available.
func DeploymentAvailable(cs kubernetes.Interface, ns, name string) Cond {
	return func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return deploymentDone(d)
	}
}

func deploymentDone(d *appsv1.Deployment) error {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	if s.ObservedGeneration < d.Generation || s.UpdatedReplicas < want || s.AvailableReplicas < want {
		return fmt.Errorf("deployment %s/%s: %d of %d updated, %d available", d.Namespace, d.Name, s.UpdatedReplicas, want, s.AvailableReplicas)
	}
	return nil
}

// ServiceAccountExists is met when the namespace's service account exists
// (the controller manager makes "default"; pods cannot be admitted before).
func ServiceAccountExists(cs kubernetes.Interface, ns, name string) Cond {
	return func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	}
}

// ChainJumped holds when the filter table's built-in chain from jumps to
// chain: a rule set someone else writes is in place.
func ChainJumped(x Exec, from, chain string) Cond {
	return func(ctx context.Context) error {
		out, err := x.Run(ctx, "iptables", "-w", "-t", "filter", "-S", from)
		if err != nil {
			return fmt.Errorf("iptables -S %s: %w", from, err)
		}
		if !jumpsTo(string(out), chain) {
			return fmt.Errorf("no jump from %s to %s yet", from, chain)
		}
		return nil
	}
}

// jumpsTo reports whether a line of `iptables -S` output jumps to chain.
func jumpsTo(listing, chain string) bool {
	for _, line := range strings.Split(listing, "\n") {
		f := SplitRule(line)
		for i := 0; i+1 < len(f); i++ {
			if (f[i] == "-j" || f[i] == "-g") && f[i+1] == chain {
				return true
			}
		}
	}
	return false
}
