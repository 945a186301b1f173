package churn

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sortie-soak/sortie/internal/kube/kubetest"
	"github.com/sortie-soak/sortie/record"
)

const outageSchedule = "1 daemon-outage --daemonset aether-uds-csi --victim aether-test/app=uds-echo -n aether-system\n3 roll deployment/svc-1 -n aether-test\n"

func pod(ns, name, node string, ready bool, labels map[string]string) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func failedMount(name string, at time.Time) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "aether-test", Name: name}, Reason: "FailedMount",
		LastTimestamp: metav1.NewTime(at)}
}

// outageSim is the soak cluster with a node daemon on two workers and two
// victim pods. The daemon's controller: the roll puts the victim node's
// daemon pod into termination; the victim's deletion makes its
// Deployment start a replacement, Ready at once, and, when back is set,
// brings the node's daemon back before the step reads it again.
func outageSim(back bool, extra ...runtime.Object) *sim {
	ds := map[string]string{"app": "aether-uds-csi"}
	echo := map[string]string{"app": "uds-echo"}
	objs := append(soakCluster(),
		pod("aether-system", "uds-csi-aaaaa", "soak-worker", true, ds),
		pod("aether-system", "uds-csi-bbbbb", "soak-worker2", true, ds),
		pod("aether-test", "uds-echo-1", "soak-worker2", true, echo),
		pod("aether-test", "uds-echo-2", "soak-worker", true, echo),
		failedMount("old", t0.Add(-time.Hour)))
	s := newSim(append(objs, extra...)...)
	tr := s.Tracker()
	s.PrependReactor("patch", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := tr.Get(podsGVR, "aether-system", "uds-csi-bbbbb")
		if err == nil {
			p := obj.(*corev1.Pod)
			now := metav1.NewTime(t0)
			p.DeletionTimestamp = &now
			_ = tr.Update(podsGVR, p, "aether-system")
		}
		return false, nil, nil
	})
	s.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "aether-test" {
			return false, nil, nil
		}
		_ = tr.Create(podsGVR, pod("aether-test", "uds-echo-3", "soak-worker2", true, echo), "aether-test")
		if back {
			_ = tr.Delete(podsGVR, "aether-system", "uds-csi-bbbbb")
			_ = tr.Create(podsGVR, pod("aether-system", "uds-csi-ccccc", "soak-worker2", true, ds), "aether-system")
		}
		return false, nil, nil
	})
	return s
}

// TestDaemonOutage: the victim is deleted while its node's daemon is
// down, and the report names the window, the replacement and the
// FailedMount events of the step (not the older one); the calls come in
// the step's order.
func TestDaemonOutage(t *testing.T) {
	s := outageSim(false, failedMount("during", t0.Add(time.Minute+time.Second)))
	path := writeSchedule(t, outageSchedule)
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path}, t0Flag...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	for _, want := range []string{
		"ROLLED aether-system/daemonset/aether-uds-csi at=2026-10-05T03:21:00Z took=",
		" victim=aether-test/uds-echo-1@soak-worker2 window=down rollout=",
		" rollout=10s terminated=10s replacement=uds-echo-3 ready=10s failedmount_during=1 failedmount_after=0\n",
		"CHURN COMPLETE steps=2 rolled=2 shrunk=0 new_serviceaccounts=0 findings=0",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "NOTE") {
		t.Errorf("a NOTE for a window that was down:\n%s", stdout)
	}
	var seq []string
	for _, a := range s.Actions() {
		l := kubetest.Line(a)
		if strings.HasPrefix(l, "create selfsubjectaccessreviews") || strings.Contains(l, "svc-1") {
			continue
		}
		if len(seq) == 0 || seq[len(seq)-1] != l {
			seq = append(seq, l) // polls of the same read show once
		}
	}
	i := 0
	for ; i < len(seq) && !strings.HasPrefix(seq[i], "patch daemonsets"); i++ {
	}
	if i < 3 {
		t.Fatalf("no roll after the victim and daemon reads: %v", seq)
	}
	want := []string{
		"list pods ns=aether-test labels=app=uds-echo",
		"get daemonsets ns=aether-system name=aether-uds-csi",
		"list pods ns=aether-system labels=app=aether-uds-csi",
		seq[i], // the roll's patch
		"list pods ns=aether-system labels=app=aether-uds-csi",
		"delete pods ns=aether-test name=uds-echo-1",
		"list pods ns=aether-system labels=app=aether-uds-csi",
		"get daemonsets ns=aether-system name=aether-uds-csi",
		"get pods ns=aether-test name=uds-echo-1",
		"list pods ns=aether-test labels=app=uds-echo",
		"list events ns=aether-test fields=reason=FailedMount",
	}
	if diff := cmp.Diff(want, seq[i-3:i-3+len(want)]); diff != "" {
		t.Errorf("the step's calls (-want +got):\n%s", diff)
	}
	if _, err := record.ParseRolls(strings.NewReader(stdout)); err != nil {
		t.Errorf("the gate's reader refuses the lines: %v", err)
	}
}

