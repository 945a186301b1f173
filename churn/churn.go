// Package churn is sortie-churn: it runs a soak's churn schedule (rollout
// restarts, a deployment shrink, a client pod under a brand-new
// ServiceAccount, a node daemon's outage with a pod deleted in it, memory
// samples) at fixed offsets from the load start T0, and aborts at the first
// step that cannot do its part, so a finished run proves every step
// happened. A step that did its part and found a failure (a first-use
// request that was not a 2xx, a FailedMount after an outage) is a finding:
// a FAILED line, and the schedule goes on. The schedule format
// and the output lines are documented in the binary's --help (usageText).
//
// A Churner runs with any kubernetes.Interface and clock.Clock, so tests
// drive it with client-go's fake clientset and a fake clock. It runs in one
// goroutine: its API calls come in a fixed order for a given schedule and
// clock, which is what the golden transcripts rely on.
package churn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
)

// fieldManager names sortie-churn in the objects' managed fields.
const fieldManager = "sortie-churn"

// Churner runs one schedule. Fill the exported fields and call Run once.
type Churner struct {
	Client   kubernetes.Interface
	Clock    clock.Clock
	Opts     Options
	Schedule *Schedule
	Out      io.Writer
	Log      *slog.Logger

	// restores are the shrinks to undo, earliest first.
	restores []*restore
	// newSAs counts the new-serviceaccount steps started, to take nodes in
	// turn.
	newSAs int
	// Counters for the CHURN COMPLETE line. findings counts the steps
	// that ran and found a failure (a FAILED line that did not abort).
	stepsDone, rolled, shrunk, newSADone, findings int
	// during names the steps under way, for the CHURN STOPPED line.
	during []string

	// Summaries reads the kubelets' summaries for memory samples; nil: the
	// API server's node proxy through Client.
	Summaries SummaryReader
	// MemoryOut receives the memory TSV (MemoryHeader, then one row per
	// container sampled); nil: the samples are only summed up on stdout.
	MemoryOut io.Writer
	// samples are the memory samples due after a roll, earliest first.
	samples      []*pendingSample
	memory       []MemorySample
	memoryHeader bool
}

// pendingSample is a memory sample due at a fixed age after a roll.
type pendingSample struct {
	ref Ref
	due time.Time
	why string
}

// restore is a shrunk deployment waiting to be scaled back.
type restore struct {
	ref      Ref
	replicas int32
	due      time.Time
}

// stepFailed is a step that failed; it aborts the run. Its FAILED line is
// already printed.
type stepFailed struct{ why string }

func (e *stepFailed) Error() string { return e.why }

// Outcome is how a run ended.
type Outcome int

// The outcomes of a run.
const (
	Complete Outcome = iota // every step ran
	Aborted                 // a step failed
	Stopped                 // a signal (or the caller) stopped it
)

// Run runs the schedule from its first step due after now, and returns how
// it ended. Whatever the ending, no shrunk deployment is left shrunk unless
// a WARN line says so.
func (c *Churner) Run(ctx context.Context) Outcome {
	s := c.Schedule
	rolls, shrinks, newSAs := s.Counts()
	c.line("CHURN START schedule=%s steps=%d rolls=%d shrinks=%d new_serviceaccounts=%d t0=%s at=%s",
		s.Name, len(s.Steps), rolls, shrinks, newSAs, stamp(c.Opts.T0), stamp(c.Clock.Now()))
	var err error
	for _, group := range groupByMinute(s.Steps) {
		at := group[0].At(c.Opts.T0)
		c.Log.Info("waiting for the next steps", "due", stamp(at), "offset", offset(at.Sub(c.Opts.T0)), "steps", len(group))
		if err = c.waitUntil(ctx, at); err != nil {
			break
		}
		if err = c.runGroup(ctx, group); err != nil {
			break
		}
	}
	for err == nil && (len(c.restores) > 0 || len(c.samples) > 0) {
		err = c.waitUntil(ctx, c.nextDue(c.Clock.Now().Add(time.Hour)))
	}
	c.memorySummary()
	var failed *stepFailed
	switch {
	case err == nil:
		c.line("CHURN COMPLETE steps=%d rolled=%d shrunk=%d new_serviceaccounts=%d findings=%d t0=%s at=%s",
			c.stepsDone, c.rolled, c.shrunk, c.newSADone, c.findings, stamp(c.Opts.T0), stamp(c.Clock.Now()))
		return Complete
	case errors.As(err, &failed):
		c.undo(ctx)
		c.line("CHURN ABORTED: %s -- stop, fix, relaunch with a fresh T0", failed.why)
		return Aborted
	default:
		c.undo(ctx)
		sig := "stopped"
		if s := cli.Signal(ctx); s != nil {
			sig = signalName(s)
		}
		during := ""
		if len(c.during) > 0 {
			during = ", during " + strings.Join(c.during, ", ")
		}
		c.line("CHURN STOPPED: %s at %s after %d of %d steps%s -- the schedule is incomplete; relaunch with a fresh T0",
			sig, offset(c.Clock.Now().Sub(c.Opts.T0)), c.stepsDone, len(s.Steps), during)
		return Stopped
	}
}

