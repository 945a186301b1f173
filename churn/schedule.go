package churn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Step kinds.
const (
	StepRoll   = "roll"
	StepShrink = "shrink"
	StepNewSA  = "new-serviceaccount"
	StepSample = "sample"
	StepOutage = "daemon-outage"
)

// Workload kinds a roll accepts, as written in a Ref.
const (
	KindDeployment  = "deployment"
	KindDaemonSet   = "daemonset"
	KindStatefulSet = "statefulset"
)

// KindNewSA is the kind in the Ref of a new-serviceaccount step's lines:
// <ns>/newsa/<name>.
const KindNewSA = "newsa"

// AutoNode asks a new-serviceaccount step to pick the node itself.
const AutoNode = "auto"

// maxMinute bounds a step's offset (a week): a bigger one is a typo.
const maxMinute = 7 * 24 * 60

// maxShrinkSeconds bounds a shrink (a day).
const maxShrinkSeconds = 24 * 60 * 60

// Ref names one workload.
type Ref struct {
	Namespace string
	Kind      string // deployment, daemonset or statefulset
	Name      string
}

// String renders r as ns/kind/name, the form of every output line.
func (r Ref) String() string { return r.Namespace + "/" + r.Kind + "/" + r.Name }

// Step is one line of a schedule.
type Step struct {
	// Minute is the step's offset from T0.
	Minute int
	// Kind is StepRoll, StepShrink, StepNewSA or StepSample.
	Kind string
	// Target is the workload of a roll, a shrink (always a deployment) or a
	// sample, or the namespace (Target.Namespace) of a new-serviceaccount.
	Target Ref
	// Seconds is how long a shrink holds the deployment at zero.
	Seconds int
	// Node is where a new-serviceaccount step's pod runs: a node name, or
	// AutoNode.
	Node string
	// Victim is what a daemon-outage step deletes on the node where its
	// DaemonSet (Target) is down.
	Victim Victim
	// Line is the step's line in the schedule file, for messages.
	Line int
}

// Victim selects the pods a daemon-outage step may delete: a label
// selector in a namespace.
type Victim struct {
	Namespace string
	Selector  string
}

// String renders v as <namespace>/<selector>, as the schedule writes it.
func (v Victim) String() string { return v.Namespace + "/" + v.Selector }

// At is when the step is due.
func (s Step) At(t0 time.Time) time.Time { return t0.Add(time.Duration(s.Minute) * time.Minute) }

// Schedule is a parsed schedule file, steps in file order (which is time
// order: minutes never decrease).
type Schedule struct {
	Name  string
	Steps []Step
}

// Counts returns how many steps of each kind s has; a daemon-outage step
// rolls its DaemonSet and counts as a roll.
func (s *Schedule) Counts() (rolls, shrinks, newSAs int) {
	for _, st := range s.Steps {
		switch st.Kind {
		case StepRoll, StepOutage:
			rolls++
		case StepShrink:
			shrinks++
		case StepNewSA:
			newSAs++
		}
	}
	return rolls, shrinks, newSAs
}

// End is the offset of the schedule's last effect: its last step, or the
// end of its last shrink.
func (s *Schedule) End() time.Duration {
	var end time.Duration
	for _, st := range s.Steps {
		e := time.Duration(st.Minute) * time.Minute
		if st.Kind == StepShrink {
			e += time.Duration(st.Seconds) * time.Second
		}
		end = max(end, e)
	}
	return end
}

// ParseSchedule reads a schedule (format in the package documentation).
// name prefixes every error as name:line:col. Steps without -n take
// defaultNamespace. Every problem is returned, not just the first.
func ParseSchedule(name string, r io.Reader, defaultNamespace string) (*Schedule, error) {
	s := &Schedule{Name: name}
	var errs []error
	fail := func(line, col int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d:%d: %s", name, line, col, fmt.Sprintf(format, args...)))
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	lineNo := 0
	last := -1
	for sc.Scan() {
		lineNo++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		toks := tokens(text)
		if len(toks) == 0 {
			continue
		}
		st, ok := parseStep(toks, lineNo, defaultNamespace, fail)
		if !ok {
			continue
		}
		if st.Minute < last {
			fail(lineNo, toks[0].col, "minute %d comes after minute %d: steps must be in time order", st.Minute, last)
		}
		last = max(last, st.Minute)
		s.Steps = append(s.Steps, st)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	if len(s.Steps) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s: no steps", name))
	}
	errs = append(errs, conflicts(name, s.Steps)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// token is one word of a line and its 1-based column.
type token struct {
	text string
	col  int
}

func tokens(line string) []token {
	var out []token
	start := -1
	for i, r := range line + " " {
		space := r == ' ' || r == '\t' || r == '\r'
		switch {
		case !space && start < 0:
			start = i
		case space && start >= 0:
			out = append(out, token{line[start:i], start + 1})
			start = -1
		}
	}
	return out
}

// parseStep parses one non-empty line: <minute> <verb> <args...> [-n ns].
func parseStep(toks []token, line int, defaultNS string, fail func(line, col int, format string, args ...any)) (Step, bool) {
	st := Step{Line: line, Target: Ref{Namespace: defaultNS}}
	m, err := strconv.Atoi(toks[0].text)
	if err != nil || m < 0 || m > maxMinute {
		fail(line, toks[0].col, "%q is not a minute after T0 (a whole number 0..%d)", toks[0].text, maxMinute)
		return st, false
	}
	st.Minute = m
	if len(toks) < 2 {
		fail(line, toks[0].col+len(toks[0].text), "a step is missing after the minute")
		return st, false
	}
	verb := toks[1]
	// Pull out -n <namespace>, wherever it is among the arguments.
	var args []token
	nsSet := false
	ok := true
	for i := 2; i < len(toks); i++ {
		if toks[i].text != "-n" && toks[i].text != "--namespace" {
			args = append(args, toks[i])
			continue
		}
		if i+1 >= len(toks) {
			fail(line, toks[i].col, "%s needs a namespace", toks[i].text)
			return st, false
		}
		if nsSet {
			fail(line, toks[i].col, "the namespace is given twice")
			ok = false
		}
		nsSet = true
		i++
		st.Target.Namespace = toks[i].text
		for _, msg := range validation.IsDNS1123Label(st.Target.Namespace) {
			fail(line, toks[i].col, "namespace %q: %s", st.Target.Namespace, msg)
			ok = false
		}
	}
	want := func(n int, usage string) bool {
		if len(args) == n {
			return true
		}
		col := verb.col
		if len(args) > n {
			col = args[n].col
		}
		fail(line, col, "%s takes %s", verb.text, usage)
		return false
	}
	switch verb.text {
	case StepRoll, StepSample:
		st.Kind = verb.text
		if !want(1, "<kind>/<name> [-n namespace]") {
			return st, false
		}
		kind, name, found := strings.Cut(args[0].text, "/")
		if !found {
			fail(line, args[0].col, "%q: want <kind>/<name>, kind one of deployment, daemonset, statefulset", args[0].text)
			return st, false
		}
		st.Target.Kind = canonicalKind(kind)
		if st.Target.Kind == "" {
			fail(line, args[0].col, "unknown kind %q: want deployment, daemonset or statefulset", kind)
			ok = false
		}
		st.Target.Name = name
		ok = checkName(name, args[0].col+len(kind)+1, line, fail) && ok
	case StepShrink:
		st.Kind = StepShrink
		if !want(2, "<deployment> <seconds> [-n namespace]") {
			return st, false
		}
		name := args[0].text
		if kind, n, found := strings.Cut(name, "/"); found {
			if canonicalKind(kind) != KindDeployment {
				fail(line, args[0].col, "only a deployment can be shrunk, not %q", kind)
				ok = false
			}
			name = n
		}
		st.Target.Kind = KindDeployment
		st.Target.Name = name
		ok = checkName(name, args[0].col, line, fail) && ok
		secs, err := strconv.Atoi(args[1].text)
		if err != nil || secs < 1 || secs > maxShrinkSeconds {
			fail(line, args[1].col, "%q is not a number of seconds (1..%d)", args[1].text, maxShrinkSeconds)
			ok = false
		}
		st.Seconds = secs
	case StepNewSA:
		st.Kind = StepNewSA
		if !want(1, "<node> [-n namespace] (a node name, or auto)") {
			return st, false
		}
		st.Node = args[0].text
		if st.Node != AutoNode {
			for _, msg := range validation.IsDNS1123Subdomain(st.Node) {
				fail(line, args[0].col, "node %q: %s", st.Node, msg)
				ok = false
			}
		}
	case StepOutage:
		st.Kind = StepOutage
		ok = parseOutage(&st, verb, args, line, fail) && ok
	default:
		fail(line, verb.col, "unknown step %q: want roll, shrink, new-serviceaccount, sample or daemon-outage", verb.text)
		return st, false
	}
	return st, ok
}

// parseOutage reads a daemon-outage step's arguments:
// --daemonset <name> --victim <namespace>/<label selector>, in either order.
func parseOutage(st *Step, verb token, args []token, line int, fail func(line, col int, format string, args ...any)) bool {
	const usage = "daemon-outage takes --daemonset <name> --victim <namespace>/<label selector> [-n namespace]"
	if len(args) != 4 {
		fail(line, verb.col, usage)
		return false
	}
	ok := true
	seen := map[string]bool{}
	for i := 0; i < 4; i += 2 {
		flag, val := args[i], args[i+1]
		if seen[flag.text] {
			fail(line, flag.col, "%s is given twice", flag.text)
			return false
		}
		seen[flag.text] = true
		switch flag.text {
		case "--daemonset":
			name := strings.TrimPrefix(val.text, "daemonset/")
			st.Target.Kind, st.Target.Name = KindDaemonSet, name
			ok = checkName(name, val.col, line, fail) && ok
		case "--victim":
			ns, sel, found := strings.Cut(val.text, "/")
			if !found || sel == "" {
				fail(line, val.col, "--victim %q: want <namespace>/<label selector>, e.g. aether-test/app=uds-echo", val.text)
				ok = false
				continue
			}
			for _, msg := range validation.IsDNS1123Label(ns) {
				fail(line, val.col, "--victim namespace %q: %s", ns, msg)
				ok = false
			}
			if _, err := labels.Parse(sel); err != nil {
				fail(line, val.col+len(ns)+1, "--victim selector %q: %s", sel, oneLine(err))
				ok = false
			}
			st.Victim = Victim{Namespace: ns, Selector: sel}
		default:
			fail(line, flag.col, usage)
			return false
		}
	}
	return ok
}

// canonicalKind maps the spellings kubectl accepts to a Ref kind, or "".
func canonicalKind(k string) string {
	switch strings.ToLower(k) {
	case "deployment", "deployments", "deploy":
		return KindDeployment
	case "daemonset", "daemonsets", "ds":
		return KindDaemonSet
	case "statefulset", "statefulsets", "sts":
		return KindStatefulSet
	}
	return ""
}

func checkName(name string, col, line int, fail func(line, col int, format string, args ...any)) bool {
	msgs := validation.IsDNS1123Subdomain(name)
	for _, msg := range msgs {
		fail(line, col, "name %q: %s", name, msg)
	}
	return len(msgs) == 0
}

// conflicts finds steps that cannot run as written: the same workload
// rolled twice in one minute, and a deployment rolled or shrunk again while
// a shrink holds it at zero.
func conflicts(name string, steps []Step) []error {
	var errs []error
	type seen struct{ line int }
	sameMinute := map[string]seen{}
	for _, st := range steps {
		if st.Kind != StepRoll {
			continue
		}
		k := fmt.Sprintf("%d %s", st.Minute, st.Target)
		if prev, ok := sameMinute[k]; ok {
			errs = append(errs, fmt.Errorf("%s:%d:1: %s is rolled twice at minute %d (first on line %d)", name, st.Line, st.Target, st.Minute, prev.line))
			continue
		}
		sameMinute[k] = seen{st.Line}
	}
	for _, sh := range steps {
		if sh.Kind != StepShrink {
			continue
		}
		from := time.Duration(sh.Minute) * time.Minute
		to := from + time.Duration(sh.Seconds)*time.Second
		for _, st := range steps {
			if st.Line == sh.Line || st.Target != sh.Target || st.Kind == StepNewSA || st.Kind == StepSample || st.Kind == StepOutage {
				continue
			}
			at := time.Duration(st.Minute) * time.Minute
			if at >= from && at <= to {
				errs = append(errs, fmt.Errorf("%s:%d:1: %s is held at 0 replicas by the shrink on line %d from minute %d for %ds", name, st.Line, st.Target, sh.Line, sh.Minute, sh.Seconds))
			}
		}
	}
	return errs
}

func minutes(n int) time.Duration { return time.Duration(n) * time.Minute }

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }
