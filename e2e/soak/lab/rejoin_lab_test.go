//go:build lab

package lab_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// gapLine is the gate's GAP line of a node, its counts captured.
func gapLine(node string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^GAP ` + regexp.QuoteMeta(node) +
		` \+([0-9.]+)s\.\.\+([0-9.]+)s \(engine restarted\): ([0-9,]+) requests not sent; ([0-9,]+)/([0-9,]+) answered 2xx outside it$`)
}

// TestIntegrationLabEngineRejoin deletes a real engine pod as Kubernetes
// does on a drain or a DaemonSet update (with its grace: SIGTERM, the
// engine cancels its executions and sends their Results): 20 s into a 60 s
// run the engine pod of the last node is deleted, the DaemonSet starts a
// new one on that node (a new pod, a new address), and the driver, which
// looks its dns pool up again, gives the new engine the rest of every
// execution's schedule. The gate names the node's GAP instead of losing
// it: every request due outside the gap answered 2xx, the node's planned
// whole (outcomes + gap), no lost backend; the other node whole.
func TestIntegrationLabEngineRejoin(t *testing.T) {
	m := theLab(t)
	if len(m.Nodes) < 2 {
		t.Fatalf("the lab has %d node; a rejoin is judged beside a node that stayed (soak lab up --nodes 2)", len(m.Nodes))
	}
	node := m.Nodes[len(m.Nodes)-1]
	cs := labClient(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b, run := startFaultRun(t, ctx, m, "rejoin", "20s")
	time.Sleep(20 * time.Second)
	pod := enginePod(t, ctx, cs, m.Namespace, node)
	if err := cs.CoreV1().Pods(m.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("DELETED engine pod %s (%s) on %s at %s", pod.Name, pod.Status.PodIP, node, stamp(time.Now()))
	r := <-b.done
	logVerdicts(t, r.out)
	for _, l := range strings.Split(r.out, "\n") {
		if strings.HasPrefix(l, "GAP ") {
			t.Log(l)
		}
	}
	if cli.Code(r.err) != cli.ExitFail {
		t.Fatalf("soak run e2e with a deleted engine pod: exit %d (%v), want %d: a node with a gap fails", cli.Code(r.err), r.err, cli.ExitFail)
	}
	g := gapLine(node).FindStringSubmatch(r.out)
	if g == nil {
		t.Fatalf("no GAP line for %s", node)
	}
	if g[4] != g[5] || g[3] == "0" {
		t.Errorf("GAP of %s: %s not sent, %s/%s answered outside it; want some not sent and every other request answered", node, g[3], g[4], g[5])
	}
	mustMatch(t, r.out,
		`(?m)^SOAK FAIL gate=1 `,
		`(?m)^NODE  \S+  `+regexp.QuoteMeta(node)+`  FAIL  .*-- GAP `+regexp.QuoteMeta(node)+` `,
		`(?m)^VERDICT FAIL .* lost_backends=0 `)
	if regexp.MustCompile(`(?m)^LOST  `).MatchString(r.out) {
		t.Errorf("a node was named lost: the new engine pod did not rejoin")
	}
	rep, err := record.ReadReportFile(filepath.Join(run, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkSurvivors(t, rep, node)
	for _, e := range rep.Executions {
		for _, br := range e.Results {
			if br.BackendName != node {
				continue
			}
			if err := br.Conserves(); err != nil || len(br.GapUnsent) != 1 || br.Partial {
				t.Errorf("%s on %s: gaps %+v, partial %v: %v; want one gap in a whole result that conserves", e.Label, node, br.GapUnsent, br.Partial, err)
				continue
			}
			gp := br.GapUnsent[0]
			if gp.Backend == "" || strings.HasPrefix(gp.Backend, pod.Status.PodIP+":") || br.Counters[record.HTTP2xx]+gp.Count != br.Planned {
				t.Errorf("%s on %s: gap %+v, 2xx %d of %d planned; want the new pod's engine, every request outside the gap answered", e.Label, node, gp, br.Counters[record.HTTP2xx], br.Planned)
			}
			t.Logf("REJOINED %s on %s: %d answered 2xx, %d not sent from %s to %s, taken up by %s", e.Label, node, br.Counters[record.HTTP2xx], gp.Count, gp.From, gp.To, gp.Backend)
		}
	}
}
