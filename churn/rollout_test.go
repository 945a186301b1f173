package churn

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/internal/kube/kubetest"
)

func TestRolloutDone(t *testing.T) {
	three := int32(3)
	dep := func(gen, obs int64, st appsv1.DeploymentStatus) *appsv1.Deployment {
		d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &three}, Status: st}
		d.Generation, d.Status.ObservedGeneration = gen, obs
		return d
	}
	ds := func(gen, obs int64, desired, updated, avail int32) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		d.Generation = gen
		d.Status = appsv1.DaemonSetStatus{ObservedGeneration: obs, DesiredNumberScheduled: desired, UpdatedNumberScheduled: updated, NumberAvailable: avail}
		return d
	}
	sts := func(obs int64, updated, ready, avail int32, cur, upd string) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: &three}}
		s.Status = appsv1.StatefulSetStatus{ObservedGeneration: obs, UpdatedReplicas: updated, ReadyReplicas: ready, AvailableReplicas: avail, CurrentRevision: cur, UpdateRevision: upd}
		return s
	}
	for _, tc := range []struct {
		name   string
		obj    runtime.Object
		gen    int64
		done   bool
		detail string
		fail   string
	}{
		{"deployment not observed", dep(5, 4, appsv1.DeploymentStatus{UpdatedReplicas: 3, Replicas: 3, AvailableReplicas: 3}), 5, false, "observedGeneration=4/5", ""},
		{"deployment updating", dep(5, 5, appsv1.DeploymentStatus{UpdatedReplicas: 1, Replicas: 4, AvailableReplicas: 3}), 5, false, "updated=1/3", ""},
		{"deployment old pods terminating", dep(5, 5, appsv1.DeploymentStatus{UpdatedReplicas: 3, Replicas: 4, AvailableReplicas: 3}), 5, false, "old replicas terminating: replicas=4 updated=3", ""},
		{"deployment not available", dep(5, 5, appsv1.DeploymentStatus{UpdatedReplicas: 3, Replicas: 3, AvailableReplicas: 2}), 5, false, "available=2/3", ""},
		{"deployment done", dep(5, 5, appsv1.DeploymentStatus{UpdatedReplicas: 3, Replicas: 3, AvailableReplicas: 3}), 5, true, "", ""},
		{"deployment gave up", dep(5, 5, appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "svc-1-7b44" has timed out progressing.`}}}), 5, false, "",
			`progress deadline exceeded: ReplicaSet "svc-1-7b44" has timed out progressing.`},
		{"daemonset not observed", ds(3, 2, 3, 3, 3), 3, false, "observedGeneration=2/3", ""},
		{"daemonset updating", ds(3, 3, 3, 1, 2), 3, false, "updated=1/3", ""},
		{"daemonset not available", ds(3, 3, 3, 3, 2), 3, false, "available=2/3", ""},
		{"daemonset done", ds(3, 3, 3, 3, 3), 3, true, "", ""},
		{"statefulset updating", sts(2, 2, 3, 3, "a", "b"), 2, false, "updated=2/3", ""},
		{"statefulset revision", sts(2, 3, 3, 3, "a", "b"), 2, false, "revision b not yet current (a)", ""},
		{"statefulset not ready", sts(2, 3, 2, 2, "b", "b"), 2, false, "ready=2/3", ""},
		{"statefulset done", sts(2, 3, 3, 3, "b", "b"), 2, true, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, detail, err := rolloutDone(tc.obj, tc.gen)
			fail := ""
			if err != nil {
				fail = err.Error()
			}
			if done != tc.done || detail != tc.detail || fail != tc.fail {
				t.Errorf("got (%v, %q, %q), want (%v, %q, %q)", done, detail, fail, tc.done, tc.detail, tc.fail)
			}
		})
	}
}

// TestSignalWhileWaiting stops the run during the wait for its first step
// and during a shrink's hold: no call after the signal but the restore.
func TestSignalWhileWaiting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waits   int // sleeps to let pass before the signal
		last    string
		restore bool
	}{
		{"before T0", 1, "CHURN STOPPED: SIGTERM at T0-30s after 0 of 1 steps -- the schedule is incomplete; relaunch with a fresh T0", false},
		{"in the shrink hold", 2, "CHURN STOPPED: SIGTERM at T0+1m after 1 of 1 steps -- the schedule is incomplete; relaunch with a fresh T0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeSchedule(t, "1 shrink svc-5 600 -n aether-test\n")
			s := newSim(soakCluster()...)
			clk := clock.NewFake(launch)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			env := Env{NewClient: func(string, string) (kubernetes.Interface, error) { return s, nil }, Clock: clk}
			var stdout bytes.Buffer
			done := make(chan error, 1)
			go func() {
				done <- RunEnv(ctx, env, append([]string{"--schedule", path}, t0Flag...), &stdout, &bytes.Buffer{})
			}()
			for i := 1; i <= tc.waits; i++ {
				if err := clk.WaitForSleepers(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
				if i < tc.waits {
					clk.Advance(90 * 1e9) // 90 s: past T0+1m from the launch at T0-30s
				}
			}
			before := len(s.Actions())
			cancel(&cli.SignalError{Signal: syscall.SIGTERM})
			if code := cli.Code(<-done); code != 143 {
				t.Errorf("exit %d, want 143", code)
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if got := lines[len(lines)-1]; got != tc.last {
				t.Errorf("last line\n%s\nwant\n%s", got, tc.last)
			}
			after := kubetest.Transcript(s.Actions()[before:])
			want := ""
			if tc.restore {
				want = "get deployments/scale ns=aether-test name=svc-5\nupdate deployments/scale ns=aether-test name=svc-5 replicas=3\n"
			}
			if after != want {
				t.Errorf("calls after the signal:\n%s\nwant:\n%s", after, want)
			}
			if n := s.replicasOf(t, "aether-test", "svc-5"); n != 3 {
				t.Errorf("svc-5 at %d replicas", n)
			}
		})
	}
}

func TestDryRunWithoutT0(t *testing.T) {
	stdout, code := run(t, context.Background(), nil, "--schedule", "testdata/small.txt", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"PLAN T0+1m at=- roll aether-test/deployment/svc-1",
		"PLAN T0+3m at=- shrink aether-test/deployment/svc-5 for=90s restore_at=-",
		"PLAN T0+6m at=- new-serviceaccount aether-test node=auto hold=120s",
		"PLAN steps=6 rolls=4 shrinks=1 new_serviceaccounts=1 end=T0+6m dry-run: nothing was changed",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
}
