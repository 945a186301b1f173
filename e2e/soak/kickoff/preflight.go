package kickoff

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/churn"
	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/internal/helmvalues"
	"github.com/sortie-soak/sortie/internal/kube"
	"github.com/sortie-soak/sortie/provenance"
	"github.com/sortie-soak/sortie/watchdog"
)

// placeholderPlan stands in for the plan when the release is rendered
// before the engines exist: the images do not depend on the plan.
const placeholderPlan = "version: v1\n"

// preflight runs every check, prints one line each, and returns the number
// of problems. It changes nothing in the cluster.
func (k *kickoff) preflight(ctx context.Context) int {
	problems := 0
	ok := func(format string, args ...any) { k.line("PREFLIGHT ok "+format, args...) }
	fail := func(format string, args ...any) {
		problems++
		k.line("PREFLIGHT FAIL "+format, args...)
	}

	// The API server first: without it every other check fails for the
	// same reason.
	v, err := discovery.ToServerVersionInterfaceWithContext(k.cs.Discovery()).ServerVersionWithContext(ctx)
	if err != nil {
		fail("api: context %s does not answer: %s", k.o.Context, cluster.OneLine(err))
		return problems
	}
	ok("api: context %s answers (server %s)", k.o.Context, v.GitVersion)

	for _, key := range kickoffKeys {
		if helmvalues.Lookup(k.base, key) != nil {
			k.line("PREFLIGHT note values: %s in %s is replaced by the kickoff's own", key, k.o.ValuesFile)
		}
	}

	k.preflightProvenance(ctx, ok, fail)

	switch state, err := k.priorityClassState(ctx); {
	case err != nil:
		fail("priorityclass/%s: %s", k.o.PriorityClass, cluster.OneLine(err))
	case state == "":
		ok("priorityclass/%s is absent: the run creates it (value %d, preemptionPolicy Never)", k.o.PriorityClass, k.o.PriorityValue)
	case state == "ok":
		ok("priorityclass/%s exists (value %d, preemptionPolicy Never)", k.o.PriorityClass, k.o.PriorityValue)
	default:
		fail("priorityclass/%s exists but is not the soak's (%s; want value=%d preemptionPolicy=Never globalDefault=false); its value and policy cannot change: pass another --priority-class",
			k.o.PriorityClass, state, k.o.PriorityValue)
	}

	k.preflightReportClaim(ctx, ok, fail)

	for _, ns := range k.o.SystemNamespaces {
		k.preflightSystemPods(ctx, ns, ok, fail)
	}

	k.preflightTargets(ctx, ok, fail)

	// One run per release: upgrading a release with a new plan replaces
	// the Job, and a finished Job's pod log is its only copy until saved.
	sel := "app.kubernetes.io/instance=" + k.o.Release + ",app.kubernetes.io/name=sortie"
	jobs, err := k.cs.BatchV1().Jobs(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	switch {
	case err != nil:
		fail("jobs: cannot list the jobs of release %s: %s", k.o.Release, cluster.OneLine(err))
	case len(jobs.Items) > 0:
		fail("jobs: release %s already has a run in %s (%s): save it (sortie-save --dir) and tear it down (soak teardown --dir) first",
			k.o.Release, k.o.Namespace, strings.Join(jobNames(jobs.Items), ", "))
	default:
		ok("jobs: release %s has no earlier Job in %s", k.o.Release, k.o.Namespace)
	}
	switch status, err := k.helm.Status(ctx, k.o.Release, k.o.Namespace); {
	case errors.Is(err, cluster.ErrNoRelease):
		ok("release: %s does not exist in %s", k.o.Release, k.o.Namespace)
	case err != nil:
		fail("release: status of %s: %s", k.o.Release, cluster.OneLine(err))
	default:
		fail("release: %s already exists in %s (status %s): tear it down first (soak teardown --dir <its run directory>)", k.o.Release, k.o.Namespace, status)
	}

	k.preflightWatchdog(ctx, ok, fail)
	if k.schedule != nil {
		k.preflightChurn(ctx, ok, fail)
	}
	return problems
}

func jobNames(jobs []batchv1.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = "job/" + j.Name
	}
	sort.Strings(out)
	return out
}

