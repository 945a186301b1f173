package chart

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var digestRef = regexp.MustCompile(`^[^@]+@sha256:[a-f0-9]{64}$`)

// checkInvariants holds what every release of the chart must be, whatever
// its values: hardened pods, a headless Service and a NetworkPolicy that
// select the right pods, a Job that only resumes, names that NamesFor
// predicts, and images by digest unless tags are allowed.
func checkInvariants(t *testing.T, r *rendered, values map[string]any) {
	t.Helper()
	names := NamesFor(testRelease)
	allowTags := false
	if im, ok := values["images"].(map[string]any); ok {
		allowTags, _ = im["allowTags"].(bool)
	}

	pod := r.enginePod()
	if pod == nil {
		t.Fatal("no engine DaemonSet or Deployment")
	}
	if r.daemonSet != nil && r.deployment != nil {
		t.Fatal("both a DaemonSet and a Deployment of engines")
	}
	for _, o := range r.all {
		m, err := metaOf(o)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.GetLabels()["app.kubernetes.io/instance"]; got != testRelease {
			t.Errorf("%s %s: instance label %q, want %q", o.GetObjectKind().GroupVersionKind().Kind, m.GetName(), got, testRelease)
		}
		if m.GetNamespace() != "" {
			t.Errorf("%s: namespace %q set in the manifest; the install decides it", m.GetName(), m.GetNamespace())
		}
	}

	// Engines.
	if r.daemonSet != nil && r.daemonSet.Name != names.EngineWorkload {
		t.Errorf("DaemonSet name %q, want %q", r.daemonSet.Name, names.EngineWorkload)
	}
	if r.deployment != nil && r.deployment.Name != names.EngineWorkload {
		t.Errorf("Deployment name %q, want %q", r.deployment.Name, names.EngineWorkload)
	}
	engineSel, err := labels.Parse(names.EngineSelector)
	if err != nil {
		t.Fatal(err)
	}
	if !engineSel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("EngineSelector %q does not match the engine pod labels %v", names.EngineSelector, pod.Labels)
	}
	engine := container(t, pod, EngineContainer)
	checkPod(t, "engine", pod, allowTags)
	if got, _ := argAfter(engine.Args, "--listen"); got != "0.0.0.0:8443" {
		t.Errorf("engine --listen %q, want 0.0.0.0:8443", got)
	}
	if _, ok := argAfter(engine.Args, "--max-concurrent-executions"); !ok {
		t.Errorf("engine args %q lack --max-concurrent-executions", engine.Args)
	}
	// The kubelet's gRPC probe speaks no TLS: it asks the health port,
	// which serves health alone.
	if p := engine.ReadinessProbe; p == nil || p.GRPC == nil || p.GRPC.Port != EngineHealthPort {
		t.Errorf("engine readiness probe %+v, want gRPC on port %d", p, EngineHealthPort)
	}
	if got, _ := argAfter(engine.Args, "--health-listen"); got != fmt.Sprintf("0.0.0.0:%d", EngineHealthPort) {
		t.Errorf("engine --health-listen %q, want 0.0.0.0:%d", got, EngineHealthPort)
	}
	if len(engine.Ports) != 2 || engine.Ports[0].ContainerPort != EnginePort || engine.Ports[0].Name != "grpc" || engine.Ports[0].Protocol != corev1.ProtocolTCP ||
		engine.Ports[1].ContainerPort != EngineHealthPort || engine.Ports[1].Name != "health" {
		t.Errorf("engine ports %+v, want grpc %d/TCP and health %d", engine.Ports, EnginePort, EngineHealthPort)
	}
	checkControlPlane(t, r, values)

	// The headless Service: ready engines only, on the gRPC port.
	svc := r.service
	if svc == nil {
		t.Fatal("no engine Service")
	}
	if svc.Name != names.EngineService {
		t.Errorf("Service name %q, want %q", svc.Name, names.EngineService)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service clusterIP %q, want None (headless)", svc.Spec.ClusterIP)
	}
	if svc.Spec.PublishNotReadyAddresses {
		t.Error("Service publishes not-ready addresses")
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != EnginePort || svc.Spec.Ports[0].Name != "grpc" ||
		svc.Spec.Ports[0].TargetPort != intstr.FromString("grpc") {
		t.Errorf("Service ports %+v, want grpc %d -> grpc", svc.Spec.Ports, EnginePort)
	}
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("Service selector %v does not select the engine pods %v", svc.Spec.Selector, pod.Labels)
	}

	// ServiceAccount.
	if r.account != nil {
		if r.account.AutomountServiceAccountToken == nil || *r.account.AutomountServiceAccountToken {
			t.Error("ServiceAccount mounts its token")
		}
		if pod.Spec.ServiceAccountName != r.account.Name {
			t.Errorf("engines run as %q, the chart's ServiceAccount is %q", pod.Spec.ServiceAccountName, r.account.Name)
		}
	}

	// The driver.
	if r.job != nil {
		checkJob(t, r, names, allowTags)
	} else if r.configMap != nil || r.claim != nil {
		t.Error("a plan ConfigMap or report PVC without the Job")
	}

	// NetworkPolicy: engines admit the driver, on the gRPC port only.
	if np := r.policy; np != nil {
		if np.Name != names.NetworkPolicy {
			t.Errorf("NetworkPolicy name %q, want %q", np.Name, names.NetworkPolicy)
		}
		sel, err := metav1LabelSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		if sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("NetworkPolicy podSelector %v does not select the engine pods", np.Spec.PodSelector)
		}
		if diff := cmp.Diff([]string{"Ingress"}, policyTypes(np)); diff != "" {
			t.Errorf("NetworkPolicy policyTypes (-want +got):\n%s (egress must stay open)", diff)
		}
		if len(np.Spec.Egress) != 0 {
			t.Errorf("NetworkPolicy has egress rules %+v", np.Spec.Egress)
		}
		if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0].PodSelector == nil {
			t.Fatalf("NetworkPolicy ingress %+v, want one rule from one pod selector", np.Spec.Ingress)
		}
		in := np.Spec.Ingress[0]
		from := in.From[0]
		if from.NamespaceSelector != nil || from.IPBlock != nil {
			t.Errorf("NetworkPolicy admits more than pods of the namespace: %+v", from)
		}
		fromSel, err := metav1LabelSelector(from.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		if fromSel.Empty() || fromSel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("NetworkPolicy admits %v, which selects the engines themselves", from.PodSelector)
		}
		driverSet, err := labels.ConvertSelectorToLabelsMap(names.DriverSelector)
		if err != nil {
			t.Fatal(err)
		}
		if !labels.Equals(from.PodSelector.MatchLabels, driverSet) {
			t.Errorf("NetworkPolicy admits %v, want the driver %q", from.PodSelector.MatchLabels, names.DriverSelector)
		}
		if r.job != nil && !fromSel.Matches(labels.Set(r.job.Spec.Template.Labels)) {
			t.Errorf("NetworkPolicy does not admit the driver pod %v", r.job.Spec.Template.Labels)
		}
		if len(in.Ports) != 1 || in.Ports[0].Port == nil || *in.Ports[0].Port != intstr.FromInt32(EnginePort) ||
			in.Ports[0].Protocol == nil || *in.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Errorf("NetworkPolicy ports %+v, want %d/TCP", in.Ports, EnginePort)
		}
	}
}

