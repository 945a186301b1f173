package churn

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/kube/kubetest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// transcript is the golden form of a run: the output, the API calls in
// order and the exit code.
func transcript(stdout string, s *sim, code int) string {
	return "== stdout\n" + stdout + "== actions\n" + kubetest.Transcript(s.Actions()) + fmt.Sprintf("== exit %d\n", code)
}

var t0Flag = []string{"--t0", t0.Format("2006-01-02T15:04:05Z07:00")}

// TestSoakDryRun is the golden test of the reference schedule: its plan, and
// that a dry run makes no API call at all.
func TestSoakDryRun(t *testing.T) {
	stdout, code := run(t, context.Background(), nil, append([]string{"--schedule", "schedules/soak.txt", "--dry-run"}, t0Flag...)...)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	kubetest.Golden(t, "testdata/soak-dry-run.golden", stdout, *update)
	if !strings.Contains(stdout, "PLAN steps=36 rolls=33 shrinks=1 new_serviceaccounts=2 end=T0+451m30s") {
		t.Error("the reference schedule is not 33 rolls, 1 shrink and 2 new-serviceaccount steps")
	}
	// The rolls: on a 12-minute grid from T0+12m to T0+360m, except the two
	// placed between grid points; then nothing until the shrink at T0+450m.
	sched, err := readSchedule("schedules/soak.txt", "default")
	if err != nil {
		t.Fatal(err)
	}
	var last int
	for _, st := range sched.Steps {
		switch {
		case st.Kind == StepRoll && st.Minute%12 != 0 && st.Minute%6 != 0:
			t.Errorf("line %d: roll at minute %d is off the grid", st.Line, st.Minute)
		case st.Kind == StepRoll:
			last = st.Minute
		case st.Kind == StepShrink && (st.Minute-last < 90 || st.Seconds != 90):
			t.Errorf("line %d: the shrink (minute %d, %ds) does not follow a 90-minute no-roll window", st.Line, st.Minute, st.Seconds)
		}
	}
	if last != 360 {
		t.Errorf("last roll at minute %d, want 360", last)
	}
}

// TestSoakDryRunPreflight checks the reference schedule against a healthy
// cluster: only reads and access reviews.
func TestSoakDryRunPreflight(t *testing.T) {
	s := newSim(soakCluster()...)
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", "schedules/soak.txt", "--dry-run", "--preflight"}, t0Flag...)...)
	if code != 0 {
		t.Errorf("exit %d\n%s", code, stdout)
	}
	if m := kubetest.Mutating(s.Actions()); len(m) > 0 {
		t.Errorf("the dry run changed the cluster:\n%s", strings.Join(m, "\n"))
	}
	kubetest.Golden(t, "testdata/soak-dry-run-preflight.golden", transcript(stdout, s, code), *update)
}

// TestRunSmallSchedule runs every kind of step against the fake cluster,
// whose controllers complete the rollouts.
func TestRunSmallSchedule(t *testing.T) {
	s := newSim(soakCluster()...)
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", "testdata/small.txt", "--newsa-hold", "30s"}, t0Flag...)...)
	if code != 0 {
		t.Errorf("exit %d\n%s", code, stdout)
	}
	for _, want := range []string{
		"ROLLED aether-test/deployment/svc-1 at=2026-10-05T03:21:00Z took=",
		"ROLLED aether-system/daemonset/aether-proxy at=2026-10-05T03:22:00Z took=",
		"ROLLED aether-test/deployment/svc-2 at=2026-10-05T03:22:00Z took=",
		"SHRUNK aether-test/deployment/svc-5 replicas=3->0 at=2026-10-05T03:23:00Z restore_at=2026-10-05T03:24:30Z",
		"RESTORED aether-test/deployment/svc-5 replicas=0->3 at=2026-10-05T03:24:30Z",
		fmt.Sprintf("ROLLED aether-test/serviceaccount/sa-new-%d node=soak-worker at=2026-10-05T03:26:00Z took=", t0.Add(6*time.Minute).Unix()),
		"CHURN COMPLETE steps=6 rolled=4 shrunk=1 new_serviceaccounts=1",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q", want)
		}
	}
	if n := s.replicasOf(t, "aether-test", "svc-5"); n != 3 {
		t.Errorf("svc-5 has %d replicas after the run, want 3", n)
	}
	if l := s.leftovers(t); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
	obj, _ := s.Tracker().Get(deploymentsGVR, "aether-test", "svc-1")
	if got := obj.(*appsv1.Deployment).Spec.Template.Annotations[restartedAtAnnotation]; got != "2026-10-05T03:21:00Z" {
		t.Errorf("svc-1 restartedAt = %q", got)
	}
	kubetest.Golden(t, "testdata/run-small.golden", transcript(stdout, s, code), *update)
}

