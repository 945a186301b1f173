package churn

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sortie-soak/sortie/internal/kube"
)

// The daemon-outage step. A node daemon (a CSI plugin, a node proxy) that
// is rolled leaves its node without it for a moment; pods deleted in that
// moment need the daemon to tear down their mounts or their identity, and
// a defect there shows as a pod stuck terminating, a replacement that does
// not start, or FailedMount events that outlive the roll. So the step
// rolls the DaemonSet and, as soon as the victim node's daemon pod is down
// (the old pod terminating or gone, no replacement Ready), deletes a
// victim pod on that node, then reports what followed.

// Windows: where the victim's deletion fell.
const (
	// WindowDown: the delete was accepted while the node's daemon was
	// down, confirmed by a read after it.
	WindowDown = "down"
	// WindowLate: the daemon was up again by the time the delete was
	// accepted; the leg may not have run.
	WindowLate = "late"
	// WindowMissed: the daemon was never seen down within OutageWindow
	// (or its replacement was already Ready when first seen).
	WindowMissed = "missed"
)

// Daemon states on the victim's node.
const (
	daemonUp   = "up"
	daemonDown = "down"
	daemonBack = "back"
)

// outage is what a daemon-outage step saw, for its line.
type outage struct {
	victim, node, daemonPod string
	before                  map[string]bool
	window, windowWhy       string
	deletedAt               time.Time
	rollout, terminated     string
	replacement, ready      string
	fmDuring, fmAfter       string
	bad                     []string
}

// daemonOutage runs a daemon-outage step. A step that cannot do its part
// (no victim, the roll or the delete refused) is a hole and aborts; once
// the victim is deleted, whatever follows is reported, and a report that
// is not clean is a finding: FAILED, and the schedule goes on.
func (c *Churner) daemonOutage(ctx context.Context, st Step) error {
	ref := st.Target
	c.during = []string{"daemon-outage " + ref.String()}
	at := c.Clock.Now()
	fail := func(why string) error {
		c.line("FAILED %s at=%s took=%s victim=%s: %s", ref, stamp(at), secs(c.Clock.Now().Sub(at)), st.Victim, why)
		return &stepFailed{fmt.Sprintf("daemon-outage %s (line %d) failed: %s", ref, st.Line, why)}
	}
	o := &outage{rollout: "-", terminated: "-", replacement: "-", ready: "-"}
	sel, err := c.pickVictim(ctx, st.Victim, o)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fail(err.Error())
	}
	dsSel, err := c.daemonSelector(ctx, ref)
	if err == nil {
		o.daemonPod, err = c.daemonPodOn(ctx, ref.Namespace, dsSel, o.node)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fail(err.Error())
	}
	gen, err := c.restart(ctx, ref, at)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fail("rollout restart: " + oneLine(err))
	}
	if err := c.awaitDown(ctx, ref.Namespace, dsSel, o, at); err != nil {
		return err
	}
	o.deletedAt = c.Clock.Now()
	if err := c.deletePod(ctx, st.Victim.Namespace, o.victim); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fail(fmt.Sprintf("delete %s/%s: %s", st.Victim.Namespace, o.victim, oneLine(err)))
	}
	if o.window == WindowDown {
		if state, _ := c.daemonState(ctx, ref.Namespace, dsSel, o); state != daemonDown {
			o.window, o.windowWhy = WindowLate, "the daemon on "+o.node+" was up again by the time the delete was accepted"
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := c.outageAftermath(ctx, st, gen, sel, o, at); err != nil {
		return err
	}
	c.outageLine(st, o, at)
	return nil
}

// pickVictim takes the first running pod of the victim selector, in name
// order, and notes every pod the selector matches now (a replacement is a
// pod that is not among them).
func (c *Churner) pickVictim(ctx context.Context, v Victim, o *outage) (labels.Selector, error) {
	sel, err := labels.Parse(v.Selector)
	if err != nil {
		return nil, fmt.Errorf("victim selector %q: %w", v.Selector, err)
	}
	pods, err := c.listPods(ctx, v.Namespace, sel)
	if err != nil {
		return nil, err
	}
	o.before = map[string]bool{}
	for _, p := range pods {
		o.before[p.Name] = true
		if o.victim == "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			o.victim, o.node = p.Name, p.Spec.NodeName
		}
	}
	if o.victim == "" {
		return nil, fmt.Errorf("no running pod matches %s in %s to delete", v.Selector, v.Namespace)
	}
	return sel, nil
}

