// Package watchdog is sortie-watchdog: it samples the restart count of every
// container in a soak's namespaces from a baseline taken at start, prints one
// greppable line per sample, and grades the window PASS, FAIL or UNPROVEN.
//
// A Watcher runs with any kubernetes.Interface and clock.Clock, so tests
// drive it with client-go's fake clientset and a fake clock; Run is the
// binary's entry point.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/clock"
)

// Verdicts of a watch.
const (
	Pass     = "PASS"
	Fail     = "FAIL"
	Unproven = "UNPROVEN"
)

// How a watch ended.
const (
	EndedComplete = "complete"
	EndedTERM     = "TERM"
	EndedINT      = "INT"
)

// listPageSize bounds one page of a pod list; a big namespace is read in
// several pages rather than one huge response.
const listPageSize = 500

// Watcher watches container restarts. Fill the exported fields and call Run
// once.
type Watcher struct {
	Client kubernetes.Interface
	Clock  clock.Clock
	Opts   Options
	// Out receives the lines (stdout, and the log file through a
	// MultiWriter set up by Run).
	Out io.Writer

	baseline    map[ckey]int32
	haveBase    bool
	baseCount   int
	restarted   map[ckey]*restart
	samples     int
	errSamples  int
	from        time.Time
	writeFailed error
}

// ckey identifies a container for its whole life: the pod's UID (a new pod
// with the same name is a different pod) and the container's name.
type ckey struct {
	uid       types.UID
	container string
}

// restart is what the latest sample said of a restarted container.
type restart struct {
	ns, pod, container string
	restarts, new      int32
	lastReason         string
	exitCode           string
	finishedAt         string
	state              string
	live               bool
}

// Result is the grade of a watch, as printed in its SUMMARY line.
type Result struct {
	Verdict      string
	Reasons      []string // why UNPROVEN
	NewRestarts  int
	Containers   int
	Samples      int
	ErrorSamples int
	Baseline     int
	Ended        string
}

// errInterrupted marks a step cut short by the context.
var errInterrupted = errors.New("interrupted")

// Run takes the baseline, samples until the duration has passed or ctx is
// cancelled, prints the summary, and returns the grade. ended says how ctx
// ended the run if it did (EndedTERM or EndedINT); it is read only then.
func (w *Watcher) Run(ctx context.Context, ended func() string) Result {
	w.restarted = map[ckey]*restart{}
	w.from = w.Clock.Now()
	o := w.Opts
	w.line("START restart-watch namespaces=%s interval=%ds duration=%ds at=%s",
		strings.Join(o.Namespaces, ","), int64(o.Interval/time.Second), int64(o.Duration/time.Second), stamp(w.from))
	end := w.from.Add(o.Duration)

	res := Result{Ended: EndedComplete}
	if err := w.takeBaseline(ctx); err != nil {
		if ctx.Err() != nil {
			res.Ended = ended()
		}
		return w.finish(res)
	}
	next := w.from
	for {
		next = next.Add(o.Interval)
		target := next
		if target.After(end) {
			target = end
		}
		if err := w.Clock.Sleep(ctx, target.Sub(w.Clock.Now())); err != nil {
			res.Ended = ended()
			break
		}
		if err := w.sample(ctx); err != nil {
			res.Ended = ended()
			break
		}
		if !w.Clock.Now().Before(end) {
			break
		}
	}
	return w.finish(res)
}

// takeBaseline records every container's restart count. All namespaces must
// answer in the same try; a try that fails is repeated after BaselineRetry,
// up to BaselineAttempts tries.
func (w *Watcher) takeBaseline(ctx context.Context) error {
	o := w.Opts
	for attempt := 1; ; attempt++ {
		pods, err := w.listAll(ctx, func(ns string, err error) {
			w.line("ERROR baseline attempt=%d/%d ns=%s: %s", attempt, o.BaselineAttempts, ns, oneLine(err))
		})
		if err == nil {
			w.recordBaseline(pods)
			return nil
		}
		if ctx.Err() != nil || attempt >= o.BaselineAttempts {
			return err
		}
		if err := w.Clock.Sleep(ctx, o.BaselineRetry); err != nil {
			return err
		}
	}
}

