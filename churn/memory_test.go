package churn

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

// kubelets is a loopback API server that answers the node proxy's
// /stats/summary for each node: the RSS of a node's proxy container grows
// by 10 MiB at every read, and a node in broken answers 500.
type kubelets struct {
	mu     sync.Mutex
	reads  map[string]int
	paths  []string
	broken map[string]bool
}

const mib = 1 << 20

func (k *kubelets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.paths = append(k.paths, r.Method+" "+r.URL.Path)
	node, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
	node, ok2 := strings.CutSuffix(node, "/proxy/stats/summary")
	if !ok || !ok2 {
		http.NotFound(w, r)
		return
	}
	if k.broken[node] {
		http.Error(w, "kubelet unreachable", http.StatusInternalServerError)
		return
	}
	n := k.reads[node]
	k.reads[node]++
	pod := "aether-proxy-" + node
	fmt.Fprintf(w, `{"node":{"nodeName":%q},"pods":[
 {"podRef":{"name":%q,"namespace":"aether-system"},"containers":[
  {"name":"proxy","startTime":"2026-10-05T03:00:00Z","memory":{"rssBytes":%d,"workingSetBytes":1}},
  {"name":"agent-sidecar","startTime":"2026-10-05T03:00:00Z","memory":{"workingSetBytes":5}}]},
 {"podRef":{"name":"svc-1-abc","namespace":"aether-test"},"containers":[
  {"name":"app","startTime":"2026-10-05T03:00:00Z","memory":{"rssBytes":7}}]}]}`,
		node, pod, (100+10*n)*mib)
}

