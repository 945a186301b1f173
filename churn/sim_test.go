package churn

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
)

// t0 is the load start of every test, and the fake clock starts 30 s
// before it (the churn driver is launched just before the load).
var (
	t0     = time.Date(2026, 10, 5, 3, 20, 0, 0, time.UTC)
	launch = t0.Add(-30 * time.Second)
)

var (
	deploymentsGVR  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	daemonSetsGVR   = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
	statefulSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
)

// deployment is a Deployment that can roll without dropping traffic,
// settled with every replica available, and a mesh workload as the bash
// harness's own are made: managed by the mesh, under its own account, a
// preStop sleep of 15 s within the default 30 s grace.
func deployment(ns, name string, n int32) *appsv1.Deployment {
	zero := intstr.FromInt32(0)
	one := intstr.FromInt32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 4},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one},
			},
			MinReadySeconds: 10,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name, "aether.io/managed": "true"}},
				Spec: corev1.PodSpec{ServiceAccountName: name, Containers: []corev1.Container{{
					Name:  "app",
					Image: "fixture",
					Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
						Sleep: &corev1.SleepAction{Seconds: 15},
					}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)},
					}},
				}}},
			},
		},
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 4, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	return d
}

// daemonSet is a settled RollingUpdate DaemonSet on 3 nodes.
func daemonSet(ns, name string) *appsv1.DaemonSet {
	d := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 2},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
		},
	}
	d.Status = appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, CurrentNumberScheduled: 3,
		UpdatedNumberScheduled: 3, NumberReady: 3, NumberAvailable: 3}
	return d
}

func node(name string, ready bool, labels ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	for _, l := range labels {
		n.Labels[l] = ""
	}
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	return n
}

