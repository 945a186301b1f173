package churn

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// minReadySeconds is the least minReadySeconds of a rolled Deployment: a
// new pod must have stayed Ready this long before an old one goes, so a pod
// that flaps right after start does not take traffic down with it.
const minReadySeconds = 10

// access is one permission the schedule needs.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" {
		r += "." + a.group
	}
	return a.verb + " " + r
}

// Preflight checks the cluster for the schedule, prints one line per
// problem (or one ok line per target) and the verdict, and returns the
// number of problems. Only ctx's error is returned as an error.
func (c *Churner) Preflight(ctx context.Context) (int, error) {
	p := &preflight{c: c, objects: map[Ref]runtime.Object{}}
	type check struct {
		ref    Ref
		kind   string
		victim Victim
	}
	var checks []check
	seen := map[check]bool{}
	for _, st := range c.Schedule.Steps {
		k := check{st.Target, st.Kind, st.Victim}
		if st.Kind == StepNewSA {
			k.ref = Ref{Namespace: st.Target.Namespace, Kind: "new-serviceaccount", Name: st.Node}
		}
		if !seen[k] {
			seen[k] = true
			checks = append(checks, k)
		}
	}
	for _, r := range c.Opts.SampleAfter {
		parts := strings.SplitN(r, "/", 3)
		if len(parts) != 3 {
			continue // refused by Validate
		}
		k := check{Ref{Namespace: parts[0], Kind: parts[1], Name: parts[2]}, StepSample, Victim{}}
		if !seen[k] {
			seen[k] = true
			checks = append(checks, k)
		}
	}
	for _, k := range checks {
		var ok string
		switch k.kind {
		case StepRoll:
			ok = p.roll(ctx, k.ref)
		case StepShrink:
			ok = p.shrink(ctx, k.ref)
		case StepNewSA:
			ok = p.newSA(ctx, k.ref.Namespace, k.ref.Name)
		case StepSample:
			ok = p.sample(ctx, k.ref)
		case StepOutage:
			ok = p.outage(ctx, k.ref, k.victim)
		}
		if ctx.Err() != nil {
			return p.problems, ctx.Err()
		}
		if ok != "" {
			c.line("PREFLIGHT ok %s", ok)
		}
	}
	if p.problems > 0 {
		c.line("PREFLIGHT FAILED problems=%d", p.problems)
	} else {
		c.line("PREFLIGHT PASS targets=%d", len(checks))
	}
	return p.problems, nil
}

// preflight holds one preflight's state: the objects read (a target both
// rolled and shrunk is read once) and the problem count.
type preflight struct {
	c        *Churner
	objects  map[Ref]runtime.Object
	problems int
}

// problem prints one problem of what.
func (p *preflight) problem(what, format string, args ...any) {
	p.problems++
	p.c.line("PREFLIGHT FAIL %s: %s", what, fmt.Sprintf(format, args...))
}

// get reads ref once; a problem is printed when it cannot be read.
func (p *preflight) get(ctx context.Context, ref Ref) runtime.Object {
	if o, ok := p.objects[ref]; ok {
		return o
	}
	o, err := p.c.getWorkload(ctx, ref)
	if ctx.Err() != nil {
		return nil
	}
	switch {
	case apierrors.IsNotFound(err):
		p.problem(ref.String(), "does not exist -- fix: create it, or correct the schedule's name and -n")
		o = nil
	case err != nil:
		p.problem(ref.String(), "get: %s -- fix: check the API server answers and the account may get it", oneLine(err))
		o = nil
	}
	p.objects[ref] = o
	return o
}

// allowed asks the API server whether the account may do each of as, and
// names each refusal. It reports whether all were allowed.
func (p *preflight) allowed(ctx context.Context, what string, as ...access) bool {
	all := true
	for _, a := range as {
		ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.namespace, Verb: a.verb, Group: a.group,
				Resource: a.resource, Subresource: a.subresource, Name: a.name,
			},
		}}
		rctx, cancel := context.WithTimeout(ctx, p.c.Opts.RequestTimeout)
		res, err := p.c.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(rctx, ssar, metav1.CreateOptions{})
		cancel()
		if ctx.Err() != nil {
			return false
		}
		switch {
		case err != nil:
			p.problem(what, "cannot ask whether it may %s: %s -- fix: check the API server answers and the account may create selfsubjectaccessreviews", a, oneLine(err))
			all = false
		case !res.Status.Allowed:
			why := ""
			if res.Status.Reason != "" {
				why = " (" + res.Status.Reason + ")"
			}
			p.problem(what, "may not %s%s -- fix: grant %s to the account (its Role or ClusterRole)", a, why, a)
			all = false
		}
	}
	return all
}

// roll checks a rolled workload: it exists, may be patched, and can roll
// without dropping traffic.
func (p *preflight) roll(ctx context.Context, ref Ref) string {
	before := p.problems
	obj := p.get(ctx, ref)
	if obj == nil {
		return ""
	}
	resource := ref.Kind + "s"
	p.allowed(ctx, ref.String(),
		access{verb: "patch", group: "apps", resource: resource, namespace: ref.Namespace, name: ref.Name},
		access{verb: "get", group: "apps", resource: resource, namespace: ref.Namespace, name: ref.Name})
	var state string
	var problems []string
	switch o := obj.(type) {
	case *appsv1.Deployment:
		state, problems = deploymentRollable(o)
		if p.c.Opts.meshNamespace(ref.Namespace) {
			problems = append(problems, meshWorkload(o, p.c.Opts)...)
		}
	case *appsv1.DaemonSet:
		state, problems = daemonSetRollable(o)
	case *appsv1.StatefulSet:
		state, problems = statefulSetRollable(o)
	}
	for _, pr := range problems {
		p.problem(ref.String(), "%s", pr)
	}
	if p.problems > before {
		return ""
	}
	return fmt.Sprintf("%s roll %s", ref, state)
}

// shrink checks a shrunk deployment: it exists, has replicas to restore,
// and its scale may be read and written.
func (p *preflight) shrink(ctx context.Context, ref Ref) string {
	before := p.problems
	obj := p.get(ctx, ref)
	if obj == nil {
		return ""
	}
	p.allowed(ctx, ref.String(),
		access{verb: "get", group: "apps", resource: "deployments", subresource: "scale", namespace: ref.Namespace, name: ref.Name},
		access{verb: "update", group: "apps", resource: "deployments", subresource: "scale", namespace: ref.Namespace, name: ref.Name})
	d := obj.(*appsv1.Deployment)
	n := replicas(d.Spec.Replicas)
	if n == 0 {
		p.problem(ref.String(), "replicas=0: a shrink would have no count to restore -- fix: scale it up before the soak")
	}
	if p.problems > before {
		return ""
	}
	return fmt.Sprintf("%s shrink replicas=%d", ref, n)
}

// sample checks a memory sample's workload: it exists, and its pods may be
// listed and its nodes' kubelet summaries read.
func (p *preflight) sample(ctx context.Context, ref Ref) string {
	before := p.problems
	if p.get(ctx, ref) == nil {
		return ""
	}
	p.allowed(ctx, ref.String()+" (memory sample)",
		access{verb: "list", resource: "pods", namespace: ref.Namespace},
		access{verb: "get", resource: "nodes", subresource: "proxy"})
	if p.problems > before {
		return ""
	}
	return fmt.Sprintf("%s sample: pods listed, kubelet summaries readable", ref)
}

// outage checks a daemon-outage step: its DaemonSet as a roll, the access
// the step needs, and a running victim to delete.
func (p *preflight) outage(ctx context.Context, ref Ref, v Victim) string {
	before := p.problems
	if p.roll(ctx, ref) == "" && p.problems > before {
		return ""
	}
	what := fmt.Sprintf("%s victim=%s", ref, v)
	if !p.allowed(ctx, what,
		access{verb: "list", resource: "pods", namespace: ref.Namespace},
		access{verb: "list", resource: "pods", namespace: v.Namespace},
		access{verb: "get", resource: "pods", namespace: v.Namespace},
		access{verb: "delete", resource: "pods", namespace: v.Namespace},
		access{verb: "list", resource: "events", namespace: v.Namespace}) {
		return ""
	}
	sel, err := labels.Parse(v.Selector)
	if err != nil {
		p.problem(what, "selector: %s -- fix: write a label selector such as app=uds-echo", oneLine(err))
		return ""
	}
	pods, err := p.c.listPods(ctx, v.Namespace, sel)
	if ctx.Err() != nil {
		return ""
	}
	running := 0
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
			running++
		}
	}
	switch {
	case err != nil:
		p.problem(what, "%s -- fix: check the API server answers and the account may list pods", oneLine(err))
	case running == 0:
		p.problem(what, "no running pod matches %s in %s to delete during the outage -- fix: deploy the victim workload, or point --victim at one", v.Selector, v.Namespace)
	}
	if p.problems > before {
		return ""
	}
	return fmt.Sprintf("%s daemon-outage: %d running victims", what, running)
}

// newSA checks a new-serviceaccount step: the account may create and delete
// its objects, and its node exists and is Ready (auto: some node is).
func (p *preflight) newSA(ctx context.Context, ns, node string) string {
	before := p.problems
	what := fmt.Sprintf("%s/new-serviceaccount node=%s", ns, node)
	as := []access{
		{verb: "create", resource: "serviceaccounts", namespace: ns},
		{verb: "delete", resource: "serviceaccounts", namespace: ns},
		{verb: "create", group: "apps", resource: "deployments", namespace: ns},
		{verb: "get", group: "apps", resource: "deployments", namespace: ns},
		{verb: "delete", group: "apps", resource: "deployments", namespace: ns},
		{verb: "list", resource: "pods", namespace: ns},
		{verb: "get", resource: "pods", subresource: "log", namespace: ns},
	}
	if node == AutoNode {
		as = append(as, access{verb: "list", resource: "nodes"})
	} else {
		as = append(as, access{verb: "get", resource: "nodes", name: node})
	}
	if !p.allowed(ctx, what, as...) {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, p.c.Opts.RequestTimeout)
	defer cancel()
	detail := ""
	if node == AutoNode {
		nodes, err := p.c.eligibleNodes(rctx)
		if ctx.Err() != nil {
			return ""
		}
		if err != nil {
			p.problem(what, "%s -- fix: make a worker node Ready and schedulable, or name one", oneLine(err))
			return ""
		}
		names := make([]string, len(nodes))
		for i, n := range nodes {
			names[i] = n.Name
		}
		detail = "nodes=" + strings.Join(names, ",")
	} else {
		n, err := p.c.Client.CoreV1().Nodes().Get(rctx, node, metav1.GetOptions{})
		if ctx.Err() != nil {
			return ""
		}
		switch {
		case apierrors.IsNotFound(err):
			p.problem(what, "node %s does not exist -- fix: name a node of the cluster, or auto", node)
		case err != nil:
			p.problem(what, "get node: %s -- fix: check the API server answers and the account may get nodes", oneLine(err))
		default:
			if why := ineligible(n); why != "" {
				p.problem(what, "node %s %s -- fix: name a Ready, schedulable worker, or auto", node, why)
			}
		}
		detail = "ready"
	}
	if p.problems > before {
		return ""
	}
	return what + " " + detail
}

// deploymentRollable returns a Deployment's state and every reason it
// cannot roll without dropping traffic.
func deploymentRollable(d *appsv1.Deployment) (string, []string) {
	var out []string
	n := replicas(d.Spec.Replicas)
	st := d.Status
	if n == 0 {
		out = append(out, "replicas=0: nothing serves, so a roll proves nothing -- fix: scale it up before the soak")
	}
	if st.AvailableReplicas < n {
		out = append(out, fmt.Sprintf("only %d of %d replicas available -- fix: wait until every replica is available, or mend the pods that are not", st.AvailableReplicas, n))
	}
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas < n || st.Replicas > n {
		out = append(out, fmt.Sprintf("a rollout is in progress (observedGeneration=%d/%d updated=%d/%d replicas=%d) -- fix: let it finish (kubectl rollout status) and start again",
			st.ObservedGeneration, d.Generation, st.UpdatedReplicas, n, st.Replicas))
	}
	switch s := d.Spec.Strategy; {
	case s.Type != "" && s.Type != appsv1.RollingUpdateDeploymentStrategyType:
		out = append(out, fmt.Sprintf("strategy %s replaces all pods at once; want RollingUpdate -- fix: set spec.strategy.type: RollingUpdate", s.Type))
	case s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable == nil:
		out = append(out, "maxUnavailable is unset (defaults to 25%); want 0 -- fix: set spec.strategy.rollingUpdate.maxUnavailable: 0")
	case !isZero(*s.RollingUpdate.MaxUnavailable):
		out = append(out, fmt.Sprintf("maxUnavailable=%s; want 0 -- fix: set spec.strategy.rollingUpdate.maxUnavailable: 0", s.RollingUpdate.MaxUnavailable.String()))
	}
	if d.Spec.MinReadySeconds < minReadySeconds {
		out = append(out, fmt.Sprintf("minReadySeconds=%d; want >= %d -- fix: set spec.minReadySeconds: %d", d.Spec.MinReadySeconds, minReadySeconds, minReadySeconds))
	}
	for _, ctr := range d.Spec.Template.Spec.Containers {
		if ctr.Lifecycle == nil || ctr.Lifecycle.PreStop == nil {
			out = append(out, fmt.Sprintf("container %s has no preStop hook: it stops before its endpoints are withdrawn -- fix: add lifecycle.preStop.sleep.seconds", ctr.Name))
		}
		switch {
		case ctr.ReadinessProbe == nil:
			out = append(out, fmt.Sprintf("container %s has no readiness probe: a new pod takes traffic before it can serve -- fix: add a readinessProbe that asks the application (httpGet or grpc)", ctr.Name))
		case probesNothing(ctr.ReadinessProbe):
			out = append(out, fmt.Sprintf("container %s's readiness probe runs %q, which is ready whatever the application does -- fix: probe the application (httpGet or grpc)", ctr.Name, strings.Join(ctr.ReadinessProbe.Exec.Command, " ")))
		}
	}
	return fmt.Sprintf("replicas=%d available=%d", n, st.AvailableReplicas), out
}

// isZero reports whether v is 0 or "0%".
func isZero(v intstr.IntOrString) bool {
	if v.Type == intstr.Int {
		return v.IntVal == 0
	}
	return v.StrVal == "0%" || v.StrVal == "0"
}

func daemonSetRollable(d *appsv1.DaemonSet) (string, []string) {
	var out []string
	st := d.Status
	if t := d.Spec.UpdateStrategy.Type; t == appsv1.OnDeleteDaemonSetStrategyType {
		out = append(out, "updateStrategy OnDelete: a restart would replace no pod; want RollingUpdate -- fix: set spec.updateStrategy.type: RollingUpdate")
	}
	if st.DesiredNumberScheduled == 0 {
		out = append(out, "no node runs it (desiredNumberScheduled=0) -- fix: check its nodeSelector and tolerations")
	}
	if st.NumberAvailable < st.DesiredNumberScheduled {
		out = append(out, fmt.Sprintf("only %d of %d pods available -- fix: wait until every pod is available, or mend the pods that are not", st.NumberAvailable, st.DesiredNumberScheduled))
	}
	if st.ObservedGeneration < d.Generation || st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
		out = append(out, fmt.Sprintf("a rollout is in progress (observedGeneration=%d/%d updated=%d/%d) -- fix: let it finish (kubectl rollout status) and start again",
			st.ObservedGeneration, d.Generation, st.UpdatedNumberScheduled, st.DesiredNumberScheduled))
	}
	return fmt.Sprintf("desired=%d available=%d", st.DesiredNumberScheduled, st.NumberAvailable), out
}

func statefulSetRollable(s *appsv1.StatefulSet) (string, []string) {
	var out []string
	n := replicas(s.Spec.Replicas)
	st := s.Status
	switch u := s.Spec.UpdateStrategy; {
	case u.Type == appsv1.OnDeleteStatefulSetStrategyType:
		out = append(out, "updateStrategy OnDelete: a restart would replace no pod; want RollingUpdate -- fix: set spec.updateStrategy.type: RollingUpdate")
	case u.RollingUpdate != nil && u.RollingUpdate.Partition != nil && *u.RollingUpdate.Partition > 0:
		out = append(out, fmt.Sprintf("partition=%d: a restart would not reach every pod -- fix: set spec.updateStrategy.rollingUpdate.partition: 0", *u.RollingUpdate.Partition))
	}
	if n == 0 {
		out = append(out, "replicas=0: nothing serves, so a roll proves nothing -- fix: scale it up before the soak")
	}
	if st.ReadyReplicas < n || st.AvailableReplicas < n {
		out = append(out, fmt.Sprintf("only %d of %d replicas available -- fix: wait until every replica is available, or mend the pods that are not", st.AvailableReplicas, n))
	}
	if st.ObservedGeneration < s.Generation || st.CurrentRevision != st.UpdateRevision {
		out = append(out, fmt.Sprintf("a rollout is in progress (observedGeneration=%d/%d revision %s -> %s) -- fix: let it finish (kubectl rollout status) and start again",
			st.ObservedGeneration, s.Generation, st.CurrentRevision, st.UpdateRevision))
	}
	return fmt.Sprintf("replicas=%d available=%d", n, st.AvailableReplicas), out
}

// probesNothing reports a readiness probe that succeeds whatever the
// application does: an exec of true.
func probesNothing(p *corev1.Probe) bool {
	if p.Exec == nil {
		return false
	}
	c := p.Exec.Command
	return len(c) == 1 && path.Base(c[0]) == "true"
}

// meshWorkload returns every reason a Deployment under load falls short of
// the mesh's bar: managed by the mesh, under its own identity, and slow
// enough to leave that its removal reaches every proxy first.
func meshWorkload(d *appsv1.Deployment, o Options) []string {
	var out []string
	spec := d.Spec.Template.Spec
	if o.ManagedLabel != "" {
		k, v, _ := strings.Cut(o.ManagedLabel, "=")
		if got, ok := d.Spec.Template.Labels[k]; !ok || got != v {
			out = append(out, fmt.Sprintf("its pods lack the label %s=%s: the mesh does not manage them, so the soak would not measure the mesh -- fix: add it to spec.template.metadata.labels (or set --managed-label)", k, v))
		}
	}
	if o.SARule == SAOwn && spec.ServiceAccountName != d.Name {
		sa := spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		out = append(out, fmt.Sprintf("runs under ServiceAccount %q, not its own %q: the mesh names its service after the account -- fix: create ServiceAccount %s and set spec.template.spec.serviceAccountName: %s (or --sa-rule any)", sa, d.Name, d.Name, d.Name))
	}
	if o.MinPreStopSleep <= 0 {
		return out
	}
	longest, known := time.Duration(0), true
	for _, ctr := range spec.Containers {
		if ctr.Lifecycle == nil || ctr.Lifecycle.PreStop == nil {
			continue // named by deploymentRollable
		}
		sleep, ok := preStopSleep(ctr.Lifecycle.PreStop)
		switch {
		case !ok:
			known = false
			out = append(out, fmt.Sprintf("container %s's preStop hook is not a sleep, so how long it keeps serving cannot be read -- fix: use lifecycle.preStop.sleep.seconds: %d or more", ctr.Name, int(o.MinPreStopSleep/time.Second)))
		case sleep < o.MinPreStopSleep:
			out = append(out, fmt.Sprintf("container %s's preStop sleeps %ds, less than the %ds its removal takes to reach every proxy -- fix: set lifecycle.preStop.sleep.seconds: %d (or --min-prestop-sleep)", ctr.Name, int(sleep/time.Second), int(o.MinPreStopSleep/time.Second), int(o.MinPreStopSleep/time.Second)))
		}
		longest = max(longest, sleep)
	}
	grace := 30 * time.Second // the API server's default
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if need := longest + o.Drain; known && longest > 0 && grace < need {
		out = append(out, fmt.Sprintf("terminationGracePeriodSeconds=%d is less than its preStop sleep %ds + drain %ds: the pod is killed mid-drain -- fix: set spec.template.spec.terminationGracePeriodSeconds: %d or more",
			int(grace/time.Second), int(longest/time.Second), int(o.Drain/time.Second), int(need/time.Second)))
	}
	return out
}

// preStopSleep reads how long a preStop hook sleeps: the sleep action, or
// an exec of "sleep N" (directly or through "sh -c"). ok is false for any
// other hook.
func preStopSleep(h *corev1.LifecycleHandler) (d time.Duration, ok bool) {
	if h.Sleep != nil {
		return time.Duration(h.Sleep.Seconds) * time.Second, true
	}
	if h.Exec == nil {
		return 0, false
	}
	args := h.Exec.Command
	if len(args) == 3 && args[1] == "-c" {
		args = strings.Fields(args[2])
		if len(args) > 0 && args[0] == "exec" {
			args = args[1:]
		}
	}
	if len(args) != 2 || path.Base(args[0]) != "sleep" {
		return 0, false
	}
	n, err := strconv.ParseUint(args[1], 10, 31)
	if err != nil {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}