// writeSchedule writes a schedule into a temporary file.
func writeSchedule(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "schedule.txt")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAbortRestoresShrink: a roll that never completes aborts the run, and
// the deployment shrunk before it is restored first.
func TestAbortRestoresShrink(t *testing.T) {
	s := newSim(soakCluster()...)
	s.stuck["aether-test/svc-1"] = true
	path := writeSchedule(t, "1 shrink svc-5 600 -n aether-test\n2 roll deployment/svc-1 -n aether-test\n3 roll deployment/svc-2 -n aether-test\n")
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path, "--rollout-timeout", "2m"}, t0Flag...)...)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	want := []string{
		"SHRUNK aether-test/deployment/svc-5 replicas=3->0 at=2026-10-05T03:21:00Z restore_at=2026-10-05T03:31:00Z",
		"FAILED aether-test/deployment/svc-1 at=2026-10-05T03:22:00Z took=120s: rollout not complete within 120s: observedGeneration=4/5",
		"RESTORED aether-test/deployment/svc-5 replicas=0->3 at=2026-10-05T03:24:00Z",
		"CHURN ABORTED: roll aether-test/deployment/svc-1 (line 2) failed: rollout not complete within 120s: observedGeneration=4/5 -- stop, fix, relaunch with a fresh T0",
	}
	if got := lines[len(lines)-4:]; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("last lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := s.replicasOf(t, "aether-test", "svc-5"); n != 3 {
		t.Errorf("svc-5 has %d replicas after the abort, want 3", n)
	}
	if strings.Contains(kubetest.Transcript(s.Actions()), "patch deployments ns=aether-test name=svc-2") {
		t.Error("a step after the failed one ran")
	}
	kubetest.Golden(t, "testdata/abort-restores-shrink.golden", transcript(stdout, s, code), *update)
}

// TestAbortOnRefusedPatch: a roll the API server refuses is a failed step.
func TestAbortOnRefusedPatch(t *testing.T) {
	s := newSim(soakCluster()...)
	path := writeSchedule(t, "1 roll deployment/svc-1 -n aether-test\n1 roll deployment/svc-2 -n aether-test\n2 roll deployment/svc-3 -n aether-test\n")
	s.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() == "svc-1" {
			return true, nil, apierrors.NewServiceUnavailable("etcdserver: leader changed")
		}
		return false, nil, nil
	})
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path}, t0Flag...)...)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"FAILED aether-test/deployment/svc-1 at=2026-10-05T03:21:00Z took=0s: rollout restart: etcdserver: leader changed",
		"ROLLED aether-test/deployment/svc-2 at=2026-10-05T03:21:00Z",
		"CHURN ABORTED: roll aether-test/deployment/svc-1 (line 1) failed -- stop, fix, relaunch with a fresh T0",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	if strings.Contains(kubetest.Transcript(s.Actions()), "name=svc-3 type=") {
		t.Error("the step after the failed minute ran")
	}
}

