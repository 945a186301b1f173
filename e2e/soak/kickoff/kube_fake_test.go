package kickoff

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/internal/kube/kubetest"
	"github.com/sortie-soak/sortie/record"
)

// The fake cluster of the kickoff tests: release "soak" in namespace
// "sortie", three targets in namespace "soak" (the gate's clean fixture:
// svc-a and svc-b at weight 3, echo at 1, 21 rps per node), two nodes.
const (
	kNS      = "sortie"
	kTargets = "soak"
	kRelease = "soak"
	kContext = "kind-soak"
	kReader  = "registry.example/reader@sha256:1111111111111111111111111111111111111111111111111111111111111111"
)

var (
	kStart     = time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC)
	kNames     = chart.NamesFor(kRelease)
	gvrPods    = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvrJobs    = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	gvrDS      = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
	gvrPVCs    = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	gvrSlices  = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	engineNode = []struct{ pod, ip, node string }{
		{"soak-sortie-engine-7xq2p", "10.0.1.5", "node-a"},
		{"soak-sortie-engine-m4k8d", "10.0.2.6", "node-b"},
	}
)

// standInValues pin the release's images to stand-in digests.
const standInValues = `images:
  engine:
    digest: "sha256:eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
  driver:
    digest: "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
`

// fakeHelm records every call and acts like the chart on the fake
// cluster: an install makes the engines, an upgrade the driver's Job.
type fakeHelm struct {
	rec       *kubetest.Recorder
	mu        sync.Mutex
	installed bool
	status    string // a release that exists before the run
	onInstall func()
	onUpgrade func()
}

var _ cluster.Helm = (*fakeHelm)(nil)

func (h *fakeHelm) Install(_ context.Context, release, ns string, values map[string]any) error {
	h.rec.Add(fmt.Sprintf("helm install %s ns=%s %s", release, ns, flatValues(release, values)))
	h.mu.Lock()
	h.installed = true
	h.mu.Unlock()
	if h.onInstall != nil {
		h.onInstall()
	}
	return nil
}

func (h *fakeHelm) Upgrade(_ context.Context, release, ns string, values map[string]any) error {
	h.rec.Add(fmt.Sprintf("helm upgrade %s ns=%s %s", release, ns, flatValues(release, values)))
	if h.onUpgrade != nil {
		h.onUpgrade()
	}
	return nil
}

func (h *fakeHelm) Uninstall(_ context.Context, release, ns string) error {
	h.rec.Add(fmt.Sprintf("helm uninstall %s ns=%s", release, ns))
	h.mu.Lock()
	h.installed, h.status = false, ""
	h.mu.Unlock()
	return nil
}

func (h *fakeHelm) Status(_ context.Context, release, ns string) (string, error) {
	h.rec.Add(fmt.Sprintf("helm status %s ns=%s", release, ns))
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.status != "":
		return h.status, nil
	case h.installed:
		return "deployed", nil
	}
	return "", cluster.ErrNoRelease
}

// flatValues renders values as sorted key=value pairs; the plan by the name
// of its ConfigMap.
func flatValues(release string, values map[string]any) string {
	var kv []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, e := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), e)
			}
			return
		}
		if prefix == "plan" {
			v = "configmap/" + chart.PlanConfigMapName(release, v.(string))
		}
		b, _ := json.Marshal(v)
		kv = append(kv, prefix+"="+strings.Trim(string(b), `"`))
	}
	walk("", values)
	sort.Strings(kv)
	return strings.Join(kv, " ")
}