// soakCluster holds every workload of the reference schedule, healthy.
func soakCluster() []runtime.Object {
	objs := []runtime.Object{
		deployment("aether-ingress", "aether-edge", 2),
		daemonSet("aether-system", "aether-agent"),
		daemonSet("aether-system", "aether-proxy"),
		daemonSet("aether-system", "aether-mesh-dns"),
		daemonSet("aether-system", "aether-uds-csi"),
		node("soak-control-plane", true, "node-role.kubernetes.io/control-plane"),
		node("soak-worker", true),
		node("soak-worker2", true),
		node("soak-worker3", false),
	}
	for i := 1; i <= 5; i++ {
		objs = append(objs, deployment("aether-test", fmt.Sprintf("svc-%d", i), 3))
	}
	// The victims of the reference schedule's daemon-outage steps.
	for _, app := range []string{"uds-echo", "uds-cr-echo"} {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "aether-test", Name: app + "-standby", Labels: map[string]string{"app": app}},
			Spec:       corev1.PodSpec{NodeName: "soak-worker"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	return objs
}

// sim is a fake cluster whose controllers make rollouts progress: each read
// of a workload mid-rollout moves it one pod further, and a workload named
// in stuck never moves. Access reviews are allowed unless denied.
type sim struct {
	*fake.Clientset
	stuck  map[string]bool // ns/name
	denied map[string]bool // "verb resource[/sub] ns/name"
	// newsaLog is the log of a new-serviceaccount step's pod, given the
	// pod; nil: a clean tally of every target on the pod's node.
	newsaLog func(pod *corev1.Pod) string
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// cleanTally is the client's final line when every request was a 2xx.
func cleanTally(pod *corev1.Pod) string {
	return fmt.Sprintf("SORTIE_NEWSA_FINAL step=%s node=%s svc-1:ok=240,non2xx=0,connerr=0,codes=- svc-3:ok=240,non2xx=0,connerr=0,codes=-\n",
		pod.Labels[newSALabel], pod.Spec.NodeName)
}

func newSim(objs ...runtime.Object) *sim {
	s := &sim{Clientset: fake.NewClientset(objs...), stuck: map[string]bool{}, denied: map[string]bool{}}
	tr := s.Tracker()
	upd := metav1.UpdateOptions{FieldManager: "controller"}

	// A new-serviceaccount step's Deployment gets its pod at once, running
	// on the node it selects; the pod goes with the Deployment.
	s.PrependReactor("create", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment)
		if !strings.HasPrefix(d.Name, "sa-new-") {
			return false, nil, nil
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-pod", Labels: d.Spec.Template.Labels},
			Spec:       *d.Spec.Template.Spec.DeepCopy(),
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
		pod.Spec.NodeName = d.Spec.Template.Spec.NodeSelector["kubernetes.io/hostname"]
		if err := tr.Create(podsGVR, pod, d.Namespace, metav1.CreateOptions{}); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	s.PrependReactor("delete", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		if strings.HasPrefix(name, "sa-new-") {
			_ = tr.Delete(podsGVR, a.GetNamespace(), name+"-pod")
		}
		return false, nil, nil
	})
	s.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		// The fake's log action names no pod: a step's pod is the only
		// one of its kind at a time, so it is the one of the namespace.
		l, err := tr.List(podsGVR, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		for _, p := range l.(*corev1.PodList).Items {
			if p.Labels[newSALabel] != "" {
				text := cleanTally(&p)
				if s.newsaLog != nil {
					text = s.newsaLog(&p)
				}
				return true, &runtime.Unknown{Raw: []byte(text)}, nil
			}
		}
		return true, nil, fmt.Errorf("no new-serviceaccount pod in %s", a.GetNamespace())
	})

	s.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := r.Spec.ResourceAttributes
		res := ra.Resource
		if ra.Subresource != "" {
			res += "/" + ra.Subresource
		}
		key := fmt.Sprintf("%s %s %s/%s", ra.Verb, res, ra.Namespace, ra.Name)
		r.Status.Allowed = !s.denied[key]
		if !r.Status.Allowed {
			r.Status.Reason = "RBAC: access denied"
		}
		return true, r, nil
	})

	// A rollout restart: the API server bumps the generation; the
	// controller has yet to see it.
	for _, res := range []string{"deployments", "daemonsets", "statefulsets"} {
		s.PrependReactor("patch", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "" {
				return false, nil, nil
			}
			handled, obj, err := k8stesting.ObjectReaction(tr)(a)
			if err != nil {
				return handled, obj, err
			}
			m := obj.(metav1.Object)
			m.SetGeneration(m.GetGeneration() + 1)
			switch o := obj.(type) {
			case *appsv1.Deployment:
				o.Status.UpdatedReplicas = 0
			case *appsv1.DaemonSet:
				o.Status.UpdatedNumberScheduled = 0
			}
			if err := tr.Update(a.GetResource(), obj, a.GetNamespace(), upd); err != nil {
				return true, nil, err
			}
			return true, obj, nil
		})
	}

	// A read mid-rollout: the controller moves one pod on (surge one new
	// pod for a Deployment, replace one pod for a DaemonSet).
	s.PrependReactor("get", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		g := a.(k8stesting.GetAction)
		switch a.GetSubresource() {
		case "scale":
			obj, err := tr.Get(deploymentsGVR, g.GetNamespace(), g.GetName())
			if err != nil {
				return true, nil, err
			}
			d := obj.(*appsv1.Deployment)
			return true, &autoscalingv1.Scale{
				ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name, ResourceVersion: d.ResourceVersion},
				Spec:       autoscalingv1.ScaleSpec{Replicas: replicas(d.Spec.Replicas)},
				Status:     autoscalingv1.ScaleStatus{Replicas: d.Status.Replicas},
			}, nil
		case "":
		default:
			return false, nil, nil
		}
		obj, err := tr.Get(deploymentsGVR, g.GetNamespace(), g.GetName())
		if err != nil || s.stuck[g.GetNamespace()+"/"+g.GetName()] {
			return false, nil, nil
		}
		d := obj.(*appsv1.Deployment)
		n := replicas(d.Spec.Replicas)
		st := &d.Status
		if st.ObservedGeneration >= d.Generation && st.UpdatedReplicas >= n {
			return false, nil, nil
		}
		st.ObservedGeneration = d.Generation
		st.UpdatedReplicas = min(st.UpdatedReplicas+1, n)
		st.Replicas = n
		if st.UpdatedReplicas < n {
			st.Replicas = n + 1 // the surge pod
		}
		st.ReadyReplicas, st.AvailableReplicas = n, n
		if err := tr.Update(deploymentsGVR, d, d.Namespace, upd); err != nil {
			return true, nil, err
		}
		return true, d, nil
	})
	s.PrependReactor("get", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		g := a.(k8stesting.GetAction)
		obj, err := tr.Get(daemonSetsGVR, g.GetNamespace(), g.GetName())
		if err != nil || s.stuck[g.GetNamespace()+"/"+g.GetName()] {
			return false, nil, nil
		}
		d := obj.(*appsv1.DaemonSet)
		st := &d.Status
		if st.ObservedGeneration >= d.Generation && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled {
			return false, nil, nil
		}
		st.ObservedGeneration = d.Generation
		st.UpdatedNumberScheduled++
		st.NumberAvailable = st.DesiredNumberScheduled
		if st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
			st.NumberAvailable-- // the pod being replaced
		}
		if err := tr.Update(daemonSetsGVR, d, d.Namespace, upd); err != nil {
			return true, nil, err
		}
		return true, d, nil
	})
	// A scale write sets the replica count; the pods follow at once.
	s.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		sc := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		obj, err := tr.Get(deploymentsGVR, a.GetNamespace(), sc.Name)
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment)
		n := sc.Spec.Replicas
		d.Spec.Replicas = &n
		d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = n, n, n, n
		if err := tr.Update(deploymentsGVR, d, d.Namespace, upd); err != nil {
			return true, nil, err
		}
		return true, sc, nil
	})
	return s
}

