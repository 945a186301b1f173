//go:build lab

package lab_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/e2e/soak/lab"
)

// probeTimeout is how long a probe pod's one connection attempt has: long
// enough for the enforcer to add a new pod to its sets on a loaded machine.
const probeTimeout = 20 * time.Second

// TestIntegrationLabNetworkPolicy holds the chart's NetworkPolicy to what
// it says, with the lab's enforcer: a 60 s run passes (its driver pod
// reached every engine through the policy), then, with the engines still
// up, two pods run the same plaintext gRPC health probe against every
// engine's gRPC port. The engines serve it with mTLS only, so the probe
// tells the two layers apart: the pod with the driver's labels gets
// through the policy (its connection is accepted, and the engine's TLS
// listener then closes it for want of a client certificate: "error
// reading server preface"); the pod without them is refused by the
// policy before any engine sees it ("connection refused"), and never gets
// that far.
func TestIntegrationLabNetworkPolicy(t *testing.T) {
	m := theLab(t)
	image := m.Images[lab.ProbeImage]
	if image == "" {
		t.Fatalf("the lab pushed no %s image: %v", lab.ProbeImage, m.Images)
	}
	cs := labClient(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	t.Cleanup(func() { teardown(t, run) })

	args := append(runArgs(m), "--duration", "60s", "--settle", "5s", "--watch-interval", "20s", "--dir", run)
	out, err := soakRun(t, ctx, filepath.Join(dir, "netpol.txt"), nil, args...)
	logVerdicts(t, out)
	if err != nil {
		t.Fatalf("soak run e2e under the NetworkPolicy: %v", err)
	}
	checkE2E(t, out, run, m.Nodes)
	release := runEnv(t, run).Get("RELEASE")
	checkPolicyEnforced(t, ctx, cs, m.Namespace, release, len(m.Nodes))

	var addrs []string
	for _, node := range m.Nodes {
		p := enginePod(t, ctx, cs, m.Namespace, node)
		addrs = append(addrs, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(enginePort)))
	}
	driverLabels := map[string]string{
		"app.kubernetes.io/name": "sortie", "app.kubernetes.io/instance": release, "app.kubernetes.io/component": "driver",
	}
	allowed := runProbe(t, ctx, cs, m.Namespace, image, "netpol-driver-", driverLabels, addrs)
	denied := runProbe(t, ctx, cs, m.Namespace, image, "netpol-other-", map[string]string{"app.kubernetes.io/name": "netpol-probe"}, addrs)
	const accepted = "error reading server preface" // TCP accepted, then closed by the TLS listener
	for _, a := range addrs {
		if l := probeLine(allowed.log, a); !strings.HasPrefix(l, "UNREACHED ") || !strings.Contains(l, accepted) {
			t.Errorf("a pod with the driver's labels did not get through the policy to the engine at %s (want its connection accepted, then refused by mTLS): %q\n%s", a, l, allowed.log)
		}
		if l := probeLine(denied.log, a); !strings.HasPrefix(l, "UNREACHED ") || strings.Contains(l, accepted) {
			t.Errorf("a pod without the driver's labels was not kept from the engine at %s by the policy: %q\n%s", a, l, denied.log)
		}
	}
	if allowed.exit != 1 || denied.exit != 1 {
		t.Errorf("probe exits: with the driver's labels %d, without %d (want 1 and 1: no plaintext call is served)", allowed.exit, denied.exit)
	}
	t.Logf("NETPOL driver-labelled pod %s: %s", allowed.pod, strings.Join(strings.Fields(allowed.log), " "))
	t.Logf("NETPOL unlabelled pod %s: %s", denied.pod, strings.Join(strings.Fields(denied.log), " "))
}

// checkPolicyEnforced: the chart installed its policy, and the enforcer
// sends every engine pod's ingress through it (kube-router's pod chains
// KUBE-POD-FW-* jump to the policy's with a comment that names it).
func checkPolicyEnforced(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, release string, engines int) {
	t.Helper()
	name := release + "-sortie-engine"
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's NetworkPolicy %s/%s: %v", ns, name, err)
	}
	out, err := exec.CommandContext(ctx, "iptables", "-w", "-t", "filter", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -S: %v: %s", err, out)
	}
	// Each selected pod's chain sends its traffic through the policy's.
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A KUBE-POD-FW-") && strings.Contains(l, `"run through nw policy `+name+`"`) {
			n++
		}
	}
	if n != engines {
		t.Fatalf("%d pod chains run through the policy %s, want one per engine (%d): the enforcer did not take it up", n, name, engines)
	}
	t.Logf("NETPOL policy %s/%s enforced on %d engine pods", ns, name, n)
}

// probeResult is a finished probe pod.
type probeResult struct {
	pod  string
	log  string
	exit int32
}

// runProbe runs netpol-probe in a pod with labels against addrs, waits
// for it to end and returns its log and exit code.
func runProbe(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, image, prefix string, labels map[string]string, addrs []string) probeResult {
	t.Helper()
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "probe", Image: image,
				Args: append([]string{"--timeout", probeTimeout.String()}, addrs...),
			}},
		},
	}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer deletePod(t, cs, ns, pod.Name)
	var exit int32
	waitFor(t, 2*time.Minute+time.Duration(len(addrs))*probeTimeout, "probe pod "+pod.Name+" ended", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Terminated != nil {
				exit = c.State.Terminated.ExitCode
				return true, nil
			}
		}
		return false, fmt.Errorf("pod %s: %s", p.Name, p.Status.Phase)
	})
	rc, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "probe"}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<16))
	if err != nil {
		t.Fatal(err)
	}
	return probeResult{pod: pod.Name, log: string(b), exit: exit}
}

// probeLine is the probe's one line for addr ("" if it printed none).
func probeLine(log, addr string) string {
	for _, l := range strings.Split(log, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == addr {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
