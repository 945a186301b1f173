package saver

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	batchv1client "k8s.io/client-go/kubernetes/typed/batch/v1"
	"k8s.io/client-go/rest"

	"github.com/sortie-soak/sortie/internal/kube"
)

// writeKubeconfig writes a kubeconfig whose one cluster is a loopback
// address nothing is asked of: the test only builds clients.
func writeKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: "t"}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// requestTimeout is the bound client-go puts on every request of cs.
func requestTimeout(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	c, ok := cs.(*kubernetes.Clientset)
	if !ok {
		t.Fatalf("client %T is not a *kubernetes.Clientset", cs)
	}
	rc, ok := c.BatchV1().RESTClient().(*rest.RESTClient)
	if !ok || rc.Client == nil {
		t.Fatalf("REST client %T has no HTTP client", c.BatchV1().RESTClient())
	}
	return rc.Client.Timeout.String()
}

// TestClientBoundsEveryRequest: an API server that takes the connection and
// never answers must not hold the saver forever. Its API client bounds each
// request as the harness's shared client does.
//
// Pod logs are read through a client of their own, with no per-request
// bound: a log streams as long as it is, and its step's context bounds it.
func TestClientBoundsEveryRequest(t *testing.T) {
	cs, logs, err := clients(writeKubeconfig(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := requestTimeout(t, cs), kube.DefaultTimeout.String(); got != want {
		t.Errorf("API requests bounded by %s, want %s", got, want)
	}
	cl, ok := logs.(ClientLogs)
	if !ok {
		t.Fatalf("log reader %T, want ClientLogs", logs)
	}
	if got := requestTimeout(t, cl.Client); got != "0s" {
		t.Errorf("log reads bounded per request by %s, want only by their step's context", got)
	}
	if cl.Client == cs {
		t.Error("logs and API calls share one client")
	}
}

// boundedJobs records, for every Get of a Job, whether its context carries
// a deadline: a Get without one waits as long as the API server lets it.
type boundedJobs struct {
	kubernetes.Interface
	mu              sync.Mutex
	gets, unbounded int
}

func (b *boundedJobs) BatchV1() batchv1client.BatchV1Interface {
	return boundedBatch{b.Interface.BatchV1(), b}
}

type boundedBatch struct {
	batchv1client.BatchV1Interface
	rec *boundedJobs
}

func (b boundedBatch) Jobs(namespace string) batchv1client.JobInterface {
	return boundedJobGet{b.BatchV1Interface.Jobs(namespace), b.rec}
}

type boundedJobGet struct {
	batchv1client.JobInterface
	rec *boundedJobs
}

func (g boundedJobGet) Get(ctx context.Context, name string, o metav1.GetOptions) (*batchv1.Job, error) {
	g.rec.mu.Lock()
	g.rec.gets++
	if _, ok := ctx.Deadline(); !ok {
		g.rec.unbounded++
	}
	g.rec.mu.Unlock()
	return g.JobInterface.Get(ctx, name, o)
}

// TestWaitForTheJobIsBounded: the wait for the Job is as long as the run,
// but each look at the Job is bounded like every step after it, so one
// request the API server never answers cannot hold the saver past its
// give-up time.
func TestWaitForTheJobIsBounded(t *testing.T) {
	fx := newFixture(t)
	fx.jobActiveGets = 3
	fx.start(fx.objects())
	cs := &boundedJobs{Interface: fx.cs}

	res, err := fx.saveWith(context.Background(), cs, nil)
	if err != nil || !res.Saved {
		t.Fatalf("Save = %+v, %v", res, err)
	}
	if cs.gets < 4 {
		t.Fatalf("%d gets of the Job, want at least 4 (3 active, then complete)", cs.gets)
	}
	if cs.unbounded != 0 {
		t.Errorf("%d of %d gets of the Job had no deadline", cs.unbounded, cs.gets)
	}
}
