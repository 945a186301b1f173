package churn

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		ref  Ref
		kind string
	}
	var checks []check
	seen := map[check]bool{}
	for _, st := range c.Schedule.Steps {
		k := check{st.Target, st.Kind}
		if st.Kind == StepNewSA {
			k.ref = Ref{Namespace: st.Target.Namespace, Kind: "new-serviceaccount", Name: st.Node}
		}
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
		p.problem(ref.String(), "does not exist")
		o = nil
	case err != nil:
		p.problem(ref.String(), "get: %s", oneLine(err))
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
			p.problem(what, "cannot ask whether it may %s: %s", a, oneLine(err))
			all = false
		case !res.Status.Allowed:
			why := ""
			if res.Status.Reason != "" {
				why = " (" + res.Status.Reason + ")"
			}
			p.problem(what, "may not %s%s", a, why)
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
		p.problem(ref.String(), "replicas=0: a shrink would have no count to restore")
	}
	if p.problems > before {
		return ""
	}
	return fmt.Sprintf("%s shrink replicas=%d", ref, n)
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
			p.problem(what, "%s", oneLine(err))
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
			p.problem(what, "node %s does not exist", node)
		case err != nil:
			p.problem(what, "get node: %s", oneLine(err))
		default:
			if why := ineligible(n); why != "" {
				p.problem(what, "node %s %s", node, why)
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
		out = append(out, "replicas=0: nothing serves, so a roll proves nothing")
	}
	if st.AvailableReplicas < n {
		out = append(out, fmt.Sprintf("only %d of %d replicas available", st.AvailableReplicas, n))
	}
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas < n || st.Replicas > n {
		out = append(out, fmt.Sprintf("a rollout is in progress (observedGeneration=%d/%d updated=%d/%d replicas=%d)",
			st.ObservedGeneration, d.Generation, st.UpdatedReplicas, n, st.Replicas))
	}
	switch s := d.Spec.Strategy; {
	case s.Type != "" && s.Type != appsv1.RollingUpdateDeploymentStrategyType:
		out = append(out, fmt.Sprintf("strategy %s replaces all pods at once; want RollingUpdate", s.Type))
	case s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable == nil:
		out = append(out, "maxUnavailable is unset (defaults to 25%); want 0")
	case !isZero(*s.RollingUpdate.MaxUnavailable):
		out = append(out, fmt.Sprintf("maxUnavailable=%s; want 0", s.RollingUpdate.MaxUnavailable.String()))
	}
	if d.Spec.MinReadySeconds < minReadySeconds {
		out = append(out, fmt.Sprintf("minReadySeconds=%d; want >= %d", d.Spec.MinReadySeconds, minReadySeconds))
	}
	for _, ctr := range d.Spec.Template.Spec.Containers {
		if ctr.Lifecycle == nil || ctr.Lifecycle.PreStop == nil {
			out = append(out, fmt.Sprintf("container %s has no preStop hook: it stops before its endpoints are withdrawn", ctr.Name))
		}
		if ctr.ReadinessProbe == nil {
			out = append(out, fmt.Sprintf("container %s has no readiness probe: a new pod takes traffic before it can serve", ctr.Name))
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
		out = append(out, "updateStrategy OnDelete: a restart would replace no pod; want RollingUpdate")
	}
	if st.DesiredNumberScheduled == 0 {
		out = append(out, "no node runs it (desiredNumberScheduled=0)")
	}
	if st.NumberAvailable < st.DesiredNumberScheduled {
		out = append(out, fmt.Sprintf("only %d of %d pods available", st.NumberAvailable, st.DesiredNumberScheduled))
	}
	if st.ObservedGeneration < d.Generation || st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
		out = append(out, fmt.Sprintf("a rollout is in progress (observedGeneration=%d/%d updated=%d/%d)",
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
		out = append(out, "updateStrategy OnDelete: a restart would replace no pod; want RollingUpdate")
	case u.RollingUpdate != nil && u.RollingUpdate.Partition != nil && *u.RollingUpdate.Partition > 0:
		out = append(out, fmt.Sprintf("partition=%d: a restart would not reach every pod", *u.RollingUpdate.Partition))
	}
	if n == 0 {
		out = append(out, "replicas=0: nothing serves, so a roll proves nothing")
	}
	if st.ReadyReplicas < n || st.AvailableReplicas < n {
		out = append(out, fmt.Sprintf("only %d of %d replicas available", st.AvailableReplicas, n))
	}
	if st.ObservedGeneration < s.Generation || st.CurrentRevision != st.UpdateRevision {
		out = append(out, fmt.Sprintf("a rollout is in progress (observedGeneration=%d/%d revision %s -> %s)",
			st.ObservedGeneration, s.Generation, st.CurrentRevision, st.UpdateRevision))
	}
	return fmt.Sprintf("replicas=%d available=%d", n, st.AvailableReplicas), out
}