// kfix is one kickoff test: a fake cluster, a fake Helm, two fake clocks
// (the kickoff's, and the components') and the files of the run.
type kfix struct {
	t       *testing.T
	cs      *fake.Clientset
	rec     *kubetest.Recorder
	helm    *fakeHelm
	clk     *clock.Fake // the kickoff's
	cclk    *clock.Fake // the saver's, watchdog's and churn's
	tmp     string
	dir     string
	targets string
	values  string
	rolls   string
	objects []runtime.Object

	mu sync.Mutex
	// dsReadyAt is the get of the DaemonSet at which it reads ready (0:
	// never); slicesAt the list of EndpointSlices at which the Service's
	// slice appears (0: never).
	dsReadyAt, dsGets    int
	slicesAt, sliceLists int
	driverPhase          corev1.PodPhase
	// pvcUnbindable stops the fake provisioner: a claim is never bound.
	pvcUnbindable bool
	// driverUnschedulable is the scheduler's message on a driver pod it
	// cannot place (empty: the pod is scheduled).
	driverUnschedulable string
	jobDoneAtUpgrade    bool
	jobEndsAt           time.Time
	files               map[string][]byte // PVC files by name
	provenance          cluster.ProvenanceFunc
	stdout              lockedBuffer
	stderr              lockedBuffer
	duration            time.Duration
	componentsCreated   map[string]int
	// signalAt is a line after which the run gets SIGTERM.
	signalAt  string
	interrupt context.CancelCauseFunc
}

// lockedBuffer is an output buffer that says when it was written to.
type lockedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // holds one token after a write
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.written <- struct{}{}:
	default:
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newKfix(t *testing.T) *kfix {
	t.Helper()
	tmp := t.TempDir()
	fx := &kfix{
		t:                 t,
		rec:               &kubetest.Recorder{},
		clk:               clock.NewFake(kStart),
		cclk:              clock.NewFake(kStart),
		tmp:               tmp,
		dir:               filepath.Join(tmp, "run"),
		targets:           filepath.Join(tmp, "targets.txt"),
		dsReadyAt:         2,
		slicesAt:          2,
		driverPhase:       corev1.PodRunning,
		provenance:        cluster.CheckProvenance,
		duration:          150 * time.Second,
		files:             map[string][]byte{},
		componentsCreated: map[string]int{},
	}
	fx.helm = &fakeHelm{rec: fx.rec, onInstall: fx.makeEngines, onUpgrade: fx.makeJob}
	fx.stdout.written = make(chan struct{}, 1)
	// Stand-in digests: pinning the chart's default images to new builds
	// does not change these transcripts.
	fx.values = filepath.Join(tmp, "values.yaml")
	write(t, fx.values, standInValues)
	write(t, fx.targets, "svc-a  http://svc-a.soak.test:8080/  3\nsvc-b  http://svc-b.soak.test:8080/  3\necho   http://echo.soak.test:8080/   1\n")
	fx.objects = baseObjects()
	return fx
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func kservice(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.1.1", Ports: []corev1.ServicePort{{Port: 8080, Protocol: corev1.ProtocolTCP}}}}
}

// systemPod is a pod of ready/total containers.
func systemPod(name string, phase corev1.PodPhase, ready, total int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name},
		Status: corev1.PodStatus{Phase: phase}}
	for i := range total {
		c := fmt.Sprintf("c%d", i)
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c, Ready: i < ready})
	}
	return p
}

// reportClaim is a report PVC of the release that exists before the run.
func reportClaim(class string, phase corev1.PersistentVolumeClaimPhase) *corev1.PersistentVolumeClaim {
	volume := ""
	if phase != corev1.ClaimPending {
		// Bound once, so named a volume.
		volume = "pvc-0a1b2c3d"
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: kNames.ReportClaim},
		Spec:       corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: volume},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: phase},
	}
}

// claimEvent is an event about the report PVC, at kStart plus at.
func claimEvent(name, typ, reason, message string, at time.Duration) *corev1.Event {
	t := metav1.NewTime(kStart.Add(at))
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: kNS, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: kNS, Name: kNames.ReportClaim},
		Type:           typ, Reason: reason, Message: message,
		FirstTimestamp: t, LastTimestamp: t,
	}
}

func storageClass(name string, isDefault bool) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "rancher.io/local-path"}
	if isDefault {
		sc.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
	}
	return sc
}

