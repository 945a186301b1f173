package lab

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// The lab's namespaces and objects that users and tests name.
const (
	// RunNamespace is where `soak run` installs the release.
	RunNamespace = "sortie"
	// TargetNamespace holds the fixture targets.
	TargetNamespace = "soak-targets"
	// StorageClassName is the lab's default StorageClass.
	StorageClassName = "lab-local"
	// ReportVolumes is how many report PersistentVolumes the lab offers: a
	// PVC kept by teardown holds one, a run in another namespace takes the
	// next.
	ReportVolumes = 2
	// TargetPort is the fixture targets' port.
	TargetPort = 18081
)

// Target is a fixture target Deployment and Service of the lab.
type Target struct {
	Name     string
	Weight   int
	Replicas int32
}

// Targets are the lab's fixture targets: the weights of the targets file
// the lab writes for `soak run --targets`.
var Targets = []Target{{"svc-1", 3, 2}, {"svc-2", 1, 2}}

// TargetsFile is the targets file (name url weight) of Targets.
func TargetsFile() string {
	s := "# The lab's fixture targets, written by soak lab up.\n"
	for _, t := range Targets {
		s += fmt.Sprintf("%s  http://%s.%s:%d/  %d\n", t.Name, t.Name, TargetNamespace, TargetPort, t.Weight)
	}
	return s
}

// AddonImages are the image references the addons run.
type AddonImages struct {
	CoreDNS, Target string
}

// Addons are the cluster's objects after its servers: CoreDNS, the
// StorageClass and report volumes, the namespaces and the fixture targets.
func Addons(l Layout, img AddonImages, corefile string) []any {
	objs := coreDNS(img.CoreDNS, corefile)
	objs = append(objs, storage(l)...)
	objs = append(objs,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: RunNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: TargetNamespace}})
	for _, t := range Targets {
		objs = append(objs, targetServiceAccount(t), targetDeployment(t, img.Target), targetService(t))
	}
	return objs
}

func coreDNS(image, corefile string) []any {
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": "kube-dns"}
	meta := metav1.ObjectMeta{Name: "coredns", Namespace: ns}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "coredns",
					PriorityClassName:  "system-cluster-critical",
					DNSPolicy:          corev1.DNSDefault,
					Containers: []corev1.Container{{
						Name:  "coredns",
						Image: image,
						Args:  []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 1053, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 1053, Protocol: corev1.ProtocolTCP},
						},
						ReadinessProbe:  httpProbe("/ready", 8181, 2),
						LivenessProbe:   httpProbe("/health", 8080, 10),
						SecurityContext: restricted(),
						VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}}},
				},
			},
		},
	}
	return []any{
		&corev1.ServiceAccount{ObjectMeta: meta},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "coredns", Namespace: ns}}},
		&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"Corefile": corefile}},
		dep,
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels},
			Spec: corev1.ServiceSpec{ClusterIP: DNSServiceIP, Selector: labels, Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(1053), Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(1053), Protocol: corev1.ProtocolTCP},
			}},
		},
	}
}

// storage is the default StorageClass and the report volumes: hostPath
// directories under the state directory (owned by the images' uid 65532,
// since hostPath ignores fsGroup), bound at once so that the pre-flight
// sees a Bound claim.
func storage(l Layout) []any {
	objs := []any{&storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClassName, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptrTo(storagev1.VolumeBindingImmediate),
		ReclaimPolicy:     ptrTo(corev1.PersistentVolumeReclaimRetain),
	}}
	for i := 1; i <= ReportVolumes; i++ {
		objs = append(objs, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "report-" + strconv.Itoa(i)},
			Spec: corev1.PersistentVolumeSpec{
				StorageClassName:              StorageClassName,
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: l.ReportVolume(i), Type: ptrTo(corev1.HostPathDirectory)}},
			},
		})
	}
	return objs
}

// targetServiceAccount is a fixture target's own identity, as the churn
// pre-flight asks of a mesh workload.
func targetServiceAccount(t Target) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: TargetNamespace},
		AutomountServiceAccountToken: ptrTo(false)}
}

// targetDeployment is a rollable fixture target held to the churn
// pre-flight's bar for a mesh workload (its management label, its own
// ServiceAccount, a preStop sleep of 10 s and a grace period for it and
// a drain): a new replica is ready before an old one goes
// (maxUnavailable 0, minReadySeconds), and an old one waits out the
// endpoints' propagation before SIGTERM (preStop), then drains.
func targetDeployment(t Target, image string) *appsv1.Deployment {
	labels := map[string]string{"app": t.Name}
	podLabels := map[string]string{"app": t.Name, "aether.io/managed": "true"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: TargetNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas:        ptrTo(t.Replicas),
			MinReadySeconds: 10,
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptrTo(intstr.FromInt32(0)), MaxSurge: ptrTo(intstr.FromInt32(1))}},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            t.Name,
					AutomountServiceAccountToken:  ptrTo(false),
					TerminationGracePeriodSeconds: ptrTo[int64](30),
					Containers: []corev1.Container{{
						Name:            "target",
						Image:           image,
						Args:            []string{"--listen", fmt.Sprintf("0.0.0.0:%d", TargetPort)},
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: TargetPort}},
						ReadinessProbe:  httpProbe("/", TargetPort, 2),
						Lifecycle:       &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 10}}},
						SecurityContext: restricted(),
					}},
				},
			},
		},
	}
}

func targetService(t Target) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: TargetNamespace},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": t.Name}, Ports: []corev1.ServicePort{
			{Name: "http", Port: TargetPort, TargetPort: intstr.FromString("http")}}},
	}
}

func httpProbe(path string, port, period int32) *corev1.Probe {
	return &corev1.Probe{PeriodSeconds: period, ProbeHandler: corev1.ProbeHandler{
		HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}}}
}

func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptrTo(true),
		AllowPrivilegeEscalation: ptrTo(false),
		ReadOnlyRootFilesystem:   ptrTo(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// Apply creates each object; one that exists already is left as it is.
func Apply(ctx context.Context, cs kubernetes.Interface, objs []any) error {
	for _, o := range objs {
		if err := create(ctx, cs, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func create(ctx context.Context, cs kubernetes.Interface, o any) error {
	c := metav1.CreateOptions{FieldManager: "sortie-lab"}
	var err error
	switch v := o.(type) {
	case *corev1.Namespace:
		_, err = cs.CoreV1().Namespaces().Create(ctx, v, c)
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, c)
	case *corev1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(v.Namespace).Create(ctx, v, c)
	case *corev1.Service:
		_, err = cs.CoreV1().Services(v.Namespace).Create(ctx, v, c)
	case *corev1.PersistentVolume:
		_, err = cs.CoreV1().PersistentVolumes().Create(ctx, v, c)
	case *appsv1.Deployment:
		_, err = cs.AppsV1().Deployments(v.Namespace).Create(ctx, v, c)
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, v, c)
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, v, c)
	case *storagev1.StorageClass:
		_, err = cs.StorageV1().StorageClasses().Create(ctx, v, c)
	default:
		return fmt.Errorf("apply: unknown object %T", o)
	}
	if err != nil {
		return fmt.Errorf("create %T: %w", o, err)
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }
