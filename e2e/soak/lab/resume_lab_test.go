//go:build lab

package lab_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/record"
)

// TestIntegrationLabDriverResume deletes the driver pod mid-run, as an
// eviction or a node drain would: 20 s into a 60 s run the pod is deleted
// with its grace, the kubelet sends SIGTERM, the driver detaches (the
// engines run on) and exits 143, and the Job starts its next pod, which
// finds the run manifest on the report volume and resumes the run. The run
// passes with every planned request answered 2xx on every node, the
// report names the driver's gap, the saver saves once, and the Job shows
// the two pods: one failed, one succeeded.
func TestIntegrationLabDriverResume(t *testing.T) {
	m := theLab(t)
	cs := labClient(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	b, run := startFaultRun(t, ctx, m, "resume", "20s")
	time.Sleep(20 * time.Second)
	first := driverPods(t, ctx, cs, m.Namespace)
	if len(first) != 1 {
		t.Fatalf("%d driver pods before the delete, want one", len(first))
	}
	deleted := first[0]
	if deleted.Status.Phase != corev1.PodRunning {
		t.Fatalf("the driver pod %s is %s 20 s into the load, want Running", deleted.Name, deleted.Status.Phase)
	}
	if err := cs.CoreV1().Pods(m.Namespace).Delete(ctx, deleted.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("DELETED driver pod %s on %s at %s (its grace: %ds)", deleted.Name, deleted.Spec.NodeName, stamp(time.Now()), *deleted.Spec.TerminationGracePeriodSeconds)

	r := <-b.done
	logVerdicts(t, r.out)
	if r.err != nil {
		t.Fatalf("soak run e2e with its driver pod deleted: %v", r.err)
	}
	checkE2E(t, r.out, run, m.Nodes)
	if n := len(regexp.MustCompile(`(?m)^SORTIE_SAVED `).FindAllString(r.out, -1)); n != 1 {
		t.Errorf("%d SORTIE_SAVED lines, want one", n)
	}
	rep, err := record.ReadReportFile(filepath.Join(run, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.DriverGaps) != 1 {
		t.Errorf("the report names %d driver gaps, want one: %+v", len(rep.DriverGaps), rep.DriverGaps)
	}
	for _, g := range rep.DriverGaps {
		t.Logf("GAP driver %s..%s: %s", g.From, g.To, g.Why)
		if !strings.Contains(g.Why, "SIGTERM") {
			t.Errorf("driver gap %+v: want the detach on SIGTERM", g)
		}
	}
	checkResumedJob(t, ctx, cs, m.Namespace, runEnv(t, run).Get("RELEASE"), deleted.Name)
}

// driverPods are the driver pods of the namespace, oldest first.
func driverPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) []corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=driver"})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// checkResumedJob: the Job succeeded after one failed pod, the deleted
// one, which detached (exit 143), and the pod after it ended the run (0).
func checkResumedJob(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, release, deleted string) {
	t.Helper()
	job, err := cs.BatchV1().Jobs(ns).Get(ctx, release+"-sortie-driver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Status.Succeeded != 1 || job.Status.Failed != 1 || !jobDone(job, batchv1.JobComplete) {
		t.Errorf("job %s: succeeded=%d failed=%d conditions=%+v; want complete after one failed pod", job.Name, job.Status.Succeeded, job.Status.Failed, job.Status.Conditions)
	}
	pods := driverPods(t, ctx, cs, ns)
	var exits []string
	for _, p := range pods {
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == "driver" && c.State.Terminated != nil {
				code := c.State.Terminated.ExitCode
				exits = append(exits, p.Name+"="+itoa(code))
				if p.Name == deleted && code != 143 {
					t.Errorf("the deleted driver pod %s exited %d, want 143 (detached on SIGTERM)", p.Name, code)
				}
				if p.Name != deleted && code != 0 {
					t.Errorf("the resumed driver pod %s exited %d, want 0", p.Name, code)
				}
			}
		}
	}
	t.Logf("RESUMED job %s: succeeded=%d failed=%d driver exits %s", job.Name, job.Status.Succeeded, job.Status.Failed, strings.Join(exits, " "))
}

func jobDone(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