// TestSignalAtEveryCall stops the small schedule with SIGTERM during each
// of its API calls in turn (and SIGINT during some) and checks that every
// time the run exits 143 (130), prints why, and leaves no deployment shrunk
// and no new-serviceaccount object behind.
func TestSignalAtEveryCall(t *testing.T) {
	args := append([]string{"--schedule", "testdata/small.txt", "--newsa-hold", "30s"}, t0Flag...)
	full := newSim(soakCluster()...)
	if _, code := run(t, context.Background(), full, args...); code != 0 {
		t.Fatalf("uninterrupted run: exit %d", code)
	}
	calls := len(full.Actions())
	var golden strings.Builder
	for k := 1; k <= calls; k++ {
		sig := syscall.SIGTERM
		if k%5 == 0 {
			sig = syscall.SIGINT
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		s := newSim(soakCluster()...)
		n := 0
		var at string
		s.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
			n++
			if n == k {
				at = kubetest.Line(a)
				cancel(&cli.SignalError{Signal: sig})
			}
			return false, nil, nil
		})
		stdout, code := run(t, ctx, s, args...)
		cancel(nil)
		want := cli.SignalCode(sig)
		if k > calls-2 && strings.Contains(stdout, "CHURN COMPLETE") {
			// The signal came during the last step's cleanup (its two
			// deletes, which run on their own context): nothing was left
			// to stop, and the run says it completed.
			want = 0
		}
		if code != want {
			t.Errorf("%v at call %d (%s): exit %d, want %d\n%s", sig, k, at, code, want, stdout)
		}
		if got := s.replicasOf(t, "aether-test", "svc-5"); got != 3 {
			t.Errorf("%v at call %d (%s): svc-5 left at %d replicas\n%s", sig, k, at, got, stdout)
		}
		if l := s.leftovers(t); len(l) > 0 {
			t.Errorf("%v at call %d (%s): left behind %v\n%s", sig, k, at, l, stdout)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		last := lines[len(lines)-1]
		fmt.Fprintf(&golden, "%v at call %d (%s): exit %d\n  %s\n", sig, k, at, code, last)
		for _, l := range lines {
			if strings.HasPrefix(l, "RESTORED") || strings.HasPrefix(l, "WARN") {
				fmt.Fprintf(&golden, "  %s\n", l)
			}
		}
	}
	kubetest.Golden(t, "testdata/signal-small.golden", golden.String(), *update)
}

