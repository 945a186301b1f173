package kickoff

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/gate"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/provenance"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func exitCode(err error) int { return cli.Code(err) }

// runArgs are the flags of a test run; extra ones are appended.
func (fx *kfix) runArgs(profile string, extra ...string) []string {
	args := []string{"run", profile, "--context", kContext, "--namespace", kNS, "--release", kRelease,
		"--targets", fx.targets, "--rate", "21", "--duration", "150s", "--statsd", "off",
		"--dir", fx.dir, "--reader-image", kReader, "--watch-interval", "30s", "--values", fx.values}
	return append(args, extra...)
}

// runFiles are the run directory's files a golden shows.
var runFiles = []string{cluster.RunEnvFile, gate.DirEngines, gate.DirShares}

// TestKickoffE2E is a whole e2e run: every step in order, the load ends,
// the saver copies the verdict, the gate grades it PASS.
func TestKickoffE2E(t *testing.T) {
	fx := newKfix(t)
	fx.pvcFiles(ProfileE2E)
	err := fx.run(fx.runArgs(ProfileE2E, "--statsd", "auto", "--statsd-service", "o11y/otel-scraper")...)
	fx.golden("e2e-pass", err, runFiles...)
	out := fx.stdout.String()
	for _, want := range []string{"SORTIE_SAVED dir=", "SUMMARY restart-watch verdict=PASS", "VERDICT PASS targets=3", "SOAK PASS gate=0 watchdog=PASS churn=none saver=saved"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"SAVED", "report.json", "results.jsonl", "save.log", "restart-watch.log", kickoffLog, planFile, valuesFile} {
		if _, err := os.Stat(filepath.Join(fx.dir, f)); err != nil {
			t.Errorf("run directory lacks %s: %v", f, err)
		}
	}
	// The plan points at the headless Service and was rendered for the two
	// engines that were listed, each target with its own 2xx floor.
	plan, _ := os.ReadFile(filepath.Join(fx.dir, planFile))
	if !strings.Contains(string(plan), "soak-sortie-engine-nodes.sortie.svc.cluster.local:8443") ||
		!strings.Contains(string(plan), "10.96.0.10:9125") ||
		!strings.Contains(string(plan), `, thresholds: ["rate:benchmark.http_2xx >= `) ||
		strings.Contains(string(plan), `      - "rate:benchmark.http_2xx >= `) {
		t.Errorf("plan.yaml:\n%s", plan)
	}
	// kickoff.log holds the kickoff's lines with their times.
	klog, _ := os.ReadFile(filepath.Join(fx.dir, kickoffLog))
	if !strings.Contains(string(klog), "2031-03-04T10:00:00Z STEP run e2e-20310304T100000Z") {
		t.Errorf("kickoff.log:\n%s", klog)
	}
}

// TestKickoffSoak is a soak run with a churn schedule of one roll, started
// at T0 beside the watchdog.
func TestKickoffSoak(t *testing.T) {
	fx := newKfix(t)
	fx.pvcFiles(ProfileSoak)
	fx.rolls = filepath.Join(fx.tmp, "rolls.txt")
	write(t, fx.rolls, "# one roll under the load\n1 roll deployment/svc-a\n")
	err := fx.run(fx.runArgs(ProfileSoak, "--rolls", fx.rolls)...)
	fx.golden("soak-pass", err, cluster.RunEnvFile)
	out := fx.stdout.String()
	for _, want := range []string{"ROLLED soak/deployment/svc-a", "CHURN COMPLETE steps=1", "SOAK PASS gate=0 watchdog=PASS churn=complete saver=saved"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestKickoffSoakSampleAfter: soak run's --sample-after and --sample-age
// reach the churn driver, which samples the rolled workload at that age
// after its roll.
func TestKickoffSoakSampleAfter(t *testing.T) {
	fx := newKfix(t)
	fx.pvcFiles(ProfileSoak)
	fx.rolls = filepath.Join(fx.tmp, "rolls.txt")
	write(t, fx.rolls, "1 roll deployment/svc-a\n")
	_ = fx.run(fx.runArgs(ProfileSoak, "--rolls", fx.rolls, "--sample-after", "soak/deployment/svc-a", "--sample-age", "30")...)
	out := fx.stdout.String()
	if !strings.Contains(out, "ROLLED soak/deployment/svc-a") || !regexp.MustCompile(`SAMPLE(D| FAILED) soak/deployment/svc-a at=\S+ \(30s after its roll\)`).MatchString(out) {
		t.Errorf("no sample 30s after the roll:\n%s", out)
	}
}

// TestKickoffSoakNewSA: a new-serviceaccount step of a soak run's
// schedule runs the release's own engine image in its client mode, against
// the run's targets.
func TestKickoffSoakNewSA(t *testing.T) {
	fx := newKfix(t)
	fx.pvcFiles(ProfileSoak)
	fx.rolls = filepath.Join(fx.tmp, "rolls.txt")
	write(t, fx.rolls, "1 new-serviceaccount auto\n")
	worker := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kind-worker", Labels: map[string]string{"kubernetes.io/hostname": "kind-worker"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	fx.objects = append(fx.objects, worker)
	fx.start()
	// The churn's client is a fake of its own over the same objects: watch
	// them for the step's Deployment.
	w, err := fx.cs.Tracker().Watch(appsv1.SchemeGroupVersion.WithResource("deployments"), kTargets)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	_ = fx.run(fx.runArgs(ProfileSoak, "--rolls", fx.rolls)...)
	var client *appsv1.Deployment
	for client == nil {
		select {
		case ev := <-w.ResultChan():
			if d, ok := ev.Object.(*appsv1.Deployment); ok && strings.HasPrefix(d.Name, "sa-new-") {
				client = d
			}
			continue
		default:
		}
		break
	}
	engine := "ghcr.io/sortie-soak/sortie-engine@sha256:" + strings.Repeat("e", 64)
	if client == nil {
		t.Fatalf("no new-serviceaccount Deployment was created:\n%s", fx.stdout.String())
	}
	ctr := client.Spec.Template.Spec.Containers[0]
	args := strings.Join(ctr.Args, " ")
	if ctr.Image != engine || !strings.HasPrefix(args, "oneshot ") || !strings.Contains(args, "--target svc-a=http://svc-a.soak.test:8080/") {
		t.Errorf("engine image %q; client image %q args %s", engine, ctr.Image, args)
	}
}

// TestKickoffAborts covers each way a run stops before the load: what was
// started is named, and nothing after the failing step happens.
func TestKickoffAborts(t *testing.T) {
	tests := []struct {
		name  string
		setup func(fx *kfix)
		extra []string
		check func(t *testing.T, fx *kfix)
	}{
		{
			name: "run-dir-exists",
			setup: func(fx *kfix) {
				os.MkdirAll(fx.dir, 0o755)
				write(fx.t, filepath.Join(fx.dir, "run.env"), "JOB=earlier\n")
			},
			check: func(t *testing.T, fx *kfix) {
				if len(fx.componentsCreated) != 0 {
					t.Errorf("clients were made for a refused directory: %v", fx.componentsCreated)
				}
			},
		},
		{
			name: "provenance-tag-refused",
			setup: func(fx *kfix) {
				write(fx.t, fx.values, standInValues+"  allowTags: true\n  engine:\n    digest: \"\"\n    tag: \"1.0\"\n")
			},
		},
		{
			name:  "verify-key-unreadable",
			extra: []string{"--verify", "--key", "/nonexistent/cosign.pub"},
		},
		{
			name:  "chart-digest-differs",
			extra: []string{"--chart-digest", "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"},
		},
		{
			name: "preflight-failures",
			setup: func(fx *kfix) {
				fx.objects = append(fx.objects,
					systemPod("kube-proxy-9xk2d", corev1.PodRunning, 1, 10),
					systemPod("coredns-5d78c9869d-fghij", corev1.PodPending, 0, 1),
					&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: "soak-sortie-driver",
						Labels: map[string]string{"app.kubernetes.io/instance": kRelease, "app.kubernetes.io/name": "sortie"}}},
					&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "sortie-soak"}, Value: 5},
				)
				fx.objects = without(fx.objects, "svc-b")
				fx.helm.status = "deployed"
			},
			extra: []string{"--watch-namespaces", "gone"},
		},
		{
			// An empty system namespace is a wrong name or a mesh not
			// installed: refused, not read as "0 pods, all ready".
			name:  "empty-system-namespace",
			setup: func(fx *kfix) { fx.objects = append(fx.objects, namespace("aether-empty")) },
			extra: []string{"--system-namespaces", "kube-system,aether-empty"},
		},
		{
			name: "no-default-storage-class",
			setup: func(fx *kfix) {
				fx.objects = append(without(fx.objects, "standard"), storageClass("fast", false), storageClass("slow", false))
			},
			check: noInstall,
		},
		{
			// The claim is made but never bound: the run stops there, before
			// the engines, naming the claim, its phase, its class and what
			// the cluster said about it.
			name: "pvc-does-not-bind",
			setup: func(fx *kfix) {
				fx.pvcUnbindable = true
				fx.objects = append(fx.objects,
					claimEvent("report.1", corev1.EventTypeNormal, "ExternalProvisioning", "Waiting for a volume to be created by the external provisioner.", time.Second),
					claimEvent("report.2", corev1.EventTypeWarning, "ProvisioningFailed", `failed to provision volume with StorageClass "standard": no space left`, 2*time.Second),
					claimEvent("report.3", corev1.EventTypeNormal, "ExternalProvisioning", "Waiting for a volume to be created by the external provisioner.", 3*time.Second),
					// Another object's event, which the fake's list does not
					// filter out.
					&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: "other.1"}, Type: corev1.EventTypeWarning, Reason: "BackOff",
						InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: kNS, Name: "other"}, LastTimestamp: metav1.NewTime(kStart.Add(time.Minute))},
				)
			},
			extra: []string{"--pvc-timeout", "6s"},
			check: func(t *testing.T, fx *kfix) {
				want := `pvc/soak-sortie-report is not Bound after 6s: phase Pending, storage class standard (volumeBindingMode Immediate), event Warning ProvisioningFailed "failed to provision volume with StorageClass \"standard\": no space left"`
				if !strings.Contains(abortLine(fx.stdout.String()), want) {
					t.Errorf("ABORT lacks %s:\n%s", want, fx.stdout.String())
				}
				if strings.Contains(fx.rec.String(), "helm install") {
					t.Error("the engines were installed on an unbound claim")
				}
			},
		},
		{
			name:  "pvc-lost",
			setup: func(fx *kfix) { fx.objects = append(fx.objects, reportClaim("standard", corev1.ClaimLost)) },
			check: noInstall,
		},
		{
			name: "pvc-class-gone",
			setup: func(fx *kfix) {
				fx.pvcUnbindable = true
				fx.objects = append(fx.objects, reportClaim("gone", corev1.ClaimPending))
			},
			check: noInstall,
		},
		{
			name:  "engines-not-ready",
			setup: func(fx *kfix) { fx.dsReadyAt = 0 },
			extra: []string{"--engines-timeout", "10s"},
		},
		{
			name:  "service-lists-no-engine",
			setup: func(fx *kfix) { fx.slicesAt = 0 },
			extra: []string{"--engines-timeout", "10s", "--settle", "0s"},
		},
		{
			// The Job ended before the kickoff looked at its pod: the saver,
			// armed first, copies its report out, and the ABORT quotes it.
			name: "job-ended-before-pod-check",
			setup: func(fx *kfix) {
				fx.driverPhase = corev1.PodSucceeded
				fx.jobDoneAtUpgrade = true
				fx.duration = 0
				fx.pvcFiles(ProfileE2E)
			},
			check: func(t *testing.T, fx *kfix) {
				if _, err := os.Stat(filepath.Join(fx.dir, "SAVED")); err != nil {
					t.Errorf("the saver did not save the ended run: %v", err)
				}
			},
		},
		{
			name:  "driver-pod-pending",
			setup: func(fx *kfix) { fx.driverPhase = corev1.PodPending },
			extra: []string{"--pod-timeout", "6s"},
		},
		{
			// The scheduler's Message says why, its Reason only that it
			// could not: the ABORT quotes both.
			name: "driver-pod-unschedulable",
			setup: func(fx *kfix) {
				fx.driverPhase = corev1.PodPending
				fx.driverUnschedulable = "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
			},
			extra: []string{"--pod-timeout", "6s"},
			check: func(t *testing.T, fx *kfix) {
				want := `(pod/soak-sortie-driver-5kq9t is Pending (unscheduled: Unschedulable "` + fx.driverUnschedulable + `"))`
				if !strings.Contains(abortLine(fx.stdout.String()), want) {
					t.Errorf("the ABORT does not quote the scheduler's reason and message %s:\n%s", want, fx.stdout.String())
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newKfix(t)
			if tt.setup != nil {
				tt.setup(fx)
			}
			err := fx.run(fx.runArgs(ProfileE2E, tt.extra...)...)
			if code := exitCode(err); code != cli.ExitFail {
				t.Errorf("exit %d, want 1:\n%s", code, fx.stdout.String())
			}
			if !strings.Contains(fx.stdout.String(), "ABORT ") {
				t.Errorf("no ABORT line:\n%s", fx.stdout.String())
			}
			fx.golden("abort-"+tt.name, err, cluster.RunEnvFile)
			if tt.check != nil {
				tt.check(t, fx)
			}
		})
	}
}