func proxyPod(node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "aether-system", Name: "aether-proxy-" + node, Labels: map[string]string{"app": "aether-proxy"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// TestMemorySampling runs a sample step and the automatic sample after a
// roll against a real HTTP server for the node proxy: the TSV rows, the
// SAMPLED lines and the growth summary, first against last sample.
func TestMemorySampling(t *testing.T) {
	k := &kubelets{reads: map[string]int{}, broken: map[string]bool{}}
	srv := httptest.NewServer(k)
	defer srv.Close()
	rc, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	objs := append(soakCluster(),
		proxyPod("soak-worker", corev1.PodRunning), proxyPod("soak-worker2", corev1.PodRunning),
		proxyPod("soak-worker3", corev1.PodPending)) // not running: not sampled
	s := newSim(objs...)
	sched, err := ParseSchedule("mem.txt", strings.NewReader(
		"1 sample daemonset/aether-proxy -n aether-system\n5 roll daemonset/aether-proxy -n aether-system\n"), "aether-test")
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.T0 = t0
	o.SampleAfter = []string{"aether-system/daemonset/aether-proxy"}
	clk := clock.NewFake(launch)
	var out, tsv bytes.Buffer
	c := &Churner{Client: s, Clock: clk, Opts: o, Schedule: sched, Out: &out, MemoryOut: &tsv,
		Summaries: ProxySummary{REST: rc.CoreV1().RESTClient()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan error, 1)
	var outcome Outcome
	go func() { outcome = c.Run(context.Background()); done <- nil }()
	if err := drive(t, clk, 5*time.Second, done); err != nil {
		t.Fatal(err)
	}
	if outcome != Complete {
		t.Fatalf("outcome %v\n%s", outcome, out.String())
	}
	stdout := out.String()
	rolled := lineWith(t, stdout, "ROLLED aether-system/daemonset/aether-proxy")
	for _, want := range []string{
		"SAMPLED aether-system/daemonset/aether-proxy at=2026-10-05T03:21:00Z (step line 1) containers=2 rss_bytes=209715200",
		"(600s after its roll) containers=2 rss_bytes=230686720",
		"MEMORY aether-system/daemonset/aether-proxy node=soak-worker container=proxy samples=2 first=104857600 at=2026-10-05T03:21:00Z age=1260s last=115343360",
		"growth=+10485760 (+10.0%)",
		"MEMORY aether-system/daemonset/aether-proxy node=soak-worker2 container=proxy samples=2",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// The roll's sample is taken at its age after the roll completed
	// (03:25:00 + took 10s + 600s, the last row).
	if !strings.Contains(rolled, "at=2026-10-05T03:25:00Z took=10s") {
		t.Errorf("roll line %q", rolled)
	}
	// The gate reads churn.log: the sample lines are none of its rolls.
	if log, err := record.ParseRolls(strings.NewReader(stdout)); err != nil || len(log.Rolls) != 1 {
		t.Errorf("the gate's reader of churn.log: %d rolls, %v", len(log.Rolls), err)
	}
	rows := strings.Split(strings.TrimSpace(tsv.String()), "\n")
	if len(rows) != 5 || rows[0] != MemoryHeader {
		t.Fatalf("TSV:\n%s", tsv.String())
	}
	if rows[1] != "2026-10-05T03:21:00Z\taether-system/aether-proxy-soak-worker\tproxy\t104857600\t1260" {
		t.Errorf("first row %q", rows[1])
	}
	if rows[4] != "2026-10-05T03:35:10Z\taether-system/aether-proxy-soak-worker2\tproxy\t115343360\t2110" {
		t.Errorf("last row %q", rows[4])
	}
	if got := strings.Join(k.paths, "\n"); strings.Count(got, "GET /api/v1/nodes/soak-worker/proxy/stats/summary") != 2 || strings.Contains(got, "soak-worker3") {
		t.Errorf("the node proxy was asked:\n%s", got)
	}
}

// TestMemorySampleFailureGoesOn: a kubelet that does not answer is a
// SAMPLE FAILED line, and the schedule still completes.
func TestMemorySampleFailureGoesOn(t *testing.T) {
	k := &kubelets{reads: map[string]int{}, broken: map[string]bool{"soak-worker2": true}}
	srv := httptest.NewServer(k)
	defer srv.Close()
	rc, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	s := newSim(append(soakCluster(), proxyPod("soak-worker", corev1.PodRunning), proxyPod("soak-worker2", corev1.PodRunning))...)
	sched, err := ParseSchedule("mem.txt", strings.NewReader("1 sample daemonset/aether-proxy -n aether-system\n2 roll deployment/svc-1\n"), "aether-test")
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.T0 = t0
	clk := clock.NewFake(launch)
	var out bytes.Buffer
	c := &Churner{Client: s, Clock: clk, Opts: o, Schedule: sched, Out: &out,
		Summaries: ProxySummary{REST: rc.CoreV1().RESTClient()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan error, 1)
	var outcome Outcome
	go func() { outcome = c.Run(context.Background()); done <- nil }()
	if err := drive(t, clk, 5*time.Second, done); err != nil {
		t.Fatal(err)
	}
	if outcome != Complete || !strings.Contains(out.String(), "SAMPLE FAILED aether-system/daemonset/aether-proxy at=2026-10-05T03:21:00Z (step line 1): node soak-worker2: read the kubelet summary") {
		t.Errorf("outcome %v:\n%s", outcome, out.String())
	}
	if strings.Contains(out.String(), "MEMORY ") {
		t.Errorf("a failed sample was summed up:\n%s", out.String())
	}
	// A failed sample is no failed roll to the gate.
	if log, err := record.ParseRolls(strings.NewReader(out.String())); err != nil || len(log.Rolls) != 1 || log.Rolls[0].Failed {
		t.Errorf("the gate's reader of churn.log: %+v, %v", log.Rolls, err)
	}
}

func lineWith(t *testing.T, s, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line %q in:\n%s", prefix, s)
	return ""
}

func TestParseSummary(t *testing.T) {
	at := time.Date(2026, 10, 5, 4, 0, 0, 0, time.UTC)
	b := []byte(`{"pods":[{"podRef":{"name":"p","namespace":"n"},"containers":[
		{"name":"a","startTime":"2026-10-05T03:00:00Z","memory":{"rssBytes":42}},
		{"name":"b","memory":{}},
		{"name":"c","startTime":"2026-10-05T05:00:00Z","memory":{"rssBytes":0}}]},
		{"podRef":{"name":"q","namespace":"n"},"containers":[{"name":"a","memory":{"rssBytes":1}}]}]}`)
	got, err := ParseSummary(b, "node-1", map[string]bool{"n/p": true}, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Container != "a" || got[0].RSSBytes != 42 || got[0].Age != time.Hour ||
		got[1].Container != "c" || got[1].RSSBytes != 0 || got[1].Age != 0 {
		t.Errorf("samples %+v", got)
	}
	if _, err := ParseSummary([]byte(`{"pods":[`), "node-1", nil, at); err == nil || !strings.Contains(err.Error(), "node node-1") {
		t.Errorf("a torn summary: %v", err)
	}
}

func FuzzParseSummary(f *testing.F) {
	f.Add([]byte(`{"pods":[{"podRef":{"name":"p","namespace":"n"},"containers":[{"name":"a","startTime":"2026-10-05T03:00:00Z","memory":{"rssBytes":42}}]}]}`))
	f.Add([]byte(`{"pods":null}`))
	f.Add([]byte(`[]`))
	at := time.Date(2026, 10, 5, 4, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseSummary(b, "n1", map[string]bool{"n/p": true}, at)
		if err != nil {
			return
		}
		for _, s := range got {
			if s.Namespace+"/"+s.Pod != "n/p" || s.Age < 0 {
				t.Fatalf("sample %+v from a pod not asked for, or a negative age", s)
			}
		}
	})
}