// listAll lists every namespace's pods, in order. A namespace that fails is
// reported to onErr and the others are still listed; the error is then the
// first failure, or errInterrupted as soon as ctx is done.
func (w *Watcher) listAll(ctx context.Context, onErr func(ns string, err error)) (map[string][]corev1.Pod, error) {
	out := map[string][]corev1.Pod{}
	var first error
	for _, ns := range w.Opts.Namespaces {
		pods, err := w.list(ctx, ns)
		// A signal during the call decides, whatever the call returned: an
		// answer that raced the signal is not used.
		if ctx.Err() != nil {
			return out, errInterrupted
		}
		if err != nil {
			onErr(ns, err)
			if first == nil {
				first = err
			}
			continue
		}
		out[ns] = pods
	}
	return out, first
}

// list reads all pods of ns, page by page, each call bounded by the request
// timeout and ended by ctx.
func (w *Watcher) list(ctx context.Context, ns string) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	opts := metav1.ListOptions{Limit: listPageSize}
	for {
		rctx, cancel := context.WithTimeout(ctx, w.Opts.RequestTimeout)
		l, err := w.Client.CoreV1().Pods(ns).List(rctx, opts)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		pods = append(pods, l.Items...)
		if l.Continue == "" {
			return pods, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		opts.Continue = l.Continue
	}
}

func (w *Watcher) recordBaseline(byNS map[string][]corev1.Pod) {
	w.baseline = map[ckey]int32{}
	w.haveBase = true
	var pre, empty []string
	containers, pods := 0, 0
	for _, ns := range w.Opts.Namespaces {
		if len(byNS[ns]) == 0 {
			empty = append(empty, ns)
		}
		for _, p := range byNS[ns] {
			pods++
			forEachStatus(&p, func(cs *corev1.ContainerStatus) {
				containers++
				w.baseline[ckey{p.UID, cs.Name}] = cs.RestartCount
				if cs.RestartCount > 0 {
					r := describe(&p, cs)
					pre = append(pre, fmt.Sprintf("BASELINE %s/%s/%s restarts=%d lastReason=%s exitCode=%s finishedAt=%s state=%s",
						r.ns, r.pod, r.container, r.restarts, r.lastReason, r.exitCode, r.finishedAt, r.state))
				}
			})
		}
	}
	sort.Strings(pre)
	w.baseCount = len(pre)
	w.line("BASELINE count=%d containers=%d pods=%d at=%s", len(pre), containers, pods, stamp(w.Clock.Now()))
	for _, l := range pre {
		w.line("%s", l)
	}
	// A typo in --namespaces lists as an empty namespace, and a watch of
	// nothing passes; say so where it is read.
	for _, ns := range empty {
		w.line("WARN namespace=%s has no pods at baseline", ns)
	}
}

// sample lists every namespace once and updates the restarted containers.
// A namespace that fails makes the sample an error sample; one that answers
// is used even then. An interrupted sample is not counted, but what the
// namespaces that answered before the signal said is kept: a restart seen is
// a fact.
func (w *Watcher) sample(ctx context.Context) error {
	k := w.samples + 1
	failed := false
	byNS, err := w.listAll(ctx, func(ns string, err error) {
		failed = true
		w.line("ERROR sample=%d ns=%s: %s", k, ns, oneLine(err))
	})
	for _, ns := range w.Opts.Namespaces {
		pods, ok := byNS[ns]
		if !ok {
			continue
		}
		// This namespace answered: whatever it no longer lists is gone.
		for _, r := range w.restarted {
			if r.ns == ns {
				r.live = false
			}
		}
		for _, p := range pods {
			forEachStatus(&p, func(cs *corev1.ContainerStatus) {
				key := ckey{p.UID, cs.Name}
				n := cs.RestartCount - w.baseline[key]
				if n <= 0 {
					return
				}
				r := describe(&p, cs)
				r.new = n
				r.live = true
				w.restarted[key] = r
			})
		}
	}
	if errors.Is(err, errInterrupted) {
		return err
	}
	w.samples = k
	if failed {
		w.errSamples++
	}
	if len(w.restarted) == 0 {
		if !failed {
			w.line("ok count=0 sample=%d baseline=%d at=%s", k, w.baseCount, stamp(w.Clock.Now()))
		}
		return nil
	}
	w.line("RESTARTS count=%d sample=%d baseline=%d at=%s", len(w.restarted), k, w.baseCount, stamp(w.Clock.Now()))
	for _, r := range w.sortedRestarts() {
		w.line("RESTART %s", r)
	}
	return nil
}