// preflightProvenance renders the release as the run will install it and
// checks every image it would run, the reader pod's image, and the chart.
func (k *kickoff) preflightProvenance(ctx context.Context, ok, fail func(string, ...any)) {
	manifests, err := chart.Render(k.values(true, placeholderPlan), k.o.Release, k.o.Namespace)
	if err != nil {
		fail("chart: does not render with these values: %s", cluster.OneLine(err))
		return
	}
	images, err := provenance.ImageRefs([]byte(chart.Join(manifests)))
	if err != nil {
		fail("chart: %s", cluster.OneLine(err))
		return
	}
	k.driverImage = driverImage(manifests)
	k.engineImage = engineImage(manifests)
	if k.driverImage == "" {
		fail("chart: the rendered release has no %s container", chart.DriverContainer)
	}
	ok("chart %s renders: the release runs %d images", chart.ChartName, len(images))
	refs := append([]string{}, images...)
	if k.o.ReaderImage != "" && !slices.Contains(refs, k.o.ReaderImage) {
		refs = append(refs, k.o.ReaderImage)
		sort.Strings(refs)
	}
	dir, digest, err := writeEmbeddedChart(k.dir)
	if err != nil {
		fail("chart: write it into the run directory: %s", cluster.OneLine(err))
		return
	}
	want := digest
	if k.o.ChartDigest != "" {
		want = k.o.ChartDigest
	}
	lines, err := k.env.Provenance(ctx, cluster.ProvenanceRequest{
		Images: refs, Chart: dir, ChartDigest: want,
		Verify: k.o.Verify, Key: k.o.Key, Identity: k.o.Identity, Issuer: k.o.Issuer, TrustedRoot: k.o.TrustedRoot,
	})
	if err != nil {
		for _, l := range readLines(err.Error()) {
			fail("provenance: %s", l)
		}
		return
	}
	for _, l := range lines {
		if k.o.Preflight {
			// The chart was hashed in a directory that is gone when this
			// returns.
			l = strings.ReplaceAll(l, k.dir, "<temporary>")
		}
		if strings.Contains(l, provenance.NotVerified) {
			k.line("PREFLIGHT note %s", l)
			continue
		}
		ok("provenance: %s", l)
	}
	if k.o.Verify {
		// The chart is this binary's own: a signature on it is the
		// binary's (its image's), which is not checked here.
		k.line("PREFLIGHT note provenance: the chart is the one built into this binary (content %s); its signature is its image's", digest)
	}
}

// driverImage returns the image of the driver container of a rendered
// release, or "".
func driverImage(manifests map[string]string) string {
	return containerImage(manifests, chart.DriverContainer, func(obj runtime.Object) *corev1.PodSpec {
		if job, ok := obj.(*batchv1.Job); ok {
			return &job.Spec.Template.Spec
		}
		return nil
	})
}

// engineImage is the image of the engine container of the rendered
// release (a DaemonSet or a Deployment), or "".
func engineImage(manifests map[string]string) string {
	return containerImage(manifests, chart.EngineContainer, func(obj runtime.Object) *corev1.PodSpec {
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			return &o.Spec.Template.Spec
		case *appsv1.Deployment:
			return &o.Spec.Template.Spec
		}
		return nil
	})
}

// containerImage decodes a rendered release, document by document in the
// chart's order, and returns the image of the first container named name
// in a pod spec that spec finds in an object (nil: not a workload it
// looks in), or "".
func containerImage(manifests map[string]string, name string, spec func(runtime.Object) *corev1.PodSpec) string {
	dec := scheme.Codecs.UniversalDeserializer()
	for _, path := range chart.Paths(manifests) {
		for _, doc := range splitYAMLDocs(manifests[path]) {
			obj, _, err := dec.Decode([]byte(doc), nil, nil)
			if err != nil {
				continue
			}
			ps := spec(obj)
			if ps == nil {
				continue
			}
			for _, c := range ps.Containers {
				if c.Name == name {
					return c.Image
				}
			}
		}
	}
	return ""
}