// listPods lists the pods of sel in ns, in name order.
func (c *Churner) listPods(ctx context.Context, ns string, sel labels.Selector) ([]corev1.Pod, error) {
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	defer cancel()
	l, err := c.Client.CoreV1().Pods(ns).List(rctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods %s in %s: %w", sel, ns, err)
	}
	// The selector is applied here too: a client's filtering is not
	// relied on.
	var out []corev1.Pod
	for _, p := range l.Items {
		if sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// daemonSelector reads the DaemonSet's pod selector.
func (c *Churner) daemonSelector(ctx context.Context, ref Ref) (labels.Selector, error) {
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	defer cancel()
	ds, err := c.Client.AppsV1().DaemonSets(ref.Namespace).Get(rctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", ref, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() {
		return nil, fmt.Errorf("%s has no usable pod selector", ref)
	}
	return sel, nil
}

// daemonPodOn names the DaemonSet's live pod on node ("" when none).
func (c *Churner) daemonPodOn(ctx context.Context, ns string, sel labels.Selector, node string) (string, error) {
	pods, err := c.listPods(ctx, ns, sel)
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return p.Name, nil
		}
	}
	return "", nil
}

// daemonState says whether the daemon on the victim's node is up (its old
// pod live, no replacement Ready), down (the old pod terminating or gone,
// no replacement Ready) or back (a replacement Ready).
func (c *Churner) daemonState(ctx context.Context, ns string, sel labels.Selector, o *outage) (string, error) {
	pods, err := c.listPods(ctx, ns, sel)
	if err != nil {
		return "", err
	}
	old := false
	for _, p := range pods {
		if p.Spec.NodeName != o.node {
			continue
		}
		if p.Name == o.daemonPod {
			old = p.DeletionTimestamp == nil
			continue
		}
		if p.DeletionTimestamp == nil && podReady(&p) {
			return daemonBack, nil
		}
	}
	if old {
		return daemonUp, nil
	}
	return daemonDown, nil
}

// awaitDown polls the victim node's daemon until it is down, back, or
// OutageWindow has passed, and sets the window accordingly. Only ctx's
// error (or a failed restore) is returned.
func (c *Churner) awaitDown(ctx context.Context, ns string, sel labels.Selector, o *outage, at time.Time) error {
	o.window = WindowMissed
	if o.daemonPod == "" {
		o.windowWhy = "no pod of the DaemonSet on " + o.node
		return nil
	}
	deadline := at.Add(c.Opts.OutageWindow)
	last := "not read"
	for {
		state, err := c.daemonState(ctx, ns, sel, o)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case err != nil:
			last = oneLine(err)
		case state == daemonDown:
			o.window = WindowDown
			return nil
		case state == daemonBack:
			o.windowWhy = "the daemon's replacement on " + o.node + " was already Ready when first seen"
			return nil
		default:
			last = state
		}
		if !c.Clock.Now().Before(deadline) {
			o.windowWhy = fmt.Sprintf("%s was not down within %s (last: %s)", o.daemonPod, secs(c.Opts.OutageWindow), last)
			return nil
		}
		if err := c.waitUntil(ctx, minTime(deadline, c.Clock.Now().Add(c.Opts.OutagePoll))); err != nil {
			return err
		}
	}
}

// deletePod deletes one pod, without waiting for it to go.
func (c *Churner) deletePod(ctx context.Context, ns, name string) error {
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	defer cancel()
	return c.Client.CoreV1().Pods(ns).Delete(rctx, name, metav1.DeleteOptions{})
}

