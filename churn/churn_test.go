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

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/kube/kubetest"
	"github.com/sortie-soak/sortie/record"
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
	if !strings.Contains(stdout, "PLAN steps=37 rolls=33 shrinks=1 new_serviceaccounts=2 end=T0+451m30s") ||
		!strings.Contains(stdout, "PLAN T0+30m at=2026-10-05T03:50:00Z sample aether-system/daemonset/aether-proxy") {
		t.Error("the reference schedule is not 33 rolls, 1 shrink, 2 new-serviceaccount steps and the proxies' baseline sample")
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
		fmt.Sprintf("ROLLED aether-test/newsa/sa-new-%d at=2026-10-05T03:26:00Z took=", t0.Add(6*time.Minute).Unix()),
		"tally=svc-1:ok=240,non2xx=0,connerr=0,codes=-;svc-3:ok=240,non2xx=0,connerr=0,codes=-",
		"CHURN COMPLETE steps=6 rolled=4 shrunk=1 new_serviceaccounts=1 findings=0",
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
		{[]string{"--schedule", "s", "--dry-run", "--newsa-targets", "a=ftp://x/,b"}, `"b" is not name=url`},
		{[]string{"--schedule", "s", "--dry-run", "--newsa-targets", "a=ftp://x/"}, `target a: "ftp://x/" is not an http`},
		{[]string{"--schedule", "s", "--dry-run", "--newsa-targets", "a=http://x/", "--newsa-rate", "0"}, "--rate 0"},
		{[]string{"--schedule", "s", "--dry-run", "--newsa-annotations", "bad key=1"}, `--newsa-annotations key "bad key"`},
		{[]string{"--schedule", "s", "--dry-run", "--newsa-upstreams-annotation", "bad key"}, `--newsa-upstreams-annotation "bad key"`},
		{[]string{"--schedule", "s", "--dry-run", "x"}, "unexpected arguments"},
		{[]string{"--schedule", "s", "--dry-run", "--sample-after", "aether-system/daemonset/aether-proxy,aether-test/deployment/svc-1"}, ""},
		{[]string{"--schedule", "s", "--dry-run", "--sample-after", "aether-proxy"}, `--sample-after "aether-proxy": want <namespace>/<kind>/<name>`},
		{[]string{"--schedule", "s", "--dry-run", "--sample-age", "0"}, "--sample-age must be positive"},
		{[]string{"--schedule", "s", "--dry-run", "--sa-rule", "mine", "--managed-label", "Bad Key=x", "--min-prestop-sleep", "1500ms"}, "--sa-rule must be own or any"},
		{[]string{"--schedule", "s", "--dry-run", "--managed-label", "Bad Key=x"}, `--managed-label key "Bad Key"`},
		{[]string{"--schedule", "s", "--dry-run", "--min-prestop-sleep", "1500ms"}, "--min-prestop-sleep must be whole seconds"},
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
	// --settle moves the schedule's T0 after the load start, as the bash
	// harness's churn took its T0 240 s into the load.
	o, _, err := parseFlags([]string{"--schedule", "s", "--t0", "2026-10-05T03:20:00Z", "--settle", "240"}, &strings.Builder{})
	if want := time.Date(2026, 10, 5, 3, 24, 0, 0, time.UTC); err != nil || !o.T0.Equal(want) {
		t.Errorf("--settle 240: T0 %v, %v; want %v", o.T0, err, want)
	}
	// Bare integers are seconds, as the bash harness's flags took them.
	o, _, err = parseFlags([]string{"--schedule", "s", "--dry-run", "--newsa-hold", "90", "--poll", "2", "--rollout-timeout", "10m"}, &strings.Builder{})
	if err != nil || o.NewSAHold != 90*time.Second || o.Poll != 2*time.Second || o.RolloutTimeout != 10*time.Minute {
		t.Errorf("bare seconds: hold %v poll %v rollout %v, %v", o.NewSAHold, o.Poll, o.RolloutTimeout, err)
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

// TestNewServiceAccount: auto takes the eligible workers in turn from T0's
// minute; the pod runs the engine's client mode under the new account on
// the chosen node, with the mesh's label and annotation; the tally is read
// back from the pod's log, and everything is deleted, in that order.
func TestNewServiceAccount(t *testing.T) {
	s := newSim(soakCluster()...)
	path := writeSchedule(t, "1 new-serviceaccount auto -n aether-test\n5 new-serviceaccount auto -n aether-test\n9 new-serviceaccount soak-worker2 -n aether-test\n")
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path, "--newsa-annotations", "team=soak"}, t0Flag...)...)
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
		if pod.Spec.ServiceAccountName != d.Name || pod.Labels["aether.io/managed"] != "true" || pod.Labels[newSALabel] != d.Name {
			t.Errorf("%s: pod labels %v, account %s", d.Name, pod.Labels, pod.Spec.ServiceAccountName)
		}
		if diff := cmp.Diff(map[string]string{"config.aether.io/upstreams": "svc-1,svc-3", "team": "soak"}, pod.Annotations); diff != "" {
			t.Errorf("%s: annotations (-want +got):\n%s", d.Name, diff)
		}
		ctr := pod.Spec.Containers[0]
		want := "oneshot --step " + d.Name + " --node $(SORTIE_NEWSA_NODE) --requests 240 --rate 2 --timeout 5s" +
			" --target svc-1=http://svc-1.aether-test.mesh:18081/ --target svc-3=http://svc-3.aether-test.mesh:18081/"
		if got := strings.Join(ctr.Args, " "); got != want || len(ctr.Command) != 0 || ctr.Image != newsaArgs[1] {
			t.Errorf("%s: image %s command %q args\n %s\nwant\n %s", d.Name, ctr.Image, ctr.Command, got, want)
		}
		nodes = append(nodes, pod.Spec.NodeSelector["kubernetes.io/hostname"])
	}
	if got := strings.Join(nodes, " "); got != "soak-worker soak-worker2 soak-worker2" {
		t.Errorf("nodes %s, want soak-worker soak-worker2 soak-worker2", got)
	}
	// The first step's calls, in order.
	name := fmt.Sprintf("sa-new-%d", t0.Add(time.Minute).Unix())
	var seq []string
	for _, a := range s.Actions() {
		l := kubetest.Line(a)
		if a.GetResource().Resource == "selfsubjectaccessreviews" {
			continue // the preflight's
		}
		if strings.Contains(l, "serviceaccounts") || strings.Contains(l, "deployments ns=aether-test name="+name) ||
			strings.Contains(l, "pods") || (a.GetVerb() == "create" && a.GetResource().Resource == "deployments") {
			seq = append(seq, l)
		}
		if a.GetVerb() == "delete" && a.GetResource().Resource == "serviceaccounts" {
			break
		}
	}
	wantSeq := []string{
		"create serviceaccounts ns=aether-test name=" + name,
		"create deployments ns=aether-test name=" + name,
		"get deployments ns=aether-test name=" + name,
		"list pods ns=aether-test labels=sortie.io/new-serviceaccount=" + name,
		"get pods/log ns=aether-test",
		"delete deployments ns=aether-test name=" + name,
		"delete serviceaccounts ns=aether-test name=" + name,
	}
	if diff := cmp.Diff(wantSeq, seq); diff != "" {
		t.Errorf("first step's calls (-want +got):\n%s", diff)
	}
	if l := s.leftovers(t); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
	for _, want := range []string{
		"ROLLED aether-test/newsa/" + name + " at=2026-10-05T03:21:00Z took=0s node=soak-worker ready=0s tally=svc-1:ok=240,non2xx=0,connerr=0,codes=-;svc-3:ok=240,non2xx=0,connerr=0,codes=-\n",
		"CHURN COMPLETE steps=3 rolled=0 shrunk=0 new_serviceaccounts=3 findings=0",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	// The gate's reader of rolls takes the step's lines.
	rl, err := record.ParseRolls(strings.NewReader(stdout))
	if err != nil || len(rl.Rolls) != 3 {
		t.Fatalf("read as rolls: %d, %v", len(rl.Rolls), err)
	}
	if v, _ := rl.Rolls[0].Field("tally"); !strings.HasPrefix(v, "svc-1:ok=240,") {
		t.Errorf("tally field %q", v)
	}
}