// TestDaemonOutageWindows: a daemon that was back by the delete is late, one
// never seen down is missed; either way the step reports, says why in a
// NOTE, and the schedule goes on.
func TestDaemonOutageWindows(t *testing.T) {
	late := outageSim(true)
	stdout, code := run(t, context.Background(), late, append([]string{"--schedule", writeSchedule(t, outageSchedule)}, t0Flag...)...)
	if code != 0 || !strings.Contains(stdout, "window=late ") ||
		!strings.Contains(stdout, "NOTE aether-system/daemonset/aether-uds-csi window=late: the daemon on soak-worker2 was up again by the time the delete was accepted") {
		t.Errorf("late: exit %d\n%s", code, stdout)
	}
	missed := outageSim(false)
	missed.PrependReactor("patch", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, nil // the roll is accepted and never reaches the node
	})
	stdout, code = run(t, context.Background(), missed, append([]string{"--schedule", writeSchedule(t, outageSchedule), "--outage-window", "20"}, t0Flag...)...)
	if code != 0 || !strings.Contains(stdout, "window=missed ") ||
		!strings.Contains(stdout, "NOTE aether-system/daemonset/aether-uds-csi window=missed: uds-csi-bbbbb was not down within 20s (last: up)") ||
		!strings.Contains(stdout, "ROLLED aether-test/deployment/svc-1") {
		t.Errorf("missed: exit %d\n%s", code, stdout)
	}
}

// TestDaemonOutageFinding: a FailedMount after the step is a finding: a
// FAILED line with what was bad, and the schedule goes on.
func TestDaemonOutageFinding(t *testing.T) {
	s := outageSim(false, failedMount("after", t0.Add(30*time.Minute)))
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", writeSchedule(t, outageSchedule)}, t0Flag...)...)
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	for _, want := range []string{
		"failedmount_during=0 failedmount_after=1 bad=failedmount: the outage left failedmount (a finding: the schedule goes on)",
		"ROLLED aether-test/deployment/svc-1",
		"CHURN COMPLETE steps=2 rolled=1 shrunk=0 new_serviceaccounts=0 findings=1",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	rl, err := record.ParseRolls(strings.NewReader(stdout))
	if err != nil || len(rl.Rolls) != 2 || !rl.Rolls[0].Failed {
		t.Errorf("read as rolls: %+v %v", rl.Rolls, err)
	}
}

// TestDaemonOutageNoVictim: with no pod to delete the step cannot do its
// part: the run aborts before it rolls anything.
func TestDaemonOutageNoVictim(t *testing.T) {
	s := outageSim(false)
	path := writeSchedule(t, "1 daemon-outage --daemonset aether-uds-csi --victim aether-test/app=nothing -n aether-system\n")
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path}, t0Flag...)...)
	if code != 2 || !strings.Contains(stdout, "PREFLIGHT FAIL aether-system/daemonset/aether-uds-csi victim=aether-test/app=nothing: no running pod matches app=nothing in aether-test") {
		t.Errorf("preflight: exit %d\n%s", code, stdout)
	}
	for _, a := range s.Actions() {
		if a.GetVerb() == "patch" || a.GetVerb() == "delete" {
			t.Errorf("changed the cluster: %s", kubetest.Line(a))
		}
	}
}
