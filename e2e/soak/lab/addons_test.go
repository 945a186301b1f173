package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sortie-soak/sortie/churn"
	"github.com/sortie-soak/sortie/render"
)

func TestApplyAddons(t *testing.T) {
	l := Layout{State: "/lab/state", Nodes: 2}
	objs := Addons(l, AddonImages{CoreDNS: "127.0.0.1:5000/coredns@sha256:1", Target: "127.0.0.1:5000/sortie-target@sha256:2"}, "corefile")
	cs := fake.NewClientset()
	ctx := context.Background()
	if err := Apply(ctx, cs, objs); err != nil {
		t.Fatal(err)
	}
	// A second apply finds everything there and changes nothing.
	if err := Apply(ctx, cs, objs); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	sc, err := cs.StorageV1().StorageClasses().Get(ctx, StorageClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" || *sc.VolumeBindingMode != storagev1.VolumeBindingImmediate {
		t.Errorf("storage class %+v: want the default, binding at once", sc)
	}
	pvs, _ := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if len(pvs.Items) != ReportVolumes {
		t.Fatalf("%d report volumes, want %d", len(pvs.Items), ReportVolumes)
	}
	for _, pv := range pvs.Items {
		if pv.Spec.HostPath == nil || !under(pv.Spec.HostPath.Path, l.State) || pv.Spec.StorageClassName != StorageClassName {
			t.Errorf("volume %s: %+v; want a hostPath under the state directory of class %s", pv.Name, pv.Spec.PersistentVolumeSource, StorageClassName)
		}
	}
	dns, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil || dns.Spec.Template.Spec.Containers[0].Image != "127.0.0.1:5000/coredns@sha256:1" {
		t.Errorf("coredns deployment: %v", err)
	}
	svc, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != DNSServiceIP {
		t.Errorf("kube-dns service: %v %+v", err, svc)
	}
	for _, tg := range Targets {
		d, err := cs.AppsV1().Deployments(TargetNamespace).Get(ctx, tg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkRollable(t, d)
	}
	for _, ns := range []string{RunNamespace, TargetNamespace} {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
}

// checkRollable holds a target to what the churn pre-flight asks of a
// rollable Deployment.
func checkRollable(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable.IntValue() != 0 || d.Spec.MinReadySeconds == 0 {
		t.Errorf("%s: not rollable without loss: %+v minReady %d", d.Name, ru, d.Spec.MinReadySeconds)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.ReadinessProbe == nil {
		t.Errorf("%s: no preStop or readiness probe", d.Name)
	}
	// The bar the churn pre-flight holds a mesh workload to, at its
	// defaults: the soak run in the lab rolls these.
	co := churn.DefaultOptions()
	k, v, _ := strings.Cut(co.ManagedLabel, "=")
	if d.Spec.Template.Labels[k] != v || d.Spec.Template.Spec.ServiceAccountName != d.Name {
		t.Errorf("%s: pod labels %v, ServiceAccount %q: want %s and its own", d.Name, d.Spec.Template.Labels, d.Spec.Template.Spec.ServiceAccountName, co.ManagedLabel)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		sleep := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
		if sleep < co.MinPreStopSleep || grace < sleep+co.Drain {
			t.Errorf("%s: preStop sleep %s, grace %s: want at least %s and the sleep + %s", d.Name, sleep, grace, co.MinPreStopSleep, co.Drain)
		}
	} else {
		t.Errorf("%s: the preStop hook is not a sleep", d.Name)
	}
	if c.Image != "127.0.0.1:5000/sortie-target@sha256:2" {
		t.Errorf("%s: image %s", d.Name, c.Image)
	}
}

func TestApplyUnknownObject(t *testing.T) {
	if err := Apply(context.Background(), fake.NewClientset(), []any{&corev1.Pod{}}); err == nil || !strings.Contains(err.Error(), "unknown object") {
		t.Errorf("err = %v; want an unknown object error", err)
	}
}

func TestTargetsFile(t *testing.T) {
	got := TargetsFile()
	ts, err := render.ParseTargets("targets.txt", []byte(got))
	if err != nil || len(ts) != len(Targets) {
		t.Fatalf("the targets file does not parse as soak run reads it: %v, %+v", err, ts)
	}
	for _, want := range []string{"svc-1  http://svc-1.soak-targets:18081/  3\n", "svc-2  http://svc-2.soak-targets:18081/  1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("targets file lacks %q:\n%s", want, got)
		}
	}
}