// noInstall checks that a run stopped in the pre-flight: nothing was
// created and nothing installed.
func noInstall(t *testing.T, fx *kfix) {
	t.Helper()
	if !strings.Contains(fx.stdout.String(), "ABORT pre-flight failed") {
		t.Errorf("the run did not stop in the pre-flight:\n%s", fx.stdout.String())
	}
	for _, l := range strings.Split(fx.rec.String(), "\n") {
		if strings.HasPrefix(l, "create ") || strings.HasPrefix(l, "helm install") {
			t.Errorf("the run went on after its pre-flight failed: %s", l)
		}
	}
}

// TestKickoffClaimWaitForFirstConsumer: a claim whose class binds it only
// when a pod that mounts it is scheduled is not waited for; the STEP line
// says so, and the run goes on to its end.
func TestKickoffClaimWaitForFirstConsumer(t *testing.T) {
	fx := newKfix(t)
	fx.pvcFiles(ProfileE2E)
	fx.pvcUnbindable = true
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := storageClass("standard", true)
	sc.VolumeBindingMode = &wffc
	fx.objects = append(without(fx.objects, "standard"), sc)
	err := fx.run(fx.runArgs(ProfileE2E)...)
	wantLines(t, fx.stdout.String(),
		"PREFLIGHT ok pvc/soak-sortie-report is absent: the run creates it with storage class standard (the default class, volumeBindingMode WaitForFirstConsumer)",
		"STEP pvc/soak-sortie-report Pending until the driver pod is scheduled: storage class standard exists and binds on first consumer (volumeBindingMode WaitForFirstConsumer)",
		"SOAK PASS",
	)
	if exitCode(err) != 0 {
		t.Errorf("exit %d", exitCode(err))
	}
}