// splitYAMLDocs splits a multi-document YAML stream at its "---" lines.
func splitYAMLDocs(s string) []string {
	var docs []string
	var cur bytes.Buffer
	flush := func() {
		if strings.TrimSpace(cur.String()) != "" {
			docs = append(docs, cur.String())
		}
		cur.Reset()
	}
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.TrimRight(l, "\r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(l)
	}
	flush()
	return docs
}

// preflightSystemPods checks that every pod of ns is Running with every
// container ready, comparing the counts as numbers. Pods that completed
// (Succeeded) are jobs that ran, not a problem.
func (k *kickoff) preflightSystemPods(ctx context.Context, ns string, ok, fail func(string, ...any)) {
	pods, err := k.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("system pods: cannot list the pods of %s: %s", ns, cluster.OneLine(err))
		return
	}
	counted, bad := 0, 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		counted++
		ready, total := 0, len(p.Spec.Containers)
		for _, c := range p.Status.ContainerStatuses {
			if c.Ready {
				ready++
			}
		}
		if p.Status.Phase != corev1.PodRunning || ready < total {
			bad++
			fail("system pods: %s/%s is %s with %d/%d containers ready", ns, p.Name, p.Status.Phase, ready, total)
		}
	}
	switch {
	case counted == 0:
		// An empty namespace is a wrong name or a mesh that is not
		// installed, never a healthy one.
		fail("system pods: %s has no running pods -- fix: install the mesh there, or correct --system-namespaces", ns)
	case bad == 0:
		ok("system pods: %s has %d pods, all ready", ns, counted)
	}
}

// serviceRef is the Service a target's URL names.
type serviceRef struct{ ns, name string }

// serviceFromURL reads the Service behind a target's URL host,
// <name>.<namespace>[.<domain>...]; a bare <name> is in defaultNS.
func serviceFromURL(raw, defaultNS string) (serviceRef, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return serviceRef{}, err
	}
	host := u.Hostname()
	if net.ParseIP(host) != nil {
		return serviceRef{}, fmt.Errorf("host %s is an address, not a Service name", host)
	}
	labels := strings.Split(host, ".")
	ref := serviceRef{name: labels[0], ns: defaultNS}
	if len(labels) > 1 {
		ref.ns = labels[1]
	}
	if ref.name == "" || ref.ns == "" {
		return serviceRef{}, fmt.Errorf("host %q names no Service", host)
	}
	return ref, nil
}

// preflightTargets checks that every target's Service exists.
func (k *kickoff) preflightTargets(ctx context.Context, ok, fail func(string, ...any)) {
	var found []string
	bad := 0
	for _, t := range k.targets {
		ref, err := serviceFromURL(t.URL, k.o.Namespace)
		if err != nil {
			bad++
			fail("target %s: %s", t.Name, cluster.OneLine(err))
			continue
		}
		_, err = k.cs.CoreV1().Services(ref.ns).Get(ctx, ref.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			bad++
			fail("target %s: service %s/%s does not exist", t.Name, ref.ns, ref.name)
		case err != nil:
			bad++
			fail("target %s: service %s/%s: %s", t.Name, ref.ns, ref.name, cluster.OneLine(err))
		default:
			found = append(found, ref.ns+"/"+ref.name)
		}
	}
	if bad == 0 {
		ok("targets: every target's Service exists (%s)", strings.Join(found, " "))
	}
}