// podReady reports the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// outageAftermath waits for the DaemonSet's rollout, the victim to be
// gone and its replacement Ready (each within RolloutTimeout), then counts
// the victim namespace's FailedMount events during the step and in the
// OutageSettle after it.
func (c *Churner) outageAftermath(ctx context.Context, st Step, gen int64, sel labels.Selector, o *outage, at time.Time) error {
	tr := &tracked{step: st, ref: st.Target, gen: gen, started: at}
	if err := c.await(ctx, []*tracked{tr}); err != nil {
		return err
	}
	if tr.ok {
		o.rollout = secs(tr.finished.Sub(at))
	} else {
		o.bad = append(o.bad, "rollout")
	}
	ns := st.Victim.Namespace
	err := c.pollFor(ctx, o.deletedAt, func(rctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(ns).Get(rctx, o.victim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		o.terminated = secs(c.Clock.Now().Sub(o.deletedAt))
	} else {
		o.bad = append(o.bad, "terminating")
	}
	err = c.pollFor(ctx, o.deletedAt, func(rctx context.Context) (bool, error) {
		pods, err := c.listPods(rctx, ns, sel)
		for _, p := range pods {
			if !o.before[p.Name] && p.DeletionTimestamp == nil && podReady(&p) {
				o.replacement = p.Name
				return true, nil
			}
		}
		return false, err
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		o.ready = secs(c.Clock.Now().Sub(o.deletedAt))
	} else {
		o.bad = append(o.bad, "replacement")
	}
	return c.countFailedMounts(ctx, ns, o, at)
}

// pollFor calls done every Poll until it reports true, or RolloutTimeout
// has passed since from (an error then). Only ctx's error is returned
// besides that one.
func (c *Churner) pollFor(ctx context.Context, from time.Time, done func(context.Context) (bool, error)) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
		ok, err := done(rctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ok {
			return nil
		}
		if c.Clock.Now().Sub(from) >= c.Opts.RolloutTimeout {
			if err == nil {
				err = errors.New("not within the rollout timeout")
			}
			return err
		}
		if err := c.waitUntil(ctx, c.Clock.Now().Add(c.Opts.Poll)); err != nil {
			return err
		}
	}
}

// countFailedMounts counts FailedMount events of ns from at to now
// (during), waits OutageSettle, and counts those after now (after): a
// FailedMount that outlives the step is a finding. "?" says the events
// could not be listed, which is not clean either.
func (c *Churner) countFailedMounts(ctx context.Context, ns string, o *outage, at time.Time) error {
	done := c.Clock.Now()
	n, err := c.failedMounts(ctx, ns, at, done)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	o.fmDuring = count(n, err)
	if err := c.waitUntil(ctx, done.Add(c.Opts.OutageSettle)); err != nil {
		return err
	}
	n, err = c.failedMounts(ctx, ns, done.Add(time.Nanosecond), time.Time{})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	o.fmAfter = count(n, err)
	switch {
	case err != nil || o.fmDuring == "?":
		o.bad = append(o.bad, "events")
	case n > 0:
		o.bad = append(o.bad, "failedmount")
	}
	return nil
}

func count(n int, err error) string {
	if err != nil {
		return "?"
	}
	return fmt.Sprint(n)
}

// failedMounts counts the FailedMount events of ns last seen in [from,
// to] (to zero: no upper bound).
func (c *Churner) failedMounts(ctx context.Context, ns string, from, to time.Time) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	defer cancel()
	l, err := c.Client.CoreV1().Events(ns).List(rctx, metav1.ListOptions{FieldSelector: "reason=FailedMount"})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range l.Items {
		if e.Reason != "FailedMount" {
			continue
		}
		t := kube.EventTime(&e)
		if !t.Before(from) && (to.IsZero() || !t.After(to)) {
			n++
		}
	}
	return n, nil
}

// outageLine prints the step's report: ROLLED when it is clean, FAILED (a
// finding) otherwise, and a NOTE when the delete missed the down window.
func (c *Churner) outageLine(st Step, o *outage, at time.Time) {
	if o.window != WindowDown {
		c.line("NOTE %s window=%s: %s -- the deletion during the outage was not exercised", st.Target, o.window, o.windowWhy)
	}
	head := fmt.Sprintf("%s at=%s took=%s victim=%s/%s@%s window=%s rollout=%s terminated=%s replacement=%s ready=%s failedmount_during=%s failedmount_after=%s",
		st.Target, stamp(at), secs(c.Clock.Now().Sub(at)), st.Victim.Namespace, o.victim, o.node, o.window,
		o.rollout, o.terminated, o.replacement, o.ready, o.fmDuring, o.fmAfter)
	if len(o.bad) == 0 {
		c.rolled++
		c.line("ROLLED %s", head)
		return
	}
	c.findings++
	c.line("FAILED %s bad=%s: the outage left %s (a finding: the schedule goes on)", head, strings.Join(o.bad, ","), strings.Join(o.bad, ", "))
}