// TestKickoffKeptClaim: a report PVC that exists and is Bound is kept and
// read back Bound; the run goes on to its end.
func TestKickoffKeptClaim(t *testing.T) {
	fx := newKfix(t)
	fx.pvcFiles(ProfileE2E)
	fx.pvcUnbindable = true
	fx.objects = append(fx.objects, reportClaim("standard", corev1.ClaimBound))
	err := fx.run(fx.runArgs(ProfileE2E)...)
	wantLines(t, fx.stdout.String(),
		"PREFLIGHT ok pvc/soak-sortie-report exists and is Bound to volume pvc-0a1b2c3d (storage class standard)",
		"STEP pvc/soak-sortie-report kept: it exists (storage class standard)",
		"STEP pvc/soak-sortie-report Bound to volume pvc-0a1b2c3d",
		"SOAK PASS",
	)
	if exitCode(err) != 0 || strings.Contains(fx.rec.String(), "create persistentvolumeclaims") {
		t.Errorf("exit %d; a claim was created beside the kept one:\n%s", exitCode(err), fx.rec.String())
	}
}

// wantLines checks that out holds each of want.
func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// abortLine returns the ABORT line of out, or "".
func abortLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ABORT ") {
			return l
		}
	}
	return ""
}

// without drops the objects of a name.
func without(objs []runtime.Object, name string) []runtime.Object {
	var out []runtime.Object
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok && m.GetName() == name {
			continue
		}
		out = append(out, o)
	}
	return out
}