// TestNewServiceAccountRotatesByT0: the first auto node depends on T0's
// minute, so successive soaks start on different nodes.
func TestNewServiceAccountRotatesByT0(t *testing.T) {
	s := newSim(soakCluster()...)
	path := writeSchedule(t, "1 new-serviceaccount auto -n aether-test\n5 new-serviceaccount auto -n aether-test\n")
	stdout, code := run(t, context.Background(), s, "--schedule", path, "--t0", t0.Add(time.Minute).Format(time.RFC3339))
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	var nodes []string
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(l, "ROLLED ") {
			_, rest, _ := strings.Cut(l, " node=")
			node, _, _ := strings.Cut(rest, " ")
			nodes = append(nodes, node)
		}
	}
	if got := strings.Join(nodes, " "); got != "soak-worker2 soak-worker" {
		t.Errorf("T0 one minute later: nodes %s, want soak-worker2 soak-worker\n%s", got, stdout)
	}
}

// TestNewServiceAccountFinding: a tally with a request that was not a 2xx
// is a FAILED line, a finding: the run goes on and completes, and says so.
func TestNewServiceAccountFinding(t *testing.T) {
	s := newSim(soakCluster()...)
	s.newsaLog = func(p *corev1.Pod) string {
		return "starting\nSORTIE_NEWSA_FINAL step=" + p.Labels[newSALabel] + " node=" + p.Spec.NodeName +
			" svc-1:ok=200,non2xx=37,connerr=3,codes=503x37+err_connectx3 svc-3:ok=240,non2xx=0,connerr=0,codes=-\n"
	}
	path := writeSchedule(t, "1 new-serviceaccount auto -n aether-test\n2 roll deployment/svc-1 -n aether-test\n")
	stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path}, t0Flag...)...)
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	name := fmt.Sprintf("sa-new-%d", t0.Add(time.Minute).Unix())
	for _, want := range []string{
		"FAILED aether-test/newsa/" + name + " at=2026-10-05T03:21:00Z took=0s node=soak-worker ready=0s tally=svc-1:ok=200,non2xx=37,connerr=3,codes=503x37+err_connectx3;svc-3:ok=240,non2xx=0,connerr=0,codes=-: not every request was a 2xx",
		"ROLLED aether-test/deployment/svc-1 at=2026-10-05T03:22:00Z",
		"CHURN COMPLETE steps=2 rolled=1 shrunk=0 new_serviceaccounts=1 findings=1",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	if l := s.leftovers(t); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// TestNewServiceAccountNoTally: a pod that never prints its tally (or
// prints one that does not read) is a hole: the step fails, the run
// aborts, and the objects are deleted anyway.
func TestNewServiceAccountNoTally(t *testing.T) {
	for _, tc := range []struct{ log, why string }{
		{"starting\n", "no SORTIE_NEWSA_FINAL line within 126s of ready (the log holds no final line yet)"},
		{"SORTIE_NEWSA_FINAL step=x node=y svc-1:ok=1\n", "its final line does not read"},
	} {
		s := newSim(soakCluster()...)
		s.newsaLog = func(*corev1.Pod) string { return tc.log }
		path := writeSchedule(t, "1 new-serviceaccount auto -n aether-test\n")
		stdout, code := run(t, context.Background(), s, append([]string{"--schedule", path, "--newsa-requests", "3", "--newsa-hold", "2m"}, t0Flag...)...)
		if code != 1 {
			t.Errorf("%q: exit %d, want 1", tc.log, code)
		}
		name := fmt.Sprintf("sa-new-%d", t0.Add(time.Minute).Unix())
		for _, want := range []string{
			"FAILED aether-test/newsa/" + name + " at=2026-10-05T03:21:00Z took=",
			" node=soak-worker ready=0s: " + tc.why,
			"CHURN ABORTED: new-serviceaccount aether-test/newsa/" + name + " (line 1) failed",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%q: missing %q in\n%s", tc.log, want, stdout)
			}
		}
		if l := s.leftovers(t); len(l) > 0 {
			t.Errorf("left behind: %v", l)
		}
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
		"FAILED aether-test/newsa/" + name + " at=2026-10-05T03:21:00Z took=60s node=soak-worker: its pod never became available: rollout not complete within 60s: updated=0/1",
		"CHURN ABORTED: new-serviceaccount aether-test/newsa/" + name + " (line 1) failed",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in\n%s", want, stdout)
		}
	}
	if l := s.leftovers(t); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}