// checkPod holds a pod template to the hardening every sortie pod has.
func checkPod(t *testing.T, what string, pod *corev1.PodTemplateSpec, allowTags bool) {
	t.Helper()
	s := pod.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Errorf("%s pod mounts a ServiceAccount token", what)
	}
	if s.HostNetwork || s.HostPID || s.HostIPC {
		t.Errorf("%s pod shares a host namespace", what)
	}
	psc := s.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s pod securityContext %+v, want non-root 65532 with RuntimeDefault seccomp", what, psc)
	}
	if len(s.InitContainers) != 0 || len(s.EphemeralContainers) != 0 {
		t.Errorf("%s pod has init or ephemeral containers", what)
	}
	for _, c := range s.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s container %s has no securityContext", what, c.Name)
			continue
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot, sc.RunAsUser == nil || *sc.RunAsUser != 65532:
			t.Errorf("%s container %s may run as root: %+v", what, c.Name, sc)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s container %s has a writable root filesystem", what, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation, sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s container %s may escalate privileges", what, c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0:
			t.Errorf("%s container %s capabilities %+v, want drop ALL and add none", what, c.Name, sc.Capabilities)
		case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("%s container %s seccomp %+v, want RuntimeDefault", what, c.Name, sc.SeccompProfile)
		}
		if !allowTags && !digestRef.MatchString(c.Image) {
			t.Errorf("%s container %s image %q is not by digest", what, c.Name, c.Image)
		}
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/" {
				t.Errorf("%s container %s mounts over /", what, c.Name)
			}
		}
	}
}

