package churn

import (
	"context"
	"errors"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels of a new-serviceaccount step's objects. newSALabel carries the
// step's name and selects its pod.
const (
	managedByLabel = "app.kubernetes.io/managed-by"
	newSALabel     = "sortie.io/new-serviceaccount"
	hostnameLabel  = "kubernetes.io/hostname"
	controlPlane   = "node-role.kubernetes.io/control-plane"
)

// newServiceAccount runs a new-serviceaccount step: a ServiceAccount and a
// 1-replica Deployment under it, pinned to a node, awaited until available,
// kept NewSAHold, then both deleted. The objects are deleted whatever
// happens (a failure, a signal), on a context of their own.
func (c *Churner) newServiceAccount(ctx context.Context, st Step) error {
	ns := st.Target.Namespace
	name := fmt.Sprintf("sa-new-%d", st.At(c.Opts.T0).Unix())
	ref := Ref{Namespace: ns, Kind: "serviceaccount", Name: name}
	c.during = []string{"new-serviceaccount " + ref.String()}
	at := c.Clock.Now()
	node := st.Node // the node picked, once it is
	fail := func(why string) error {
		c.line("FAILED %s node=%s at=%s took=%s: %s", ref, node, stamp(at), secs(c.Clock.Now().Sub(at)), why)
		return &stepFailed{fmt.Sprintf("new-serviceaccount %s (line %d) failed: %s", ref, st.Line, why)}
	}
	picked, hostname, err := c.pickNode(ctx, st.Node)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fail(err.Error())
	}
	node = picked
	c.newSAs++

	created := false
	defer func() {
		if created {
			c.deleteNewSA(ctx, ns, name)
		}
	}()
	labels := map[string]string{managedByLabel: fieldManager, newSALabel: name}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	_, err = c.Client.CoreV1().ServiceAccounts(ns).Create(rctx, sa, metav1.CreateOptions{FieldManager: fieldManager})
	cancel()
	// From the first create on, the step's objects may exist: delete them
	// whatever comes next (a NotFound is fine).
	created = true
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fail("create serviceaccount: " + oneLine(err))
	}
	rctx, cancel = context.WithTimeout(ctx, c.Opts.RequestTimeout)
	dep, err := c.Client.AppsV1().Deployments(ns).Create(rctx, c.newSADeployment(ns, name, node, hostname, labels), metav1.CreateOptions{FieldManager: fieldManager})
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fail("create deployment: " + oneLine(err))
	}
	tr := &tracked{step: st, ref: Ref{Namespace: ns, Kind: KindDeployment, Name: name}, gen: dep.Generation, started: at}
	if err := c.await(ctx, []*tracked{tr}); err != nil {
		return err
	}
	if !tr.ok {
		return fail("its pod never became available: " + tr.why)
	}
	ready := tr.finished.Sub(at)
	held := c.Clock.Now()
	if err := c.waitUntil(ctx, held.Add(c.Opts.NewSAHold)); err != nil {
		return err
	}
	created = false
	c.deleteNewSA(ctx, ns, name)
	c.newSADone++
	c.line("ROLLED %s node=%s at=%s took=%s held=%s", ref, node, stamp(at), secs(ready), secs(c.Clock.Now().Sub(held)))
	return nil
}

// newSADeployment is the step's workload: one pod under the new account,
// on the node, running the configured command.
func (c *Churner) newSADeployment(ns, name, node, hostname string, labels map[string]string) *appsv1.Deployment {
	podLabels := map[string]string{}
	for k, v := range c.Opts.NewSALabels {
		podLabels[k] = v
	}
	for k, v := range labels {
		podLabels[k] = v
	}
	one := int32(1)
	no := false
	grace := int64(5)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{newSALabel: name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            name,
					NodeSelector:                  map[string]string{hostnameLabel: hostname},
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:    "client",
						Image:   c.Opts.NewSAImage,
						Command: []string{"sh", "-c", c.Opts.NewSACommand},
						Env: []corev1.EnvVar{
							{Name: "SORTIE_NEWSA_STEP", Value: name},
							{Name: "SORTIE_NEWSA_NODE", Value: node},
						},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("10m"),
							corev1.ResourceMemory: resource.MustParse("16Mi"),
						}},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: &no,
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// deleteNewSA deletes a step's Deployment and ServiceAccount on a context
// of its own, and names what it could not delete.
func (c *Churner) deleteNewSA(ctx context.Context, ns, name string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Opts.CleanupTimeout)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	if err := c.Client.AppsV1().Deployments(ns).Delete(cctx, name, opts); err != nil && !apierrors.IsNotFound(err) {
		c.line("WARN %s/deployment/%s was not deleted: %s", ns, name, oneLine(err))
	}
	if err := c.Client.CoreV1().ServiceAccounts(ns).Delete(cctx, name, opts); err != nil && !apierrors.IsNotFound(err) {
		c.line("WARN %s/serviceaccount/%s was not deleted: %s", ns, name, oneLine(err))
	}
}

// pickNode resolves a step's node: a named node must exist and be Ready;
// auto takes the eligible nodes in name order, one per step in turn. It
// returns the node's name and its hostname label (what the pod selects).
func (c *Churner) pickNode(ctx context.Context, want string) (string, string, error) {
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	defer cancel()
	if want != AutoNode {
		n, err := c.Client.CoreV1().Nodes().Get(rctx, want, metav1.GetOptions{})
		if err != nil {
			return "", "", fmt.Errorf("node %s: %w", want, err)
		}
		if why := ineligible(n); why != "" {
			return "", "", fmt.Errorf("node %s %s", want, why)
		}
		return n.Name, hostname(n), nil
	}
	nodes, err := c.eligibleNodes(rctx)
	if err != nil {
		return "", "", err
	}
	n := nodes[c.newSAs%len(nodes)]
	return n.Name, hostname(&n), nil
}

// eligibleNodes lists the Ready, schedulable, non-control-plane nodes in
// name order; none is an error.
func (c *Churner) eligibleNodes(ctx context.Context) ([]corev1.Node, error) {
	l, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []corev1.Node
	for _, n := range l.Items {
		if _, cp := n.Labels[controlPlane]; cp || ineligible(&n) != "" {
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no Ready, schedulable, non-control-plane node")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ineligible says why a pod cannot be placed on n, or "".
func ineligible(n *corev1.Node) string {
	if n.Spec.Unschedulable {
		return "is cordoned"
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return ""
			}
			return "is not Ready"
		}
	}
	return "has no Ready condition"
}

func hostname(n *corev1.Node) string {
	if h := n.Labels[hostnameLabel]; h != "" {
		return h
	}
	return n.Name
}