// rollable is a Deployment the churn pre-flight accepts: a mesh workload
// (managed, under its own account) with a 10 s preStop sleep.
func rollable(ns, name string) *appsv1.Deployment {
	n := int32(2)
	zero := intstr.FromInt32(0)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1},
		Spec: appsv1.DeploymentSpec{
			Replicas:        &n,
			MinReadySeconds: 10,
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"aether.io/managed": "true"}}, Spec: corev1.PodSpec{ServiceAccountName: name, Containers: []corev1.Container{{
				Name:           "app",
				Lifecycle:      &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 10}}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}},
			}}}},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2},
	}
}

// baseObjects is a cluster ready for a run.
func baseObjects() []runtime.Object {
	statsd := kservice("o11y", "otel-scraper")
	statsd.Spec.ClusterIP = "10.96.0.10"
	statsd.Spec.Ports = []corev1.ServicePort{{Name: "statsd", Port: 9125, Protocol: corev1.ProtocolUDP}}
	return []runtime.Object{
		namespace(kNS), namespace(kTargets), namespace("kube-system"),
		systemPod("coredns-5d78c9869d-abcde", corev1.PodRunning, 1, 1),
		systemPod("etcd-control-plane", corev1.PodRunning, 10, 10),
		systemPod("job-cleanup-28473910-x7v2k", corev1.PodSucceeded, 0, 1),
		kservice(kTargets, "svc-a"), kservice(kTargets, "svc-b"), kservice(kTargets, "echo"), statsd,
		storageClass("standard", true),
		rollable(kTargets, "svc-a"),
	}
}

// start builds the fake cluster and its reactors.
func (fx *kfix) start() {
	fx.cs = fake.NewClientset(fx.objects...)
	fx.cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.30.2"}
	fx.cs.PrependReactor("get", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fx.mu.Lock()
		fx.dsGets++
		ready := fx.dsReadyAt > 0 && fx.dsGets >= fx.dsReadyAt
		fx.mu.Unlock()
		if ready {
			fx.update(gvrDS, kNS, kNames.EngineWorkload, func(o runtime.Object) {
				o.(*appsv1.DaemonSet).Status.NumberReady = int32(len(engineNode))
			})
		}
		return false, nil, nil
	})
	// The API server and the provisioner: a claim just created is Pending,
	// and a Pending claim is bound to a new volume by the time it is read
	// back (unless pvcUnbindable).
	fx.cs.PrependReactor("get", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fx.mu.Lock()
		binds := !fx.pvcUnbindable
		fx.mu.Unlock()
		fx.update(gvrPVCs, a.GetNamespace(), a.(k8stesting.GetAction).GetName(), func(o runtime.Object) {
			c := o.(*corev1.PersistentVolumeClaim)
			if c.Status.Phase == "" {
				c.Status.Phase = corev1.ClaimPending
			}
			if binds && c.Status.Phase == corev1.ClaimPending {
				c.Spec.VolumeName = "pvc-7f3c2a1e"
				c.Status.Phase = corev1.ClaimBound
			}
		})
		return false, nil, nil
	})
	fx.cs.PrependReactor("list", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fx.mu.Lock()
		fx.sliceLists++
		appear := fx.slicesAt > 0 && fx.sliceLists == fx.slicesAt
		fx.mu.Unlock()
		if appear {
			fx.add(engineSlice())
		}
		return false, nil, nil
	})
	// Last, so it runs first: every action, in order.
	fx.cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fx.rec.Add(kubetest.Line(a))
		return false, nil, nil
	})
}

func (fx *kfix) add(obj runtime.Object) {
	fx.t.Helper()
	if err := fx.cs.Tracker().Add(obj); err != nil {
		fx.t.Fatal(err)
	}
}

func (fx *kfix) update(gvr schema.GroupVersionResource, ns, name string, change func(runtime.Object)) {
	obj, err := fx.cs.Tracker().Get(gvr, ns, name)
	if err != nil {
		return
	}
	obj = obj.DeepCopyObject()
	change(obj)
	if err := fx.cs.Tracker().Update(gvr, obj, ns); err != nil {
		fx.t.Error(err)
	}
}

func engineLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/component": "engine", "app.kubernetes.io/instance": kRelease, "app.kubernetes.io/name": "sortie"}
}

// makeEngines is the install of the engines: a DaemonSet that is not yet
// ready, and its pods.
func (fx *kfix) makeEngines() {
	fx.add(&appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: kNames.EngineWorkload, Generation: 1},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: int32(len(engineNode)),
			UpdatedNumberScheduled: int32(len(engineNode)), CurrentNumberScheduled: int32(len(engineNode))},
	})
	for _, e := range engineNode {
		fx.add(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: e.pod, Labels: engineLabels()},
			Spec:       corev1.PodSpec{NodeName: e.node, Containers: []corev1.Container{{Name: chart.EngineContainer}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: e.ip,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
}

func engineSlice() *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: kNS, Name: kNames.EngineService + "-x9z7q", Labels: map[string]string{"kubernetes.io/service-name": kNames.EngineService}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	yes := true
	for _, e := range engineNode {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
	}
	return s
}

const driverPod = "soak-sortie-driver-5kq9t"

// makeJob is the upgrade with the plan: the driver's Job and its pod.
func (fx *kfix) makeJob() {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: kNames.Job,
		Labels: map[string]string{"app.kubernetes.io/component": "driver", "app.kubernetes.io/instance": kRelease, "app.kubernetes.io/name": "sortie"}}}
	if fx.jobDoneAtUpgrade {
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	} else {
		job.Status.Active = 1
	}
	fx.add(job)
	prio := int32(1000)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: driverPod, Labels: map[string]string{"job-name": kNames.Job}},
		Spec: corev1.PodSpec{NodeName: "node-a", PriorityClassName: "sortie-soak", Priority: &prio,
			Containers: []corev1.Container{{Name: chart.DriverContainer}}},
		Status: corev1.PodStatus{Phase: fx.driverPhase},
	}
	if fx.driverUnschedulable != "" {
		pod.Spec.NodeName = ""
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: fx.driverUnschedulable}}
	} else if fx.driverPhase == corev1.PodPending {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: chart.DriverContainer,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}
	}
	fx.add(pod)
}

// sharedClient is another component's client on the same cluster: its
// actions are not in the kickoff's transcript (they run beside it, in no
// fixed order with it), but what it changes the kickoff sees.
func (fx *kfix) sharedClient(component string) *fake.Clientset {
	c := &fake.Clientset{}
	c.AddReactor("*", "*", k8stesting.ObjectReaction(fx.cs.Tracker()))
	switch component {
	case compSaver:
		// The Job ends once the planned duration has passed on the
		// components' clock, counted from the saver's first look. A Job
		// that ended at the upgrade reads ended from the start.
		c.PrependReactor("get", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
			// Not before the kickoff waits for it: the driver pod must
			// read Running at the kickoff's look.
			waiting := strings.Contains(fx.stdout.String(), "STEP waiting for the saver")
			fx.mu.Lock()
			if fx.jobEndsAt.IsZero() {
				fx.jobEndsAt = fx.cclk.Now().Add(fx.duration + 5*time.Second)
			}
			ended := waiting && !fx.cclk.Now().Before(fx.jobEndsAt)
			fx.mu.Unlock()
			if ended {
				fx.update(gvrJobs, kNS, kNames.Job, func(o runtime.Object) {
					j := o.(*batchv1.Job)
					j.Status.Active = 0
					j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
				})
				fx.update(gvrPods, kNS, driverPod, func(o runtime.Object) { o.(*corev1.Pod).Status.Phase = corev1.PodSucceeded })
			}
			return false, nil, nil
		})
		// A reader pod has printed its file by the time it is looked at.
		c.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.(k8stesting.GetAction).GetName() != kNames.Job+"-reader" {
				return false, nil, nil
			}
			obj, err := fx.cs.Tracker().Get(gvrPods, kNS, kNames.Job+"-reader")
			if err != nil {
				return true, nil, err
			}
			p := obj.(*corev1.Pod).DeepCopy()
			p.Status.Phase = corev1.PodSucceeded
			return true, p, nil
		})
	case compChurn:
		c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
			r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
			r.Status.Allowed = true
			return true, r, nil
		})
	}
	return c
}

// Logs is the saver's log reader: a reader pod prints its PVC file, every
// other pod a line.
func (fx *kfix) Logs(_ context.Context, ns, pod, container string, previous bool) (io.ReadCloser, error) {
	switch pod {
	case kNames.Job + "-reader":
	case driverPod:
		// The driver's summary line, the gate's second witness.
		return io.NopCloser(strings.NewReader("PASS  3/3 executions passed\n")), nil
	default:
		return io.NopCloser(strings.NewReader("log of " + pod + "\n")), nil
	}
	obj, err := fx.cs.Tracker().Get(gvrPods, ns, pod)
	if err != nil {
		return nil, err
	}
	cmd := obj.(*corev1.Pod).Spec.Containers[0].Command
	file := strings.TrimPrefix(cmd[len(cmd)-1], "/report/")
	fx.mu.Lock()
	data, ok := fx.files[file]
	fx.mu.Unlock()
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "files"}, file)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// env is the kickoff's environment on the fake cluster.
func (fx *kfix) env() cluster.Env {
	return cluster.Env{
		NewClient: func(kubeconfig, kctx, component string) (kubernetes.Interface, error) {
			if kctx != kContext {
				return nil, fmt.Errorf("context %q does not exist", kctx)
			}
			fx.mu.Lock()
			fx.componentsCreated[component]++
			fx.mu.Unlock()
			if component == compKickoff {
				return fx.cs, nil
			}
			return fx.sharedClient(component), nil
		},
		NewHelm:        func(string, string) (cluster.Helm, error) { return fx.helm, nil },
		Clock:          fx.clk,
		ComponentClock: fx.cclk,
		Provenance: func(ctx context.Context, req cluster.ProvenanceRequest) ([]string, error) {
			return fx.provenance(ctx, req)
		},
		SaverLogs: fx,
	}
}

// pvcFiles puts the run's report and stream on the fake PVC, under the
// names the kickoff gives them (<profile>-<start time>.json/.jsonl): the
// gate's clean report (testdata/kube/report.json, a copy of
// gate/testdata/clean) and a stream of its executions.
func (fx *kfix) pvcFiles(profile string) {
	rep, err := os.ReadFile(filepath.Join("testdata", "kube", "report.json"))
	if err != nil {
		fx.t.Fatal(err)
	}
	var r record.Report
	if err := json.Unmarshal(rep, &r); err != nil {
		fx.t.Fatal(err)
	}
	var stream bytes.Buffer
	for _, e := range r.Executions {
		line, err := json.Marshal(e)
		if err != nil {
			fx.t.Fatal(err)
		}
		stream.Write(append(line, '\n'))
	}
	tag := profile + "-" + kStart.Format("20060102T150405Z")
	fx.files[tag+".json"] = rep
	fx.files[tag+".jsonl"] = stream.Bytes()
}

// run runs `soak <args>` and moves both clocks whenever someone sleeps on
// them, until it returns.
func (fx *kfix) run(args ...string) error {
	fx.t.Helper()
	if fx.cs == nil {
		fx.start()
	}
	tctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx, interrupt := context.WithCancelCause(tctx)
	defer interrupt(nil)
	fx.interrupt = interrupt
	done := make(chan error, 1)
	go func() { done <- runSoak(ctx, fx.env(), args, &fx.stdout, &fx.stderr) }()
	return fx.drive(tctx, done)
}

// runSoak dispatches like Run, with the environment of the test.
func runSoak(ctx context.Context, env cluster.Env, args []string, stdout, stderr io.Writer) error {
	switch args[0] {
	case "run":
		return Run(ctx, env, args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// drive advances a clock by a second whenever a goroutine sleeps on it.
// The kickoff alone sleeps on its clock, so its steps come in one order.
// The components' clock may not pass the kickoff's until the kickoff waits
// for them (its "STEP waiting" line): what they do meanwhile (the saver
// looking at the Job, the churn's first step) then depends on the kickoff's
// time only, never on how fast the test goroutines happen to run.
func (fx *kfix) drive(ctx context.Context, done chan error) error {
	for {
		free := strings.Contains(fx.stdout.String(), "STEP waiting for the saver")
		clocks := []*clock.Fake{fx.clk}
		if free || fx.cclk.Now().Before(fx.clk.Now()) {
			clocks = append(clocks, fx.cclk)
		}
		wctx, stop := context.WithCancel(ctx)
		woke := make(chan *clock.Fake, len(clocks))
		for _, c := range clocks {
			go func() {
				if c.WaitForSleepers(wctx, 1) == nil {
					woke <- c
				}
			}()
		}
		select {
		case err := <-done:
			stop()
			return err
		case c := <-woke:
			stop()
			c.Advance(time.Second)
		case <-fx.stdout.written:
			stop()
			if fx.signalAt != "" && strings.Contains(fx.stdout.String(), fx.signalAt) {
				fx.signalAt = ""
				fx.interrupt(&cli.SignalError{Signal: syscall.SIGTERM})
			}
		case <-ctx.Done():
			stop()
			fx.t.Fatalf("the run did not end:\n%s\n%s", fx.stdout.String(), fx.stderr.String())
		}
	}
}

// kickoffLines keeps the lines of the kickoff and the gate: the
// components' own lines carry the times of their clock, which moves in no
// fixed order with the kickoff's.
func kickoffLines(out, dir string) string {
	// The chart's content digest changes with every edit of the chart.
	out = chartDigestRE.ReplaceAllString(out, "chart/sortie sha256:CHART")
	out = strings.ReplaceAll(out, embeddedDigest, "sha256:CHART")
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		for _, p := range []string{"PREFLIGHT ", "STEP ", "ABORT ", "HINT ", "NOTE ", "WARNING ", "SOAK ", "INTERRUPTED ",
			"PASS ", "FAIL ", "NODE ", "LOST ", "WINDOW ", "VERDICT ", "REFUSED ", "TEARDOWN "} {
			if strings.HasPrefix(l, p) {
				b.WriteString(strings.ReplaceAll(l, dir, "RUNDIR") + "\n")
				break
			}
		}
	}
	return b.String()
}

var chartDigestRE = regexp.MustCompile(`chart/sortie sha256:[0-9a-f]{64}`)

// embeddedDigest is the content digest of the chart built into the test.
var embeddedDigest = func() string {
	dir, err := os.MkdirTemp("", "chart")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	_, d, err := writeEmbeddedChart(dir)
	if err != nil {
		panic(err)
	}
	return d
}()

// golden is the transcript, the kickoff's lines, the exit code and the
// files of the run directory that describe the run.
func (fx *kfix) golden(name string, err error, files ...string) {
	fx.t.Helper()
	var b strings.Builder
	b.WriteString("# actions of the kickoff's client and the Helm calls, in order\n")
	b.WriteString(strings.ReplaceAll(fx.rec.String(), fx.dir, "RUNDIR"))
	b.WriteString("# output\n")
	b.WriteString(kickoffLines(fx.stdout.String(), fx.dir))
	fmt.Fprintf(&b, "# exit %d\n", exitCode(err))
	for _, f := range files {
		data, rerr := os.ReadFile(filepath.Join(fx.dir, f))
		if rerr != nil {
			fmt.Fprintf(&b, "# %s: missing\n", f)
			continue
		}
		fmt.Fprintf(&b, "# %s\n%s", f, strings.ReplaceAll(string(data), fx.dir, "RUNDIR"))
	}
	kubetest.Golden(fx.t, filepath.Join("testdata", "kube", name+".golden"), b.String(), *update)
}

// checkMeta reports objects of the fake cluster, for assertions.
func (fx *kfix) exists(gvr schema.GroupVersionResource, ns, name string) bool {
	_, err := fx.cs.Tracker().Get(gvr, ns, name)
	return err == nil
}