// checkJob holds the driver Job, its plan ConfigMap and its report volume
// to what the kickoff and the saver rely on.
func checkJob(t *testing.T, r *rendered, names Names, allowTags bool) {
	t.Helper()
	job := r.job
	if job.Name != names.Job {
		t.Errorf("Job name %q, want %q", job.Name, names.Job)
	}
	// A run is never repeated, but resumed: only a driver that was
	// killed (137) or detached on SIGTERM (143) is started again.
	if b := job.Spec.BackoffLimit; b == nil || *b != 3 {
		t.Errorf("Job backoffLimit %s, want 3 (job.resumeLimit)", intPtr(b))
	}
	if pfp := job.Spec.PodFailurePolicy; pfp == nil || len(pfp.Rules) != 1 || pfp.Rules[0].Action != batchv1.PodFailurePolicyActionFailJob ||
		pfp.Rules[0].OnExitCodes == nil || pfp.Rules[0].OnExitCodes.Operator != batchv1.PodFailurePolicyOnExitCodesOpNotIn ||
		fmt.Sprint(pfp.Rules[0].OnExitCodes.Values) != "[137 143]" {
		t.Errorf("Job podFailurePolicy %+v: want FailJob on every exit code but 137 and 143", pfp)
	}
	if job.Spec.TTLSecondsAfterFinished != nil {
		t.Errorf("Job ttlSecondsAfterFinished %d: the Job and its log must stay", *job.Spec.TTLSecondsAfterFinished)
	}
	if job.Spec.ActiveDeadlineSeconds != nil {
		t.Errorf("Job activeDeadlineSeconds %d would cut a long run", *job.Spec.ActiveDeadlineSeconds)
	}
	if c := job.Spec.Completions; c != nil && *c != 1 {
		t.Errorf("Job completions %d, want 1", *c)
	}
	if p := job.Spec.Parallelism; p != nil && *p != 1 {
		t.Errorf("Job parallelism %d, want 1", *p)
	}
	pod := &job.Spec.Template
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("driver restartPolicy %q, want Never", pod.Spec.RestartPolicy)
	}
	driverSel, _ := labels.Parse(names.DriverSelector)
	if !driverSel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("DriverSelector %q does not match the driver pod labels %v", names.DriverSelector, pod.Labels)
	}
	engineSel, _ := labels.Parse(names.EngineSelector)
	if engineSel.Matches(labels.Set(pod.Labels)) {
		t.Error("EngineSelector matches the driver pod")
	}
	checkPod(t, "driver", pod, allowTags)
	driver := container(t, pod, DriverContainer)
	if len(driver.Args) < 2 || driver.Args[0] != "run" || driver.Args[1] != PlanPath {
		t.Errorf("driver args %q, want run %s ...", driver.Args, PlanPath)
	}
	if out, _ := argAfter(driver.Args, "-o"); !strings.HasPrefix(out, ReportDir+"/") {
		t.Errorf("driver -o %q, want a file under %s", out, ReportDir)
	}
	if s, ok := argAfter(driver.Args, "--results-stream"); ok && !strings.HasPrefix(s, ReportDir+"/") {
		t.Errorf("driver --results-stream %q, want a file under %s", s, ReportDir)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range driver.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts["plan"]; m.MountPath != "/plan" || !m.ReadOnly {
		t.Errorf("plan mount %+v, want /plan read-only", m)
	}
	if m := mounts["report"]; m.MountPath != ReportDir || m.ReadOnly {
		t.Errorf("report mount %+v, want %s writable", m, ReportDir)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}

	// The plan ConfigMap, named by the plan's digest.
	cm := r.configMap
	if cm == nil {
		t.Fatal("a Job without its plan ConfigMap")
	}
	plan, ok := cm.BinaryData["plan.yaml"]
	if !ok || len(cm.Data) != 0 {
		t.Fatalf("ConfigMap %s holds %v / %v, want binaryData plan.yaml only", cm.Name, cm.Data, cm.BinaryData)
	}
	if want := PlanConfigMapName(testRelease, string(plan)); cm.Name != want {
		t.Errorf("ConfigMap name %q, want %q (named by the plan's digest)", cm.Name, want)
	}
	if cm.Immutable == nil || !*cm.Immutable {
		t.Error("plan ConfigMap is not immutable")
	}
	if v := vols["plan"]; v.ConfigMap == nil || v.ConfigMap.Name != cm.Name {
		t.Errorf("driver plan volume %+v, want ConfigMap %s", v.VolumeSource, cm.Name)
	}

	// The report volume: the chart's claim, or the one named in values.
	v := vols["report"]
	if v.PersistentVolumeClaim == nil {
		t.Fatalf("driver report volume %+v is not a PVC", v.VolumeSource)
	}
	if r.claim != nil {
		if r.claim.Name != names.ReportClaim || v.PersistentVolumeClaim.ClaimName != r.claim.Name {
			t.Errorf("report claim %q mounted as %q, want %q", r.claim.Name, v.PersistentVolumeClaim.ClaimName, names.ReportClaim)
		}
	}
}