// TestPreflightFailures names every problem of a broken cluster, one line
// each, and a run refuses to start on them without changing anything.
func TestPreflightFailures(t *testing.T) {
	objs := soakCluster()
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			switch o.Name {
			case "svc-1":
				o.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
			case "svc-2":
				o.Spec.Strategy.RollingUpdate.MaxUnavailable = nil
				o.Spec.MinReadySeconds = 0
			case "svc-3":
				o.Spec.Template.Spec.Containers[0].Lifecycle = nil
				o.Spec.Template.Spec.Containers[0].ReadinessProbe = nil
			case "svc-4":
				o.Generation = 5
				o.Status.UpdatedReplicas, o.Status.AvailableReplicas, o.Status.Replicas = 1, 2, 4
			case "svc-5":
				zero := int32(0)
				o.Spec.Replicas = &zero
				o.Status.Replicas, o.Status.UpdatedReplicas, o.Status.AvailableReplicas, o.Status.ReadyReplicas = 0, 0, 0, 0
			}
		case *appsv1.DaemonSet:
			if o.Name == "aether-uds-csi" {
				o.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
				o.Status.NumberAvailable = 2
			}
		}
	}
	s := newSim(objs...)
	s.stuck["aether-test/svc-4"] = true // its rollout does not move while the preflight reads it
	s.denied["patch daemonsets aether-system/aether-agent"] = true
	s.denied["update deployments/scale aether-test/svc-5"] = true
	s.denied["create serviceaccounts aether-other/"] = true
	path := writeSchedule(t, `1 roll deployment/svc-1 -n aether-test
2 roll deployment/svc-2 -n aether-test
3 roll deployment/svc-3 -n aether-test
4 roll deployment/svc-4 -n aether-test
5 roll deployment/svc-6 -n aether-test
6 roll daemonset/aether-agent -n aether-system
7 roll daemonset/aether-uds-csi -n aether-system
8 roll statefulset/db -n aether-test
9 new-serviceaccount soak-worker3 -n aether-test
10 new-serviceaccount soak-worker9 -n aether-test
11 new-serviceaccount auto -n aether-other
12 new-serviceaccount soak-worker -n aether-test
20 shrink svc-5 90 -n aether-test
`)
	stdout, code := run(t, context.Background(), s, "--schedule", path, "--preflight")
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{
		"PREFLIGHT FAIL aether-test/deployment/svc-1: strategy Recreate replaces all pods at once; want RollingUpdate",
		"PREFLIGHT FAIL aether-test/deployment/svc-2: maxUnavailable is unset (defaults to 25%); want 0",
		"PREFLIGHT FAIL aether-test/deployment/svc-2: minReadySeconds=0; want >= 10",
		"PREFLIGHT FAIL aether-test/deployment/svc-3: container app has no preStop hook",
		"PREFLIGHT FAIL aether-test/deployment/svc-3: container app has no readiness probe",
		"PREFLIGHT FAIL aether-test/deployment/svc-4: only 2 of 3 replicas available",
		"PREFLIGHT FAIL aether-test/deployment/svc-4: a rollout is in progress",
		"PREFLIGHT FAIL aether-test/deployment/svc-6: does not exist",
		"PREFLIGHT FAIL aether-system/daemonset/aether-agent: may not patch daemonsets.apps (RBAC: access denied)",
		"PREFLIGHT FAIL aether-system/daemonset/aether-uds-csi: updateStrategy OnDelete",
		"PREFLIGHT FAIL aether-system/daemonset/aether-uds-csi: only 2 of 3 pods available",
		"PREFLIGHT FAIL aether-test/statefulset/db: does not exist",
		"PREFLIGHT FAIL aether-test/new-serviceaccount node=soak-worker3: node soak-worker3 is not Ready",
		"PREFLIGHT FAIL aether-test/new-serviceaccount node=soak-worker9: node soak-worker9 does not exist",
		"PREFLIGHT FAIL aether-other/new-serviceaccount node=auto: may not create serviceaccounts (RBAC: access denied)",
		"PREFLIGHT ok aether-test/new-serviceaccount node=soak-worker ready",
		"PREFLIGHT FAIL aether-test/deployment/svc-5: may not update deployments/scale.apps (RBAC: access denied)",
		"PREFLIGHT FAIL aether-test/deployment/svc-5: replicas=0: a shrink would have no count to restore",
		"PREFLIGHT FAILED problems=17",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q", want)
		}
	}
	kubetest.Golden(t, "testdata/preflight-failures.golden", transcript(stdout, s, code), *update)

	// A run checks first and refuses: exit 2, nothing changed.
	s = newSim(objs...)
	s.stuck["aether-test/svc-4"] = true
	_, code = run(t, context.Background(), s, append([]string{"--schedule", path}, t0Flag...)...)
	if code != 2 {
		t.Errorf("run on a broken cluster: exit %d, want 2", code)
	}
	if m := kubetest.Mutating(s.Actions()); len(m) > 0 {
		t.Errorf("a refused run changed the cluster:\n%s", strings.Join(m, "\n"))
	}
}