// TestKickoffInterrupted: SIGTERM while the run is under way stops the
// watchdog (its summary says TERM), leaves the Job to run, and exits 143.
func TestKickoffInterrupted(t *testing.T) {
	fx := newKfix(t)
	fx.signalAt = "STEP waiting for the saver"
	err := fx.run(fx.runArgs(ProfileE2E)...)
	fx.golden("interrupted", err)
	out := fx.stdout.String()
	for _, want := range []string{"SUMMARY restart-watch verdict=UNPROVEN", "ended=TERM", "INTERRUPTED terminated: the Job goes on"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !fx.exists(gvrJobs, kNS, kNames.Job) {
		t.Error("the Job was deleted")
	}
}

// TestEmbeddedChartDigest: the digest the kickoff records for the chart it
// installs is the content digest of the chart's source directory, so an
// operator can hold a binary to a reviewed chart with --chart-digest.
func TestEmbeddedChartDigest(t *testing.T) {
	dir := t.TempDir()
	path, digest, err := writeEmbeddedChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	srcDir := filepath.Join("..", "..", "charts", "sortie")
	if _, err := os.Stat(srcDir); err != nil {
		t.Skipf("the chart's source is not here (a sandbox with this package's files only): %v", err)
	}
	src, err := provenance.ChartDirDigest(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	written, err := provenance.ChartDirDigest(path)
	if err != nil {
		t.Fatal(err)
	}
	if digest != src || written != src {
		t.Errorf("embedded %s, written %s, source %s", digest, written, src)
	}
}

// TestKickoffPreflightOnly: --preflight reads and changes nothing, in the
// cluster (only get and list in the transcript) or on disk.
func TestKickoffPreflightOnly(t *testing.T) {
	fx := newKfix(t)
	fx.rolls = filepath.Join(fx.tmp, "rolls.txt")
	write(t, fx.rolls, "1 roll deployment/svc-a\n")
	err := fx.run(fx.runArgs(ProfileSoak, "--rolls", fx.rolls, "--preflight")...)
	if exitCode(err) != 0 {
		t.Errorf("exit %d: %v", exitCode(err), err)
	}
	fx.golden("preflight-only", err)
	for _, l := range strings.Split(strings.TrimSpace(fx.rec.String()), "\n") {
		if !strings.HasPrefix(l, "get ") && !strings.HasPrefix(l, "list ") && !strings.HasPrefix(l, "helm status ") {
			t.Errorf("the pre-flight changed something: %s", l)
		}
	}
	if _, err := os.Stat(fx.dir); err == nil {
		t.Errorf("the pre-flight made %s", fx.dir)
	}
}
