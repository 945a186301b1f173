//go:build lab

package lab_test

import (
	"context"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/e2e/soak/lab"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// enginePort is the engines' gRPC port, as the chart sets it.
const enginePort = 8443

// TestIntegrationLabEngineRestart restarts a real engine container: 20 s
// into a 60 s run the engine process on the last node is killed (SIGKILL,
// from the host), and the kubelet starts the container again. The
// watchdog, sampling every 10 s, names that container in a RESTART line
// (one new restart, exit code 137) and again in its SUMMARY, and its
// verdict is FAIL. The driver, whose stream to it broke, finds the engine
// that came back in the same pod (same node name, same address, not
// holding the execution) and gives it the rest of the schedule: the gate
// names the node's GAP, and no node is lost.
func TestIntegrationLabEngineRestart(t *testing.T) {
	m := theLab(t)
	if len(m.Nodes) < 2 {
		t.Fatalf("the lab has %d node; the restart needs a survivor (soak lab up --nodes 2)", len(m.Nodes))
	}
	node := m.Nodes[len(m.Nodes)-1]
	cs := labClient(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b, _ := startFaultRun(t, ctx, m, "restart", "10s")
	time.Sleep(20 * time.Second)
	pod := enginePod(t, ctx, cs, m.Namespace, node)
	pids := containerPIDs(t, pod, "engine")
	signalAll(t, pids, syscall.SIGKILL)
	t.Logf("KILLED the engine of %s on %s (pids %v) at %s", pod.Name, node, pids, stamp(time.Now()))
	r := <-b.done
	logVerdicts(t, r.out)
	if cli.Code(r.err) != cli.ExitFail {
		t.Fatalf("soak run e2e with a restarted engine: exit %d (%v), want %d", cli.Code(r.err), r.err, cli.ExitFail)
	}
	ref := regexp.QuoteMeta(m.Namespace + "/" + pod.Name + "/engine")
	mustMatch(t, r.out,
		`(?m)^RESTART `+ref+` restarts=1 new=1 lastReason=Error exitCode=137 `,
		`(?m)^SUMMARY RESTART `+ref+` restarts=1 new=1 `,
		`(?m)^SUMMARY restart-watch verdict=FAIL(?: reason=\S+)? new_restarts=1 `,
		`(?m)^SOAK FAIL gate=1 watchdog=FAIL `,
		gapLine(node).String(),
		`(?m)^VERDICT FAIL .* lost_backends=0 `)
	// Only the killed container restarted.
	for _, l := range regexp.MustCompile(`(?m)^RESTART \S+`).FindAllString(r.out, -1) {
		if l != "RESTART "+m.Namespace+"/"+pod.Name+"/engine" {
			t.Errorf("a restart of another container: %s", l)
		}
	}
	// The kubelet ran it again: the pod is the same, its container restarted once.
	p, err := cs.CoreV1().Pods(m.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 1 {
		t.Errorf("pod %s after the kill: %+v, want one restart", pod.Name, p.Status.ContainerStatuses)
	}
}

// TestIntegrationLabSilentNode silences a node: 20 s into a 60 s run the
// kubelet of a node other than the driver's is stopped (SIGSTOP) and the
// engine process on it frozen (SIGSTOP). The engine neither answers nor
// breaks its stream, so the driver waits out its deadline, cancels, and
// names it silent. The report is still saved before the saver would call
// the Job overdue; it names the frozen engine silent, by its address,
// which is that node's engine pod's; the gate names the node lost; the
// other node's results are whole. Both processes are resumed after.
func TestIntegrationLabSilentNode(t *testing.T) {
	m := theLab(t)
	if len(m.Nodes) < 2 {
		t.Fatalf("the lab has %d node; a silent node needs a survivor (soak lab up --nodes 2)", len(m.Nodes))
	}
	cs := labClient(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b, run := startFaultRun(t, ctx, m, "silent", "20s")
	node, nodeIdx := silentCandidate(t, ctx, cs, m)
	time.Sleep(20 * time.Second)
	pod := enginePod(t, ctx, cs, m.Namespace, node)
	kubelet := labProc(t, m, "kubelet-"+strconv.Itoa(nodeIdx+1))
	engine := containerPIDs(t, pod, "engine")
	frozen := append([]int{kubelet}, engine...)
	signalAll(t, frozen, syscall.SIGSTOP)
	t.Cleanup(func() { thaw(t, cs, node, frozen) })
	t.Logf("FROZEN kubelet-%d (pid %d) and the engine of %s (pids %v) on %s at %s", nodeIdx+1, kubelet, pod.Name, engine, node, stamp(time.Now()))

	r := <-b.done
	logVerdicts(t, r.out)
	if cli.Code(r.err) != cli.ExitFail {
		t.Fatalf("soak run e2e with a silent node: exit %d (%v), want %d", cli.Code(r.err), r.err, cli.ExitFail)
	}
	// The Job ended (failed: the driver exits 1 on a failed run) and its
	// report was saved; the gate names the node lost, by the frozen
	// engine's address, for its silence.
	addr := regexp.QuoteMeta(net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(enginePort)))
	mustMatch(t, r.out,
		`(?m)^SORTIE_SAVED dir=`+regexp.QuoteMeta(run)+` job=failed `,
		`(?m)^SOAK FAIL gate=1 `,
		`(?m)^LOST  `+regexp.QuoteMeta(node)+` \(`+addr+`\)  targets=\d+  error: silent: `,
		`(?m)^VERDICT FAIL .* lost_backends=1 `)
	if strings.Contains(r.out, "SORTIE_OVERDUE") {
		t.Errorf("the saver called the Job overdue: the driver did not give up on the silent engine in time")
	}
	rep, err := record.ReadReportFile(filepath.Join(run, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkSilent(t, rep, pod, node)
	checkSurvivors(t, rep, node)
}

// silentCandidate picks the node to silence: the last one that does not
// run the driver pod (the saver must see the Job end, which it learns from
// the driver's kubelet), and its index in the lab.
func silentCandidate(t *testing.T, ctx context.Context, cs kubernetes.Interface, m lab.Manifest) (string, int) {
	t.Helper()
	pods, err := cs.CoreV1().Pods(m.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=driver"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("driver pods: %v, %v; want one", pods, err)
	}
	driverNode := pods.Items[0].Spec.NodeName
	for i := len(m.Nodes) - 1; i >= 0; i-- {
		if m.Nodes[i] != driverNode {
			return m.Nodes[i], labNodeIndex(t, m.Nodes[i])
		}
	}
	t.Fatalf("every node runs the driver (%s)", driverNode)
	return "", 0
}

// labNodeIndex is the lab's index of the node named name.
func labNodeIndex(t *testing.T, name string) int {
	t.Helper()
	for _, n := range (lab.Layout{Nodes: lab.MaxNodes}).NodeList() {
		if n.Name == name {
			return n.Index
		}
	}
	t.Fatalf("%s is not a node name of the lab", name)
	return 0
}

// checkSilent: in every execution, the report's backend errors name the
// frozen engine silent by its address, which is the frozen node's engine
// pod's IP, and name no other engine.
func checkSilent(t *testing.T, rep *record.Source, pod corev1.Pod, node string) {
	t.Helper()
	want := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(enginePort))
	for _, e := range rep.Executions {
		var silent []string
		for _, be := range e.BackendErrors {
			if record.KindOf(be) != record.KindSilent {
				t.Errorf("%s: a backend error that is not silent: %+v", e.Label, be)
				continue
			}
			silent = append(silent, be.Backend)
		}
		if len(silent) != 1 || silent[0] != want {
			t.Errorf("%s: the report names %v silent; want the frozen engine on %s, %s (pod %s)", e.Label, silent, node, want, pod.Name)
			continue
		}
		t.Logf("SILENT %s %s: the report names %s (the engine pod %s) silent", e.Label, node, want, pod.Name)
	}
}

// thaw resumes the frozen processes and waits until the node is Ready
// again, so that the tests after find the lab whole.
func thaw(t *testing.T, cs kubernetes.Interface, node string, pids []int) {
	signalAll(t, pids, syscall.SIGCONT)
	waitFor(t, 3*time.Minute, node+" Ready again", func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	t.Logf("THAWED %s", node)
}