// preflightWatchdog runs the watchdog's own pre-flight on the namespaces it
// will watch.
func (k *kickoff) preflightWatchdog(ctx context.Context, ok, fail func(string, ...any)) {
	cs, err := k.env.NewClient(k.o.Kubeconfig, k.o.Context, compWatchdog)
	if err != nil {
		fail("watchdog: %s", cluster.OneLine(err))
		return
	}
	var out bytes.Buffer
	env := watchdog.Env{
		NewClient: func(string, string) (kubernetes.Interface, error) { return cs, nil },
		Clock:     k.cclk,
	}
	args := []string{"--namespaces", strings.Join(k.watchNS, ","), "--interval", k.o.WatchInterval.String(),
		"--duration", k.o.PlannedDuration().String(), "--preflight"}
	err = watchdog.RunEnv(ctx, env, args, &out, &out)
	said := componentProblems(out.String())
	if err != nil || len(said) > 0 {
		if len(said) == 0 {
			said = []string{cluster.OneLine(err)}
		}
		for _, s := range said {
			fail("watchdog: %s", s)
		}
		return
	}
	ok("watchdog: can take its baseline in %s", strings.Join(k.watchNS, ","))
}

// preflightChurn runs the churn driver's own pre-flight on the schedule.
func (k *kickoff) preflightChurn(ctx context.Context, ok, fail func(string, ...any)) {
	cs, err := k.env.NewClient(k.o.Kubeconfig, k.o.Context, compChurn)
	if err != nil {
		fail("churn: %s", cluster.OneLine(err))
		return
	}
	var out bytes.Buffer
	co := k.churnOptions()
	co.Preflight = true
	if err := co.ForSchedule(k.schedule); err != nil {
		fail("churn: %s", cluster.OneLine(err))
	}
	c := &churn.Churner{Client: cs, Clock: k.cclk, Opts: co, Schedule: k.schedule, Out: &out, Log: k.log}
	n, err := c.Preflight(ctx)
	if err != nil || n > 0 {
		said := componentProblems(out.String())
		if len(said) == 0 && err != nil {
			said = []string{cluster.OneLine(err)}
		}
		for _, s := range said {
			fail("churn: %s", s)
		}
		return
	}
	ok("churn: schedule %s can run (%d steps)", filepath.Base(k.o.Rolls), len(k.schedule.Steps))
}

// componentProblems picks the problem lines of a component's pre-flight
// output ("PREFLIGHT FAIL ..."), without their prefix.
func componentProblems(out string) []string {
	var said []string
	for _, l := range readLines(out) {
		if rest, found := strings.CutPrefix(l, "PREFLIGHT FAIL "); found {
			said = append(said, rest)
		}
	}
	return said
}

// priorityClassState is "" when the class is absent, "ok" when it is the
// soak's, else what it is.
func (k *kickoff) priorityClassState(ctx context.Context) (string, error) {
	pc, err := k.cs.SchedulingV1().PriorityClasses().Get(ctx, k.o.PriorityClass, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	policy := corev1.PreemptLowerPriority
	if pc.PreemptionPolicy != nil {
		policy = *pc.PreemptionPolicy
	}
	if pc.Value == k.o.PriorityValue && policy == corev1.PreemptNever && !pc.GlobalDefault {
		return "ok", nil
	}
	return fmt.Sprintf("value=%d preemptionPolicy=%s globalDefault=%t", pc.Value, policy, pc.GlobalDefault), nil
}

// applyPriorityClass makes the class exist as the soak's and reads it back.
// again says this is the re-check before the Job.
func (k *kickoff) applyPriorityClass(ctx context.Context, again bool) error {
	state, err := k.priorityClassState(ctx)
	if err != nil {
		return fmt.Errorf("priorityclass/%s: %w", k.o.PriorityClass, err)
	}
	created := false
	if state == "" {
		never := corev1.PreemptNever
		pc := &schedulingv1.PriorityClass{
			ObjectMeta: metav1.ObjectMeta{
				Name:   k.o.PriorityClass,
				Labels: map[string]string{"app.kubernetes.io/part-of": "sortie", "app.kubernetes.io/managed-by": "soak"},
			},
			Value:            k.o.PriorityValue,
			PreemptionPolicy: &never,
			Description:      priorityClassFor,
		}
		_, err := k.cs.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create priorityclass/%s: %w", k.o.PriorityClass, err)
		}
		created = true
		if state, err = k.priorityClassState(ctx); err != nil {
			return fmt.Errorf("read back priorityclass/%s: %w", k.o.PriorityClass, err)
		}
	}
	if state != "ok" {
		what := state
		if what == "" {
			what = "absent"
		}
		return fmt.Errorf("priorityclass/%s is %s after applying it, want value=%d preemptionPolicy=Never: something else owns a class of that name",
			k.o.PriorityClass, what, k.o.PriorityValue)
	}
	verb := "applied"
	switch {
	case again && created:
		verb = "re-created (it had been deleted since the engines were installed)"
	case again:
		verb = "re-checked"
	case !created:
		verb = "kept (it exists)"
	}
	k.step("priorityclass/%s %s: value %d, preemptionPolicy Never, read back", k.o.PriorityClass, verb, k.o.PriorityValue)
	return nil
}

// preflightReportClaim checks, changing nothing, that the report PVC can
// hold the run: a claim that exists is Bound, or Pending with a class that
// exists (step 4 waits for it to bind); an absent one has a class to be
// made with. A Lost claim or a class that is gone would only show once the
// driver pod stayed Pending, after the engines were installed.
func (k *kickoff) preflightReportClaim(ctx context.Context, ok, fail func(string, ...any)) {
	claim, err := k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Get(ctx, k.pvc, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		sc, how, err := k.storageClass(ctx)
		if err != nil {
			fail("pvc/%s: %s", k.pvc, cluster.OneLine(err))
			return
		}
		ok("pvc/%s is absent: the run creates it with storage class %s (%s, volumeBindingMode %s)", k.pvc, sc.Name, how, bindingMode(sc))
		return
	case err != nil:
		fail("pvc/%s: %s", k.pvc, cluster.OneLine(err))
		return
	}
	class := claimClass(claim)
	switch claim.Status.Phase {
	case corev1.ClaimBound:
		ok("pvc/%s exists and is Bound to volume %s (%s)", k.pvc, claim.Spec.VolumeName, classWords(class))
		return
	case corev1.ClaimLost:
		fail("pvc/%s is Lost: its volume %s is gone and the claim can never bind again (%s, %s); delete the claim and the run makes a new one",
			k.pvc, orDash(claim.Spec.VolumeName), classWords(class), k.lastClaimEvent(ctx))
		return
	}
	if class == "" {
		k.line("PREFLIGHT note pvc/%s exists, Pending, with no storage class: the run waits --pvc-timeout %s for a volume to bind it (%s)", k.pvc, k.o.PVCTimeout, k.lastClaimEvent(ctx))
		return
	}
	mode, err := k.classMode(ctx, class)
	switch {
	case err != nil:
		fail("pvc/%s is %s: %s", k.pvc, phaseOf(claim), cluster.OneLine(err))
	case mode == storagev1.VolumeBindingWaitForFirstConsumer:
		ok("pvc/%s exists, Pending until the driver pod is scheduled (storage class %s, volumeBindingMode %s)", k.pvc, class, mode)
	default:
		k.line("PREFLIGHT note pvc/%s exists but is Pending (storage class %s, volumeBindingMode %s, %s): the run waits --pvc-timeout %s for it to bind",
			k.pvc, class, mode, k.lastClaimEvent(ctx), k.o.PVCTimeout)
	}
}

// reportPVC keeps the report PVC if it exists, else creates it with the
// storage class of the flag, else the only default class, else the only
// class.
func (k *kickoff) reportPVC(ctx context.Context) error {
	pvcs := k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace)
	old, err := pvcs.Get(ctx, k.pvc, metav1.GetOptions{})
	if err == nil {
		k.step("pvc/%s kept: it exists (storage class %s); this run's files on it are %s and %s", k.pvc, orDash(claimClass(old)), k.reportName, k.streamName)
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("pvc/%s: %w", k.pvc, err)
	}
	sc, how, err := k.storageClass(ctx)
	if err != nil {
		return fmt.Errorf("pvc/%s: %w", k.pvc, err)
	}
	class := sc.Name
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      k.pvc,
			Namespace: k.o.Namespace,
			Labels:    map[string]string{"app.kubernetes.io/part-of": "sortie", "app.kubernetes.io/instance": k.o.Release},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: mustQuantity(reportClaimSize)},
			},
		},
	}
	if _, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pvc/%s: %w", k.pvc, err)
	}
	k.step("pvc/%s created: storage class %s (%s), %s", k.pvc, class, how, reportClaimSize)
	return nil
}

// waitReportClaim waits, up to --pvc-timeout on the kickoff's clock, for
// the report PVC to be Bound, so that a claim that cannot bind stops the
// run before anything is installed rather than as a driver pod that stays
// Pending. A claim whose class binds on first consumer is bound only once
// the driver pod is scheduled: for it the class is checked instead.
func (k *kickoff) waitReportClaim(ctx context.Context) error {
	deadline := k.clk.Now().Add(k.o.PVCTimeout)
	class, mode := "", storagev1.VolumeBindingImmediate
	for first := true; ; first = false {
		claim, err := k.cs.CoreV1().PersistentVolumeClaims(k.o.Namespace).Get(ctx, k.pvc, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted while waiting for pvc/%s to bind", k.pvc)
			}
			return fmt.Errorf("pvc/%s: %w", k.pvc, err)
		}
		if first {
			if class = claimClass(claim); class != "" {
				if mode, err = k.classMode(ctx, class); err != nil {
					return fmt.Errorf("pvc/%s is %s and cannot bind: %w", k.pvc, phaseOf(claim), err)
				}
			}
		}
		switch {
		case claim.Status.Phase == corev1.ClaimBound:
			k.step("pvc/%s Bound to volume %s", k.pvc, claim.Spec.VolumeName)
			return nil
		case claim.Status.Phase == corev1.ClaimLost:
			return k.claimUnbound(ctx, claim, "is Lost", class, mode)
		case mode == storagev1.VolumeBindingWaitForFirstConsumer:
			k.step("pvc/%s %s until the driver pod is scheduled: storage class %s exists and binds on first consumer (volumeBindingMode %s)",
				k.pvc, phaseOf(claim), class, mode)
			return nil
		case !k.clk.Now().Before(deadline):
			return k.claimUnbound(ctx, claim, fmt.Sprintf("is not Bound after %s", k.o.PVCTimeout), class, mode)
		}
		if err := k.clk.Sleep(ctx, k.o.Poll); err != nil {
			return fmt.Errorf("interrupted while waiting for pvc/%s to bind (phase %s)", k.pvc, phaseOf(claim))
		}
	}
}

// claimUnbound is the error of a report PVC that did not bind: the claim,
// its phase, its class and what the cluster last said about it.
func (k *kickoff) claimUnbound(ctx context.Context, claim *corev1.PersistentVolumeClaim, what, class string, mode storagev1.VolumeBindingMode) error {
	where := "no storage class"
	if class != "" {
		where = fmt.Sprintf("storage class %s (volumeBindingMode %s)", class, mode)
	}
	return fmt.Errorf("pvc/%s %s: phase %s, %s, %s", k.pvc, what, phaseOf(claim), where, k.lastClaimEvent(ctx))
}

// lastClaimEvent says what the cluster last said about the report PVC: its
// newest Warning event (a provisioner's or the binder's reason), else its
// newest event, as `event <type> <reason> "<message>"`.
func (k *kickoff) lastClaimEvent(ctx context.Context) string {
	sel := fields.Set{"involvedObject.kind": "PersistentVolumeClaim", "involvedObject.name": k.pvc}.String()
	list, err := k.cs.CoreV1().Events(k.o.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return "events not listed: " + cluster.OneLine(err)
	}
	var last *corev1.Event
	for i := range list.Items {
		e := &list.Items[i]
		// Filtered here too: the selector is the server's to honour.
		if e.InvolvedObject.Kind != "PersistentVolumeClaim" || e.InvolvedObject.Name != k.pvc {
			continue
		}
		if last == nil || laterEvent(e, last) {
			last = e
		}
	}
	if last == nil {
		return "no events"
	}
	return "event " + last.Type + " " + conditionWhy(last.Reason, last.Message)
}