// replicasOf reads a deployment's replica count from the fake.
func (s *sim) replicasOf(t *testing.T, ns, name string) int32 {
	t.Helper()
	obj, err := s.Tracker().Get(deploymentsGVR, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return replicas(obj.(*appsv1.Deployment).Spec.Replicas)
}

// leftovers names the new-serviceaccount objects still in the fake.
func (s *sim) leftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	sas, err := s.Tracker().List(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range sas.(*corev1.ServiceAccountList).Items {
		out = append(out, "serviceaccount/"+sa.Name)
	}
	deps, err := s.Tracker().List(deploymentsGVR, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.(*appsv1.DeploymentList).Items {
		if strings.HasPrefix(d.Name, "sa-new-") {
			out = append(out, "deployment/"+d.Name)
		}
	}
	return out
}

// newsaArgs come first in every run: the client's image and targets, which
// a schedule with a new-serviceaccount step requires.
var newsaArgs = []string{"--newsa-image", "ghcr.io/sortie-soak/sortie-engine@sha256:" + strings.Repeat("e", 64),
	"--newsa-targets", "svc-1=http://svc-1.aether-test.mesh:18081/,svc-3=http://svc-3.aether-test.mesh:18081/"}

// run runs the program against client (nil: the program must not ask for
// one) with a fake clock at launch, which a driver advances 5 s at a time
// whenever the program waits, and returns stdout and the exit code.
func run(t *testing.T, ctx context.Context, client kubernetes.Interface, args ...string) (string, int) {
	t.Helper()
	clk := clock.NewFake(launch)
	env := Env{
		NewClient: func(string, string) (kubernetes.Interface, error) {
			if client == nil {
				t.Error("the dry run asked for a client")
				return fake.NewClientset(), nil
			}
			return client, nil
		},
		Clock: clk,
	}
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	args = append(append([]string{}, newsaArgs...), args...)
	go func() { done <- RunEnv(ctx, env, args, &stdout, &stderr) }()
	err := drive(t, clk, 5*time.Second, done)
	return stdout.String(), cli.Code(err)
}

// drive advances clk by step each time the program sleeps, until it
// returns; the step count is bounded so a program that never ends fails
// the test instead of hanging it.
func drive(t *testing.T, clk *clock.Fake, step time.Duration, done <-chan error) error {
	t.Helper()
	err, ended := clk.Drive(step, 200000, done)
	if !ended {
		t.Fatal("the program did not end")
	}
	return err
}