// finish grades the run and prints the summary, the last line.
func (w *Watcher) finish(res Result) Result {
	res.Samples = w.samples
	res.ErrorSamples = w.errSamples
	res.Baseline = w.baseCount
	res.Containers = len(w.restarted)
	for _, r := range w.restarted {
		res.NewRestarts += int(r.new)
	}
	switch {
	case !w.haveBase:
		res.Verdict = Unproven
		res.Reasons = []string{"no-baseline"}
	case res.Containers > 0:
		res.Verdict = Fail
	default:
		if res.Ended != EndedComplete {
			res.Reasons = append(res.Reasons, "cut-short")
		}
		if res.ErrorSamples > 0 {
			res.Reasons = append(res.Reasons, "error-samples")
		}
		if res.Samples == 0 {
			res.Reasons = append(res.Reasons, "no-samples")
		}
		res.Verdict = Pass
		if len(res.Reasons) > 0 {
			res.Verdict = Unproven
		}
	}
	for _, r := range w.sortedRestarts() {
		w.line("SUMMARY RESTART %s", r)
	}
	reason := ""
	if len(res.Reasons) > 0 {
		reason = " reason=" + strings.Join(res.Reasons, ",")
	}
	w.line("SUMMARY restart-watch verdict=%s%s new_restarts=%d containers=%d samples=%d error_samples=%d baseline=%d ended=%s from=%s to=%s namespaces=%s",
		res.Verdict, reason, res.NewRestarts, res.Containers, res.Samples, res.ErrorSamples, res.Baseline, res.Ended,
		stamp(w.from), stamp(w.Clock.Now()), strings.Join(w.Opts.Namespaces, ","))
	return res
}

// sortedRestarts renders the restarted containers in ns/pod/container order.
func (w *Watcher) sortedRestarts() []string {
	var out []string
	for _, r := range w.restarted {
		seen := "gone"
		if r.live {
			seen = "live"
		}
		out = append(out, fmt.Sprintf("%s/%s/%s restarts=%d new=%d lastReason=%s exitCode=%s finishedAt=%s state=%s seen=%s",
			r.ns, r.pod, r.container, r.restarts, r.new, r.lastReason, r.exitCode, r.finishedAt, r.state, seen))
	}
	sort.Strings(out)
	return out
}

// line writes one output line. A failed write is remembered and reported
// once by Run; the watch goes on, since stdout may still carry it.
func (w *Watcher) line(format string, args ...any) {
	if _, err := fmt.Fprintf(w.Out, format+"\n", args...); err != nil && w.writeFailed == nil {
		w.writeFailed = err
	}
}

// forEachStatus calls fn for every init and regular container status of p.
func forEachStatus(p *corev1.Pod, fn func(*corev1.ContainerStatus)) {
	for i := range p.Status.InitContainerStatuses {
		fn(&p.Status.InitContainerStatuses[i])
	}
	for i := range p.Status.ContainerStatuses {
		fn(&p.Status.ContainerStatuses[i])
	}
}

// describe extracts what a RESTART line says of a container; "-" stands for
// an absent field so every field is a single token.
func describe(p *corev1.Pod, cs *corev1.ContainerStatus) *restart {
	r := &restart{
		ns: p.Namespace, pod: p.Name, container: cs.Name, restarts: cs.RestartCount,
		lastReason: "-", exitCode: "-", finishedAt: "-", state: "unknown",
	}
	if t := cs.LastTerminationState.Terminated; t != nil {
		r.lastReason = token(t.Reason)
		r.exitCode = strconv.Itoa(int(t.ExitCode))
		if !t.FinishedAt.IsZero() {
			r.finishedAt = stamp(t.FinishedAt.Time)
		}
	}
	switch s := cs.State; {
	case s.Waiting != nil:
		r.state = "waiting:" + token(s.Waiting.Reason)
	case s.Terminated != nil:
		r.state = "terminated:" + token(s.Terminated.Reason)
	case s.Running != nil:
		r.state = "running"
	}
	return r
}

// token makes s one non-empty field of a space-separated line.
func token(s string) string {
	s = strings.Join(strings.Fields(s), "_")
	if s == "" {
		return "-"
	}
	return s
}

// oneLine collapses an error to one bounded line.
func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// stamp formats t as RFC 3339 in UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