// laterEvent reports whether a says more than b: a Warning over a Normal
// event, else the one seen last (by name on a tie).
func laterEvent(a, b *corev1.Event) bool {
	if aw, bw := a.Type == corev1.EventTypeWarning, b.Type == corev1.EventTypeWarning; aw != bw {
		return aw
	}
	at, bt := kube.EventTime(a), kube.EventTime(b)
	if !at.Equal(bt) {
		return at.After(bt)
	}
	return a.Name > b.Name
}

// classMode reads the binding mode of a storage class that must exist.
func (k *kickoff) classMode(ctx context.Context, class string) (storagev1.VolumeBindingMode, error) {
	sc, err := k.cs.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("its storage class %s does not exist: create the class, or delete the claim and the run makes a new one", class)
	}
	if err != nil {
		return "", fmt.Errorf("storage class %s: %w", class, err)
	}
	return bindingMode(sc), nil
}

// bindingMode is a class's volumeBindingMode; unset is Immediate.
func bindingMode(sc *storagev1.StorageClass) storagev1.VolumeBindingMode {
	if sc.VolumeBindingMode == nil || *sc.VolumeBindingMode == "" {
		return storagev1.VolumeBindingImmediate
	}
	return *sc.VolumeBindingMode
}

// claimClass is a claim's storage class name, "" when it has none.
func claimClass(c *corev1.PersistentVolumeClaim) string {
	if c.Spec.StorageClassName == nil {
		return ""
	}
	return *c.Spec.StorageClassName
}

// classWords names a claim's class in a sentence.
func classWords(class string) string {
	if class == "" {
		return "no storage class"
	}
	return "storage class " + class
}

// phaseOf is a claim's phase; a claim the API server has not given one yet
// is Pending.
func phaseOf(c *corev1.PersistentVolumeClaim) corev1.PersistentVolumeClaimPhase {
	if c.Status.Phase == "" {
		return corev1.ClaimPending
	}
	return c.Status.Phase
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// storageClass picks the report PVC's class and says how.
func (k *kickoff) storageClass(ctx context.Context) (sc *storagev1.StorageClass, how string, err error) {
	if k.o.StorageClass != "" {
		sc, err := k.cs.StorageV1().StorageClasses().Get(ctx, k.o.StorageClass, metav1.GetOptions{})
		if err != nil {
			return nil, "", fmt.Errorf("--storage-class %s: %w", k.o.StorageClass, err)
		}
		return sc, "--storage-class", nil
	}
	list, err := k.cs.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("list storage classes: %w", err)
	}
	var all, defaults []string
	byName := map[string]*storagev1.StorageClass{}
	for i, sc := range list.Items {
		all = append(all, sc.Name)
		byName[sc.Name] = &list.Items[i]
		if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			defaults = append(defaults, sc.Name)
		}
	}
	sort.Strings(all)
	sort.Strings(defaults)
	switch {
	case len(defaults) == 1:
		return byName[defaults[0]], "the default class", nil
	case len(defaults) == 0 && len(all) == 1:
		return byName[all[0]], "the only class", nil
	case len(defaults) > 1:
		return nil, "", fmt.Errorf("no storage class: %d default classes (%s): pass --storage-class", len(defaults), strings.Join(defaults, ", "))
	case len(all) == 0:
		return nil, "", errors.New("no storage class: the cluster has none")
	}
	return nil, "", fmt.Errorf("no storage class: no default class and %d to choose from (%s): pass --storage-class", len(all), strings.Join(all, ", "))
}