// TestStaleT0 refuses a run whose schedule is already under way.
func TestStaleT0(t *testing.T) {
	s := newSim(soakCluster()...)
	stdout, code := run(t, context.Background(), s, "--schedule", "testdata/small.txt", "--t0", "2026-10-05T03:10:00Z")
	if code != 2 {
		t.Errorf("exit %d, want 2\n%s", code, stdout)
	}
	if m := kubetest.Mutating(s.Actions()); len(m) > 0 {
		t.Errorf("a refused run changed the cluster:\n%s", strings.Join(m, "\n"))
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // substring of the error; "" for none
	}{
		{[]string{"--schedule", "s", "--t0", "2026-10-05T03:20:00Z"}, ""},
		{[]string{"--schedule", "s", "--dry-run"}, ""},
		{[]string{"--schedule", "s", "--preflight"}, ""},
		{[]string{}, "--schedule is required"},
		{[]string{"--schedule", "s"}, "--t0 is required"},
		{[]string{"--schedule", "s", "--t0", "yesterday"}, "--t0: parsing time"},
		{[]string{"--schedule", "s", "--dry-run", "--namespace", "Bad"}, "--namespace \"Bad\""},
		{[]string{"--schedule", "s", "--dry-run", "--rollout-timeout", "0s"}, "--rollout-timeout must be positive"},
		{[]string{"--schedule", "s", "--dry-run", "--newsa-labels", "a=b,c"}, "\"c\" is not k=v"},
		{[]string{"--schedule", "s", "--dry-run", "--newsa-labels", "mesh.io/inject=yes"}, ""},
		{[]string{"--schedule", "s", "--dry-run", "--newsa-command", " "}, "--newsa-command must not be empty"},
		{[]string{"--schedule", "s", "--dry-run", "x"}, "unexpected arguments"},
	} {
		_, help, err := parseFlags(tc.args, &strings.Builder{})
		if help {
			t.Errorf("%v: taken as --help", tc.args)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	var stderr strings.Builder
	if err := RunEnv(context.Background(), Env{}, []string{"--help"}, &strings.Builder{}, &stderr); err != nil {
		t.Errorf("--help: %v", err)
	}
	for _, want := range []string{"roll <kind>/<name> [-n ns]", "CHURN ABORTED: <why> -- stop, fix, relaunch with a fresh T0", "-rollout-timeout"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if code := cli.Code(RunEnv(context.Background(), Env{}, []string{"--schedule", "testdata/nope.txt", "--dry-run"}, &strings.Builder{}, &strings.Builder{})); code != 2 {
		t.Errorf("missing schedule: exit %d, want 2", code)
	}
}

// TestNewServiceAccount: auto takes the eligible workers in turn, the pod
// runs under the new account on the chosen node, and everything is deleted.
func TestNewServiceAccount(t *testing.T) {
	s := newSim(soakCluster()...)
	path := writeSchedule(t, "1 new-serviceaccount auto -n aether-test\n5 new-serviceaccount auto -n aether-test\n9 new-serviceaccount soak-worker2 -n aether-test\n")
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path, "--newsa-labels", "mesh.io/inject=enabled"}, t0Flag...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	var nodes []string
	for _, a := range s.Actions() {
		c, ok := a.(k8stesting.CreateAction)
		if !ok || a.GetResource().Resource != "deployments" {
			continue
		}
		d := c.GetObject().(*appsv1.Deployment)
		pod := d.Spec.Template
		if pod.Spec.ServiceAccountName != d.Name || pod.Labels["mesh.io/inject"] != "enabled" || pod.Labels[newSALabel] != d.Name {
			t.Errorf("%s: pod template %+v", d.Name, pod)
		}
		if got := pod.Spec.Containers[0].Command; strings.Join(got, " ") != "sh -c exec sleep 86400" {
			t.Errorf("%s: command %q", d.Name, got)
		}
		nodes = append(nodes, pod.Spec.NodeSelector["kubernetes.io/hostname"])
	}
	if got := strings.Join(nodes, " "); got != "soak-worker soak-worker2 soak-worker2" {
		t.Errorf("nodes %s, want soak-worker soak-worker2 soak-worker2", got)
	}
	if l := s.leftovers(t); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
	if !strings.Contains(stdout, "CHURN COMPLETE steps=3 rolled=0 shrunk=0 new_serviceaccounts=3") {
		t.Errorf("output:\n%s", stdout)
	}
}

// TestNewServiceAccountNeverReady: a pod that never becomes available is a
// failed step; its objects are deleted anyway.
func TestNewServiceAccountNeverReady(t *testing.T) {
	s := newSim(soakCluster()...)
	name := fmt.Sprintf("sa-new-%d", t0.Add(time.Minute).Unix())
	s.stuck["aether-test/"+name] = true
	path := writeSchedule(t, "1 new-serviceaccount auto -n aether-test\n")
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path, "--rollout-timeout", "1m"}, t0Flag...)...)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"FAILED aether-test/serviceaccount/" + name + " node=soak-worker at=2026-10-05T03:21:00Z took=60s: its pod never became available: rollout not complete within 60s: updated=0/1",
		"CHURN ABORTED: new-serviceaccount aether-test/serviceaccount/" + name + " (line 1) failed",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	if l := s.leftovers(t); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}