// Findings is how many steps ran to the end and found a failure: a
// new-serviceaccount tally with a request that was not a 2xx, a
// node-daemon outage whose report is not clean. Each printed a FAILED line
// and the schedule went on; a run with findings completed but did not pass.
func (c *Churner) Findings() int { return c.findings }

// groupByMinute splits steps (in time order) into the runs of one minute.
func groupByMinute(steps []Step) [][]Step {
	var out [][]Step
	for i, st := range steps {
		if i == 0 || st.Minute != steps[i-1].Minute {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], st)
	}
	return out
}

// waitUntil waits until t on the clock, restoring the shrinks that come due
// on the way. It returns ctx's error, or a *stepFailed when a restore failed.
func (c *Churner) waitUntil(ctx context.Context, t time.Time) error {
	for {
		now := c.Clock.Now()
		if len(c.restores) > 0 && !c.restores[0].due.After(now) {
			if err := c.restore(ctx, c.restores[0]); err != nil {
				return err
			}
			c.restores = c.restores[1:]
			continue
		}
		if len(c.samples) > 0 && !c.samples[0].due.After(now) {
			s := c.samples[0]
			c.samples = c.samples[1:]
			if err := c.sampleMemory(ctx, s.ref, s.why); err != nil {
				return err
			}
			continue
		}
		if !now.Before(t) {
			return ctx.Err()
		}
		if err := c.Clock.Sleep(ctx, c.nextDue(t).Sub(now)); err != nil {
			return err
		}
	}
}

// nextDue is the earliest of t, the next restore and the next sample.
func (c *Churner) nextDue(t time.Time) time.Time {
	if len(c.restores) > 0 && c.restores[0].due.Before(t) {
		t = c.restores[0].due
	}
	if len(c.samples) > 0 && c.samples[0].due.Before(t) {
		t = c.samples[0].due
	}
	return t
}

// sampleAfter queues a memory sample of ref at the configured age, when
// ref's rolls are sampled.
func (c *Churner) sampleAfter(ref Ref, finished time.Time) {
	if !slices.Contains(c.Opts.SampleAfter, ref.String()) {
		return
	}
	s := &pendingSample{ref: ref, due: finished.Add(c.Opts.SampleAge), why: fmt.Sprintf("%s after its roll", secs(c.Opts.SampleAge))}
	i := len(c.samples)
	for i > 0 && c.samples[i-1].due.After(s.due) {
		i--
	}
	c.samples = slices.Insert(c.samples, i, s)
}

// runGroup runs the steps of one minute: the rolls together, then the
// others in file order. It stops at the first failure.
func (c *Churner) runGroup(ctx context.Context, group []Step) error {
	var rolls []*tracked
	var firstErr error
	c.during = nil
	for _, st := range group {
		if st.Kind != StepRoll {
			continue
		}
		c.during = append(c.during, "roll "+st.Target.String())
		at := c.Clock.Now()
		gen, err := c.restart(ctx, st.Target, at)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			c.line("FAILED %s at=%s took=0s: %s", st.Target, stamp(at), oneLine(err))
			c.stepsDone++
			if firstErr == nil {
				firstErr = &stepFailed{fmt.Sprintf("roll %s (line %d) failed", st.Target, st.Line)}
			}
			continue
		}
		rolls = append(rolls, &tracked{step: st, ref: st.Target, gen: gen, started: at})
	}
	if err := c.await(ctx, rolls); err != nil {
		return err
	}
	c.during = nil
	for _, r := range rolls {
		c.stepsDone++
		if r.ok {
			c.rolled++
			c.line("ROLLED %s at=%s took=%s", r.ref, stamp(r.started), secs(r.finished.Sub(r.started)))
			c.sampleAfter(r.ref, r.finished)
			continue
		}
		c.line("FAILED %s at=%s took=%s: %s", r.ref, stamp(r.started), secs(r.finished.Sub(r.started)), r.why)
		if firstErr == nil {
			firstErr = &stepFailed{fmt.Sprintf("roll %s (line %d) failed: %s", r.ref, r.step.Line, r.why)}
		}
	}
	if firstErr != nil {
		return firstErr
	}
	for _, st := range group {
		var err error
		switch st.Kind {
		case StepShrink:
			err = c.shrink(ctx, st)
		case StepNewSA:
			err = c.newServiceAccount(ctx, st)
		case StepSample:
			err = c.sampleMemory(ctx, st.Target, fmt.Sprintf("step line %d", st.Line))
		case StepOutage:
			err = c.daemonOutage(ctx, st)
		default:
			continue
		}
		if err != nil {
			return err
		}
		c.stepsDone++
	}
	c.during = nil
	return nil
}

// tracked is a rollout being awaited.
type tracked struct {
	step     Step
	ref      Ref
	gen      int64
	started  time.Time
	finished time.Time
	ok       bool
	why      string
}

// await polls the rollouts until each has completed, failed, or run out of
// time. Only ctx's error (or a failed restore) is returned; each rollout's
// result is in its fields.
func (c *Churner) await(ctx context.Context, rolls []*tracked) error {
	pending := rolls
	for len(pending) > 0 {
		var still []*tracked
		for _, r := range pending {
			obj, err := c.getWorkload(ctx, r.ref)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			now := c.Clock.Now()
			var done bool
			var detail string
			if err == nil {
				done, detail, err = rolloutDone(obj, r.gen)
			} else if !apierrors.IsNotFound(err) {
				// A read that failed says nothing of the rollout: keep
				// polling until the deadline, and name the error then.
				detail, err = "last read failed: "+oneLine(err), nil
			}
			switch {
			case err != nil:
				r.finished, r.why = now, oneLine(err)
			case done:
				r.finished, r.ok = now, true
			case now.Sub(r.started) >= c.Opts.RolloutTimeout:
				r.finished, r.why = now, fmt.Sprintf("rollout not complete within %s: %s", secs(c.Opts.RolloutTimeout), detail)
			default:
				still = append(still, r)
			}
		}
		pending = still
		if len(pending) > 0 {
			if err := c.waitUntil(ctx, c.Clock.Now().Add(c.Opts.Poll)); err != nil {
				return err
			}
		}
	}
	return nil
}