// waitEngines waits until the engines are all ready and the headless
// Service lists every one of them, and keeps them as k.engines.
func (k *kickoff) waitEngines(ctx context.Context) error {
	deadline := k.clk.Now().Add(k.o.EnginesTimeout)
	wait := func(where string) error {
		if !k.clk.Now().Before(deadline) {
			return fmt.Errorf("engines not ready after %s: %s", k.o.EnginesTimeout, where)
		}
		if err := k.clk.Sleep(ctx, k.o.Poll); err != nil {
			return fmt.Errorf("interrupted while waiting for the engines: %s", where)
		}
		return nil
	}
	var desired int
	for {
		n, where, err := k.workloadReady(ctx)
		if err == nil && n > 0 {
			desired = n
			break
		}
		if err != nil {
			where = cluster.OneLine(err)
		}
		if err := wait(where); err != nil {
			return err
		}
	}
	k.step("engines ready %d/%d (%s/%s)", desired, desired, strings.ToLower(k.engineKind), k.names.EngineWorkload)
	for {
		rows, where, err := k.listedEngines(ctx, desired)
		if err == nil && rows != nil {
			k.engines, k.backends = rows, len(rows)
			break
		}
		if err != nil {
			where = cluster.OneLine(err)
		}
		if err := wait(where); err != nil {
			return err
		}
	}
	k.step("service/%s lists every engine: %d addresses", k.names.EngineService, k.backends)
	return nil
}

// workloadReady returns the number of engines when every one is scheduled,
// updated and ready; else 0 and where the rollout stands.
func (k *kickoff) workloadReady(ctx context.Context) (int, string, error) {
	apps := k.cs.AppsV1()
	if k.engineKind == "Deployment" {
		d, err := apps.Deployments(k.o.Namespace).Get(ctx, k.names.EngineWorkload, metav1.GetOptions{})
		if err != nil {
			return 0, "", err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		st := d.Status
		where := fmt.Sprintf("deployment/%s replicas=%d ready=%d updated=%d", d.Name, want, st.ReadyReplicas, st.UpdatedReplicas)
		if st.ObservedGeneration >= d.Generation && want > 0 && st.ReadyReplicas == want && st.UpdatedReplicas == want && st.Replicas == want {
			return int(want), where, nil
		}
		return 0, where, nil
	}
	ds, err := apps.DaemonSets(k.o.Namespace).Get(ctx, k.names.EngineWorkload, metav1.GetOptions{})
	if err != nil {
		return 0, "", err
	}
	st := ds.Status
	where := fmt.Sprintf("daemonset/%s desired=%d ready=%d updated=%d", ds.Name, st.DesiredNumberScheduled, st.NumberReady, st.UpdatedNumberScheduled)
	if st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled > 0 &&
		st.NumberReady == st.DesiredNumberScheduled && st.UpdatedNumberScheduled == st.DesiredNumberScheduled {
		return int(st.DesiredNumberScheduled), where, nil
	}
	return 0, where, nil
}

// listedEngines returns the ready engine pods when there are desired of
// them and the headless Service's EndpointSlices list every one as ready;
// else nil and what is missing.
func (k *kickoff) listedEngines(ctx context.Context, desired int) ([]engineRow, string, error) {
	pods, err := k.cs.CoreV1().Pods(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: k.names.EngineSelector})
	if err != nil {
		return nil, "", err
	}
	var rows []engineRow
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !podReady(&p) {
			continue
		}
		rows = append(rows, engineRow{ip: p.Status.PodIP, node: p.Spec.NodeName, pod: p.Name})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ip < rows[j].ip })
	if len(rows) != desired {
		return nil, fmt.Sprintf("%d ready engine pods, want %d", len(rows), desired), nil
	}
	slices, err := k.cs.DiscoveryV1().EndpointSlices(k.o.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + k.names.EngineService})
	if err != nil {
		return nil, "", err
	}
	listed := map[string]bool{}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			// A nil ready condition means ready (the API's own rule).
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				listed[a] = true
			}
		}
	}
	var missing []string
	for _, r := range rows {
		if !listed[r.ip] {
			missing = append(missing, r.ip+" ("+r.node+")")
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Sprintf("service/%s lists %d of %d engines, missing %s", k.names.EngineService, len(rows)-len(missing), len(rows), strings.Join(missing, ", ")), nil
	}
	return rows, "", nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// mustQuantity parses a quantity that is a constant of this file.
func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