// intPtr prints an optional count.
func intPtr(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

// checkControlPlane holds the engines' control plane to the values: the
// allowlist as given; with tls.enabled (the default) mTLS on both ends,
// each pod mounting the run's CA and its own key pair from the Secret and
// never the other's key; without it plaintext, said on both ends.
func checkControlPlane(t *testing.T, r *rendered, values map[string]any) {
	t.Helper()
	tlsOn, secret := true, NamesFor(testRelease).TLSSecret
	if v, ok := values["tls"].(map[string]any); ok {
		if on, ok := v["enabled"].(bool); ok {
			tlsOn = on
		}
		if name, _ := v["secretName"].(string); name != "" {
			secret = name
		}
	}
	var allow []string
	if e, ok := values["engine"].(map[string]any); ok {
		for _, a := range e["allowTargets"].([]any) {
			allow = append(allow, a.(string))
		}
	}
	engine := container(t, r.enginePod(), EngineContainer)
	if got, _ := argAfter(engine.Args, "--allow-targets"); got != strings.Join(allow, ",") {
		t.Errorf("engine --allow-targets %q, want %q", got, strings.Join(allow, ","))
	}
	sides := []struct {
		name  string
		pod   *corev1.PodTemplateSpec
		c     *corev1.Container
		flags map[string]string
	}{{"engine", r.enginePod(), engine, map[string]string{
		"--tls-cert": TLSDir + "/engine.crt", "--tls-key": TLSDir + "/engine.key", "--client-ca": TLSDir + "/ca.crt"}}}
	if r.job != nil {
		sides = append(sides, struct {
			name  string
			pod   *corev1.PodTemplateSpec
			c     *corev1.Container
			flags map[string]string
		}{"driver", &r.job.Spec.Template, container(t, &r.job.Spec.Template, DriverContainer), map[string]string{
			"--client-cert": TLSDir + "/driver.crt", "--client-key": TLSDir + "/driver.key", "--engine-ca": TLSDir + "/ca.crt"}})
	}
	for _, s := range sides {
		var vol *corev1.Volume
		for i := range s.pod.Spec.Volumes {
			if s.pod.Spec.Volumes[i].Name == "tls" {
				vol = &s.pod.Spec.Volumes[i]
			}
		}
		if !tlsOn {
			if !hasArg(s.c.Args, "--insecure-plaintext") || vol != nil {
				t.Errorf("%s with tls.enabled=false: args %q, tls volume %v; want --insecure-plaintext and no volume", s.name, s.c.Args, vol)
			}
			continue
		}
		if hasArg(s.c.Args, "--insecure-plaintext") {
			t.Errorf("%s runs in plaintext with tls.enabled", s.name)
		}
		for flag, want := range s.flags {
			if got, _ := argAfter(s.c.Args, flag); got != want {
				t.Errorf("%s %s %q, want %q", s.name, flag, got, want)
			}
		}
		if vol == nil || vol.Secret == nil || vol.Secret.SecretName != secret {
			t.Errorf("%s tls volume %+v, want Secret %s", s.name, vol, secret)
			continue
		}
		var keys []string
		for _, it := range vol.Secret.Items {
			keys = append(keys, it.Key)
		}
		if want := []string{"ca.crt", s.name + ".crt", s.name + ".key"}; !slices.Equal(keys, want) {
			t.Errorf("%s mounts %q of the Secret, want %q (its own pair only)", s.name, keys, want)
		}
		mounted := false
		for _, m := range s.c.VolumeMounts {
			mounted = mounted || (m.Name == "tls" && m.MountPath == TLSDir && m.ReadOnly)
		}
		if !mounted {
			t.Errorf("%s does not mount the tls volume read-only at %s", s.name, TLSDir)
		}
	}
}