// shrink scales a deployment to zero and schedules its restore.
func (c *Churner) shrink(ctx context.Context, st Step) error {
	ref := st.Target
	c.during = []string{"shrink " + ref.String()}
	deps := c.Client.AppsV1().Deployments(ref.Namespace)
	at := c.Clock.Now()
	fail := func(why string) error {
		c.line("FAILED %s at=%s took=%s: %s", ref, stamp(at), secs(c.Clock.Now().Sub(at)), why)
		return &stepFailed{fmt.Sprintf("shrink %s (line %d) failed: %s", ref, st.Line, why)}
	}
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	sc, err := deps.GetScale(rctx, ref.Name, metav1.GetOptions{})
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fail("read the replica count: " + oneLine(err))
	}
	n := sc.Spec.Replicas
	if n == 0 {
		return fail("already at 0 replicas: no count to restore")
	}
	sc.Spec.Replicas = 0
	rctx, cancel = context.WithTimeout(ctx, c.Opts.RequestTimeout)
	_, err = deps.UpdateScale(rctx, ref.Name, sc, metav1.UpdateOptions{FieldManager: fieldManager})
	cancel()
	// Whether or not the scale went through, a restore to the count read is
	// right (and harmless if it did not): register it before anything else.
	r := &restore{ref: ref, replicas: n, due: c.Clock.Now().Add(time.Duration(st.Seconds) * time.Second)}
	c.addRestore(r)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fail("scale to 0: " + oneLine(err))
	}
	c.shrunk++
	c.line("SHRUNK %s replicas=%d->0 at=%s restore_at=%s", ref, n, stamp(at), stamp(r.due))
	return nil
}

func (c *Churner) addRestore(r *restore) {
	i := len(c.restores)
	for i > 0 && c.restores[i-1].due.After(r.due) {
		i--
	}
	c.restores = append(c.restores, nil)
	copy(c.restores[i+1:], c.restores[i:])
	c.restores[i] = r
}

// restore scales a shrunk deployment back. A conflict (someone else wrote
// the deployment in between) is retried with a fresh read.
func (c *Churner) restore(ctx context.Context, r *restore) error {
	at := c.Clock.Now()
	deps := c.Client.AppsV1().Deployments(r.ref.Namespace)
	var err error
	for range 3 {
		rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
		var sc *autoscalingv1.Scale
		sc, err = deps.GetScale(rctx, r.ref.Name, metav1.GetOptions{})
		if err == nil {
			sc.Spec.Replicas = r.replicas
			_, err = deps.UpdateScale(rctx, r.ref.Name, sc, metav1.UpdateOptions{FieldManager: fieldManager})
		}
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		c.line("FAILED %s at=%s took=0s: restore to %d replicas: %s", r.ref, stamp(at), r.replicas, oneLine(err))
		return &stepFailed{fmt.Sprintf("restore of %s to %d replicas failed", r.ref, r.replicas)}
	}
	c.line("RESTORED %s replicas=0->%d at=%s", r.ref, r.replicas, stamp(at))
	return nil
}

// undo restores every pending shrink now, on a context of its own: the run
// is ending (aborted or stopped) and a deployment must not stay at zero.
func (c *Churner) undo(ctx context.Context) {
	for _, r := range c.restores {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Opts.CleanupTimeout)
		if err := c.restore(cctx, r); err != nil {
			c.line("WARN %s is left at 0 replicas: restore it to %d by hand (kubectl -n %s scale deployment/%s --replicas=%d)",
				r.ref, r.replicas, r.ref.Namespace, r.ref.Name, r.replicas)
		}
		cancel()
	}
	c.restores = nil
}

// line prints one output line.
func (c *Churner) line(format string, args ...any) {
	fmt.Fprintf(c.Out, format+"\n", args...)
}

// stamp formats t as RFC 3339 in UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// secs renders d as whole seconds, "42s".
func secs(d time.Duration) string { return fmt.Sprintf("%ds", int64(d.Round(time.Second)/time.Second)) }

// offset renders d as T0+<m>m, T0+<m>m<s>s or T0+<s>s (T0-... before T0).
func offset(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	d = d.Round(time.Second)
	m, s := int64(d/time.Minute), int64(d%time.Minute/time.Second)
	switch {
	case s == 0:
		return fmt.Sprintf("T0%s%dm", sign, m)
	case m == 0:
		return fmt.Sprintf("T0%s%ds", sign, s)
	}
	return fmt.Sprintf("T0%s%dm%ds", sign, m, s)
}

// oneLine collapses an error to one bounded line.
func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// signalName names a signal as the output lines do.
func signalName(s os.Signal) string {
	if s == os.Interrupt {
		return "SIGINT"
	}
	return "SIGTERM"
}
