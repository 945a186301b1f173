package churn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sortie-soak/sortie/engine/oneshot"
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
// 1-replica Deployment under it, pinned to a node, whose pod runs the
// engine's client mode (sortie-engine oneshot) at the targets from its
// first instant. Once the pod is available the step reads the client's
// tally back through the pod's log, then deletes both objects. The objects
// are deleted whatever happens (a failure, a signal), on a context of
// their own.
//
// A tally in which a request was not a 2xx is a finding, not a hole: the
// step prints FAILED and the schedule goes on. A step without a tally (the
// objects refused, the pod never available, no final line in time) is a
// hole and aborts the run, as a failed roll does.
func (c *Churner) newServiceAccount(ctx context.Context, st Step) error {
	ns := st.Target.Namespace
	name := fmt.Sprintf("sa-new-%d", st.At(c.Opts.T0).Unix())
	ref := Ref{Namespace: ns, Kind: KindNewSA, Name: name}
	c.during = []string{"new-serviceaccount " + ref.String()}
	at := c.Clock.Now()
	node, ready := st.Node, ""
	fail := func(why string) error {
		c.line("FAILED %s at=%s took=%s node=%s%s: %s", ref, stamp(at), secs(c.Clock.Now().Sub(at)), node, ready, why)
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
	dep, err := c.Client.AppsV1().Deployments(ns).Create(rctx, c.newSADeployment(ns, name, hostname, labels), metav1.CreateOptions{FieldManager: fieldManager})
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
	ready = " ready=" + secs(tr.finished.Sub(at))
	final, why, err := c.awaitTally(ctx, ns, name, tr.finished)
	if err != nil {
		return err
	}
	created = false
	c.deleteNewSA(ctx, ns, name)
	if why != "" {
		return fail(why)
	}
	c.newSADone++
	head := fmt.Sprintf("%s at=%s took=%s node=%s%s tally=%s", ref, stamp(at), secs(c.Clock.Now().Sub(at)), node, ready,
		strings.ReplaceAll(final.Tally(), " ", ";"))
	if final.Clean() {
		c.line("ROLLED %s", head)
		return nil
	}
	c.findings++
	c.line("FAILED %s: not every request was a 2xx (a finding: the schedule goes on)", head)
	return nil
}

// maxPodLog bounds what is read of the client pod's log: its final line
// is its last, and well under it.
const maxPodLog = 256 << 10

// awaitTally polls the step's pod log for the client's final line, until
// the client's own bound plus NewSAHold has passed since the pod was
// available. why says what went wrong when there is no tally; only ctx's
// error is returned as an error.
func (c *Churner) awaitTally(ctx context.Context, ns, name string, ready time.Time) (final oneshot.Final, why string, err error) {
	bound := c.Opts.newSABurst().Bound() + c.Opts.NewSAHold
	deadline := ready.Add(bound)
	last := "its pod was not found"
	for {
		log, err := c.newSALog(ctx, ns, name)
		if ctx.Err() != nil {
			return final, "", ctx.Err()
		}
		if err != nil {
			last = oneLine(err)
		} else {
			f, found, perr := oneshot.FindFinal(log)
			switch {
			case perr != nil:
				return final, "its final line does not read: " + oneLine(perr), nil
			case found:
				return f, "", nil
			}
			last = "the log holds no final line yet"
		}
		if !c.Clock.Now().Before(deadline) {
			return final, fmt.Sprintf("no %s line within %s of ready (%s)", oneshot.FinalWord, secs(bound), last), nil
		}
		if err := c.waitUntil(ctx, minTime(deadline, c.Clock.Now().Add(c.Opts.Poll))); err != nil {
			return final, "", err
		}
	}
}

// newSALog reads the end of the client container's log of the step's pod.
func (c *Churner) newSALog(ctx context.Context, ns, name string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	defer cancel()
	pods, err := c.Client.CoreV1().Pods(ns).List(rctx, metav1.ListOptions{LabelSelector: newSALabel + "=" + name})
	if err != nil {
		return "", fmt.Errorf("list its pods: %w", err)
	}
	var pod string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			pod = p.Name
			break
		}
	}
	if pod == "" {
		return "", errors.New("no running pod")
	}
	tail, limit := int64(100), int64(maxPodLog)
	rc, err := c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: newSAContainer, TailLines: &tail, LimitBytes: &limit}).Stream(rctx)
	if err != nil {
		return "", fmt.Errorf("read the log of %s: %w", pod, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxPodLog))
	if err != nil {
		return "", fmt.Errorf("read the log of %s: %w", pod, err)
	}
	return string(b), nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// newSAContainer is the client container's name.
const newSAContainer = "client"

// newSADeployment is the step's workload: one pod under the new account,
// on the node, running the client mode of the engine image against the
// targets, with the mesh's labels and annotations.
func (c *Churner) newSADeployment(ns, name, hostname string, labels map[string]string) *appsv1.Deployment {
	podLabels := map[string]string{}
	for k, v := range c.Opts.NewSALabels {
		podLabels[k] = v
	}
	for k, v := range labels {
		podLabels[k] = v
	}
	annotations := map[string]string{}
	for k, v := range c.Opts.NewSAAnnotations {
		annotations[k] = v
	}
	names := make([]string, len(c.Opts.NewSATargets))
	for i, t := range c.Opts.NewSATargets {
		names[i] = t.Name
	}
	if c.Opts.NewSAUpstreamsAnnotation != "" {
		annotations[c.Opts.NewSAUpstreamsAnnotation] = strings.Join(names, ",")
	}
	b := c.Opts.newSABurst()
	args := []string{"oneshot", "--step", name, "--node", "$(SORTIE_NEWSA_NODE)",
		"--requests", fmt.Sprint(b.Requests), "--rate", fmt.Sprint(b.Rate), "--timeout", b.Timeout.String()}
	for _, t := range c.Opts.NewSATargets {
		args = append(args, "--target", t.Name+"="+t.URL)
	}
	one := int32(1)
	no, yes := false, true
	grace := int64(5)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{newSALabel: name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: annotations},
				Spec: corev1.PodSpec{
					ServiceAccountName:            name,
					NodeSelector:                  map[string]string{hostnameLabel: hostname},
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:  newSAContainer,
						Image: c.Opts.NewSAImage,
						// The image's entrypoint is sortie-engine.
						Args: args,
						Env: []corev1.EnvVar{{Name: "SORTIE_NEWSA_NODE", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"},
						}}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{
								corev1.ResourceCPU:    resource.MustParse("20m"),
								corev1.ResourceMemory: resource.MustParse("16Mi"),
							},
							Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: &no,
							ReadOnlyRootFilesystem:   &yes,
							RunAsNonRoot:             &yes,
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
// auto takes the eligible nodes in name order, one per step in turn,
// starting at T0's minute (Unix time / 60) modulo their number. It
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
	// In turn across the steps of a run, from a node that depends on T0
	// (its minute), so successive soaks do not all start on one node.
	n := nodes[(c.Opts.T0.Unix()/60+int64(c.newSAs))%int64(len(nodes))]
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
