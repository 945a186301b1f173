package gate

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// Setting failures against the rolls and faults: the gate reads the live
// record's failure samples (record/timeline.go) and the ROLLED, FAILED and
// FAULT lines (record/rolls.go), and says which roll or fault each failure
// fell in. A failure that fell in none is UNATTRIBUTED: that is the finding
// a soak is run for. The grade itself (PASS/FAIL/VERDICT, the exit code) is
// not touched: a failure fails its target wherever it fell.
//
// A bracket is a roll or a fault: from its begin (at=) to its end (end=)
// plus the settle window (--settle, DefaultSettle), the time the mesh
// takes to stop sending to a replica that went away (the propagation lag
// of the endpoints) and to drain what it was sending. A failure falls in a
// bracket when its outcome time or its due time does. A roll covers the
// failures of its own target only: the roll's name (the last part of its
// ref, so the churn driver's <ns>/<kind>/<name> matches on <name>) is the
// target's name, the execution label without its scenario and without a
// staircase's /stage-N. A fault covers the failures of its subject: a
// target's when the subject names one, a node's when it names a node, and
// every failure when it is "driver". A failure in two brackets counts in
// both.
//
// A target-fail fault is planted: soak local's stand-in for a failure no
// roll or fault explains. Its FAULT line counts the failures in its
// bracket, but they are still UNATTRIBUTED.
//
// A failure past the sample budget is in its bucket's samples_dropped and
// in no sample: it is placed at its bucket (from the bucket's start to its
// end), counted as dropped, and its time is the bucket's start.

// DefaultSettle is the settle window after a roll's or fault's end: the
// endpoints' propagation lag (a few seconds in a mesh) plus a drain.
const DefaultSettle = 10 * time.Second

// maxUnattributedLines caps the UNATTRIBUTED lines of one failure each,
// per target; the count line says how many there are in all.
const maxUnattributedLines = 20

// PlantedFault is the fault kind whose failures stay unattributed.
const PlantedFault = "target-fail"

// ReadLiveFailures reads a live record line by line, keeping only the
// failures of its last run (a head line starts a run).
func ReadLiveFailures(r io.Reader) (*LiveFailures, error) {
	return ReadLiveRecord(r, false)
}

// Attribution is what the gate says of the failures against the rolls and
// faults.
type Attribution struct {
	// SettleMs is the settle window after every bracket's end.
	SettleMs int64 `json:"settle_ms"`
	// HasLive is false when no live record was read: no failure has a
	// time, and the brackets say nothing of failures.
	HasLive bool `json:"has_live"`
	// Rolls and Faults are the brackets, in file order.
	Rolls  []Bracket `json:"rolls,omitempty"`
	Faults []Bracket `json:"faults,omitempty"`
	// Unattributed are the failures in no bracket, per target.
	Unattributed []Unattributed `json:"unattributed,omitempty"`
}

// Bracket is one roll or fault and the failures that fell in it.
type Bracket struct {
	// Kind is "roll" or the fault's kind.
	Kind string `json:"kind"`
	// Ref is the roll's ref or the fault's subject.
	Ref string `json:"ref"`
	// Target and Node say what it covers ("" for every one).
	Target string `json:"target,omitempty"`
	Node   string `json:"node,omitempty"`
	// At and End bound it, before the settle window.
	At  string `json:"at"`
	End string `json:"end"`
	// Failed marks a FAILED roll step, and Why is what it says.
	Failed bool   `json:"failed,omitempty"`
	Why    string `json:"why,omitempty"`
	// Planted marks a target-fail fault: its failures stay unattributed.
	Planted bool `json:"planted,omitempty"`
	// Failures counts the failures in it, sampled and dropped; Dropped
	// counts those only a bucket holds.
	Failures uint64 `json:"failures"`
	Dropped  uint64 `json:"dropped,omitempty"`
	// Nodes and Classes split Failures (Classes: the sampled ones).
	Nodes   []NodeCount  `json:"nodes,omitempty"`
	Classes []ClassCount `json:"classes,omitempty"`
	// First and Last are the error window: the first and last failure.
	First string `json:"first,omitempty"`
	Last  string `json:"last,omitempty"`
	// RecoveryMs runs from the bracket's begin to its last failure.
	RecoveryMs *int64 `json:"recovery_ms,omitempty"`
	// Replicas are the remotes its failures reached, sorted.
	Replicas []string `json:"replicas,omitempty"`

	begin, end time.Time
	nodes      map[string]uint64
	classes    map[string]uint64
	replicas   map[string]bool
	first      time.Time
	last       time.Time
}

// NodeCount is a count on one node.
type NodeCount struct {
	Node  string `json:"node"`
	Count uint64 `json:"count"`
}

// Unattributed is one target's failures in no bracket.
type Unattributed struct {
	Target   string        `json:"target"`
	Failures uint64        `json:"failures"`
	Dropped  uint64        `json:"dropped,omitempty"`
	Nodes    []NodeCount   `json:"nodes,omitempty"`
	Classes  []ClassCount  `json:"classes,omitempty"`
	Listed   []FailureLine `json:"listed,omitempty"`
	// More counts the failures not listed.
	More uint64 `json:"more,omitempty"`
}

// FailureLine is one unattributed failure: a sample, or a bucket's
// dropped ones (Dropped > 0, At the bucket's start).
type FailureLine struct {
	Node    string `json:"node"`
	At      string `json:"at"`
	Due     string `json:"due,omitempty"`
	Class   string `json:"class,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Status  int    `json:"status,omitempty"`
	Remote  string `json:"remote,omitempty"`
	Dropped uint64 `json:"dropped,omitempty"`
}

// failure is one sample or one bucket's dropped failures, placed in time.
type failure struct {
	target, node string
	// label is its execution's label.
	label string
	// sample is the index of a sample in the live record, -1 for a
	// dropped bucket.
	sample int
	// A sample falls in a bracket by its outcome or its due time (those
	// that parsed); a dropped bucket by its span [start, end).
	due, outcome     time.Time
	dueOK, outcomeOK bool
	span             [2]time.Time
	// at is its time in a window: a sample's outcome, a bucket's start.
	at      time.Time
	dropped uint64
}

// in says whether t lies in [begin, end+settle].
func in(t, begin, end time.Time, settle time.Duration) bool {
	return !t.Before(begin) && !t.After(end.Add(settle))
}

// meets says whether [from, to) meets [begin, end+settle].
func meets(from, to, begin, end time.Time, settle time.Duration) bool {
	return to.After(begin) && !from.After(end.Add(settle))
}

// falls says whether f falls in the bracket [begin, end+settle].
func (f *failure) falls(begin, end time.Time, settle time.Duration) bool {
	if f.sample < 0 {
		return meets(f.span[0], f.span[1], begin, end, settle)
	}
	return f.outcomeOK && in(f.outcome, begin, end, settle) || f.dueOK && in(f.due, begin, end, settle)
}

// attribute sets the live record's failures against the rolls and faults.
// Either may be nil; with neither there is nothing to say (nil).
func (g *grader) attribute(execs []record.Entry) *Attribution {
	rl, live := g.in.Rolls, g.in.Live
	if rl == nil && live == nil {
		return nil
	}
	settle := g.in.Settle
	a := &Attribution{SettleMs: settle.Milliseconds(), HasLive: live != nil}
	targets := map[string]bool{}
	targetOf := map[string]string{}
	for _, e := range execs {
		targetOf[e.Label] = rollName(targetName(e))
		targets[targetOf[e.Label]] = true
	}
	if rl != nil {
		for _, r := range rl.Rolls {
			a.Rolls = append(a.Rolls, newRollBracket(r))
		}
		for _, f := range rl.Faults {
			a.Faults = append(a.Faults, newFaultBracket(f, targets))
		}
	}
	if live == nil {
		return a
	}
	byTarget := map[string]*Unattributed{}
	var order []string
	failures := g.failures(live, targetOf)
	closedBy := map[[2]string][]*Bracket{}
	for i := range failures {
		f := &failures[i]
		excused := false
		for _, bs := range [][]Bracket{a.Rolls, a.Faults} {
			for i := range bs {
				b := &bs[i]
				if b.covers(f) && f.falls(b.begin, b.end, settle) {
					b.add(f, live)
					excused = excused || !b.Planted
					if !b.Planted && f.isClass(live, record.TCPUnavailable) {
						closedBy[f.key()] = appendOnce(closedBy[f.key()], b)
					}
				}
			}
		}
		if !excused && f.isClass(live, record.TCPUnavailable) {
			// The aftermath of a closed connection: see afterClose.
			for _, b := range closedBy[f.key()] {
				b.add(f, live)
				excused = true
			}
		}
		if excused {
			continue
		}
		u := byTarget[f.target]
		if u == nil {
			u = &Unattributed{Target: f.target}
			byTarget[f.target] = u
			order = append(order, f.target)
		}
		u.add(f, live)
	}
	for i := range a.Rolls {
		a.Rolls[i].finish()
	}
	for i := range a.Faults {
		a.Faults[i].finish()
	}
	// The targets in the run's order, then those the report does not list.
	rank := map[string]int{}
	for _, e := range execs {
		if _, ok := rank[targetOf[e.Label]]; !ok {
			rank[targetOf[e.Label]] = len(rank)
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		ri, oki := rank[order[i]]
		rj, okj := rank[order[j]]
		return oki && (!okj || ri < rj)
	})
	for _, t := range order {
		a.Unattributed = append(a.Unattributed, byTarget[t].finish())
	}
	return a
}

// afterClose: a raw TCP worker's connections are opened once and never
// again, so every message due on a connection after its peer closed it is
// tcp_unavailable until the run ends, long past any bracket. Such a
// failure of a target and node belongs to the brackets that held an
// earlier tcp_unavailable of the same target and node: the roll or fault
// that closed the connection, not a finding of its own. (The close itself,
// tcp_connection_closed, is no message's outcome, so the live record has
// no sample of it; the first unavailable message dates it.)

// key is the failure's target and node.
func (f *failure) key() [2]string { return [2]string{f.target, f.node} }

// isClass says f is a sample of the outcome class name.
func (f *failure) isClass(live *LiveFailures, name string) bool {
	return f.sample >= 0 && short(live.class(f.sample)) == short(name)
}

func appendOnce(bs []*Bracket, b *Bracket) []*Bracket {
	for _, x := range bs {
		if x == b {
			return bs
		}
	}
	return append(bs, b)
}

// rollName is a target's name as a roll names it: without a staircase's
// /stage-N.
func rollName(target string) string {
	if i := strings.LastIndex(target, "/stage-"); i > 0 {
		return target[:i]
	}
	return target
}

// labelTarget is the target of a label the report does not list: the
// label without its first part (the scenario).
func labelTarget(label string) string {
	if _, rest, ok := strings.Cut(label, "/"); ok {
		return rollName(rest)
	}
	return label
}

// failures places every sample and dropped bucket of the live record in
// time, in the order of their times. A line whose time does not parse
// cannot be placed: it falls in no bracket.
func (g *grader) failures(live *LiveFailures, targetOf map[string]string) []failure {
	target := func(label string) string {
		if t, ok := targetOf[label]; ok {
			return t
		}
		return labelTarget(label)
	}
	node := g.nodeNamed
	// Target and node per series, not per sample.
	type who struct{ label, target, node string }
	whos := make([]who, len(live.series.vals))
	for i, k := range live.series.vals {
		label := live.str(k.label)
		whos[i] = who{label, target(label), node(live.str(k.backend), live.str(k.name))}
	}
	out := make([]failure, 0, len(live.samples)+len(live.dropped))
	for i := range live.samples {
		w := whos[live.samples[i].series]
		f := failure{target: w.target, label: w.label, node: w.node, sample: i}
		f.due, f.outcome, f.dueOK, f.outcomeOK = live.times(i)
		switch {
		case f.outcomeOK:
			f.at = f.outcome
		case f.dueOK:
			f.at = f.due
		}
		out = append(out, f)
	}
	for _, d := range live.dropped {
		w := whos[d.series]
		f := failure{target: w.target, label: w.label, node: w.node, sample: -1, dropped: d.n}
		// A bucket without a time meets no bracket: its span stays zero.
		if d.startOK {
			f.at = d.start
			f.span = [2]time.Time{d.start, d.start.Add(time.Duration(d.widthMs) * time.Millisecond)}
		}
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

func newRollBracket(r record.Roll) Bracket {
	return Bracket{Kind: "roll", Ref: r.Ref, Target: r.Name(), At: record.FormatRollTime(r.Begin), End: record.FormatRollTime(r.End),
		Failed: r.Failed, Why: oneLine(r.Why), begin: r.Begin, end: r.End}
}

// newFaultBracket scopes a fault by its subject: a target of the run, the
// driver (everything), else a node.
func newFaultBracket(f record.Fault, targets map[string]bool) Bracket {
	b := Bracket{Kind: f.Kind, Ref: f.Subject, At: record.FormatRollTime(f.Begin), End: record.FormatRollTime(f.End),
		Planted: f.Kind == PlantedFault, begin: f.Begin, end: f.End}
	switch {
	case targets[f.Subject]:
		b.Target = f.Subject
	case f.Subject == "driver":
	default:
		b.Node = f.Subject
	}
	return b
}

// covers says whether the bracket's scope holds f's target and node.
func (b *Bracket) covers(f *failure) bool {
	return (b.Target == "" || b.Target == f.target) && (b.Node == "" || b.Node == f.node)
}

func (b *Bracket) add(f *failure, live *LiveFailures) {
	if b.nodes == nil {
		b.nodes, b.classes, b.replicas = map[string]uint64{}, map[string]uint64{}, map[string]bool{}
	}
	n := f.count()
	b.Failures += n
	b.nodes[f.node] += n
	if f.sample < 0 {
		b.Dropped += n
	} else {
		s := &live.samples[f.sample]
		b.classes[short(live.class(f.sample))]++
		if s.remote != 0 {
			b.replicas[live.str(s.remote)] = true
		}
	}
	if f.at.IsZero() {
		return
	}
	if b.first.IsZero() || f.at.Before(b.first) {
		b.first = f.at
	}
	if f.at.After(b.last) {
		b.last = f.at
	}
}

func (b *Bracket) finish() {
	b.Nodes = nodeCounts(b.nodes)
	b.Classes = classCounts(b.classes)
	for r := range b.replicas {
		b.Replicas = append(b.Replicas, r)
	}
	sort.Strings(b.Replicas)
	if !b.first.IsZero() {
		b.First, b.Last = record.FormatRollTime(b.first), record.FormatRollTime(b.last)
		ms := b.last.Sub(b.begin).Milliseconds()
		b.RecoveryMs = &ms
	}
}

func (f *failure) count() uint64 {
	if f.sample < 0 {
		return f.dropped
	}
	return 1
}

func (u *Unattributed) add(f *failure, live *LiveFailures) {
	u.Failures += f.count()
	if f.sample < 0 {
		u.Dropped += f.dropped
	}
	u.Nodes = addNode(u.Nodes, f.node, f.count())
	if f.sample >= 0 {
		u.Classes = addClass(u.Classes, short(live.class(f.sample)))
	}
	if len(u.Listed) >= maxUnattributedLines {
		u.More += f.count()
		return
	}
	l := FailureLine{Node: f.node, At: "?"}
	if !f.at.IsZero() {
		l.At = record.FormatRollTime(f.at)
	}
	if f.sample >= 0 {
		s := live.view(f.sample)
		l.Due, l.Class, l.Reason, l.Status, l.Remote = s.due, short(s.class), reasonOf(s.class, s.reason), s.status, s.remote
	} else {
		l.Dropped = f.dropped
	}
	u.Listed = append(u.Listed, l)
}

func (u *Unattributed) finish() Unattributed {
	sort.SliceStable(u.Nodes, func(i, j int) bool { return u.Nodes[i].Node < u.Nodes[j].Node })
	sort.SliceStable(u.Classes, func(i, j int) bool { return lessClass(u.Classes[i].Class, u.Classes[j].Class) })
	return *u
}

func addNode(ns []NodeCount, node string, n uint64) []NodeCount {
	for i := range ns {
		if ns[i].Node == node {
			ns[i].Count += n
			return ns
		}
	}
	return append(ns, NodeCount{Node: node, Count: n})
}

func addClass(cs []ClassCount, class string) []ClassCount {
	for i := range cs {
		if cs[i].Class == class {
			cs[i].Count++
			return cs
		}
	}
	return append(cs, ClassCount{Class: class, Count: 1})
}

func nodeCounts(m map[string]uint64) []NodeCount {
	var out []NodeCount
	for k, v := range m {
		out = append(out, NodeCount{Node: k, Count: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func classCounts(m map[string]uint64) []ClassCount {
	var out []ClassCount
	for k, v := range m {
		out = append(out, ClassCount{Class: k, Count: v})
	}
	sort.Slice(out, func(i, j int) bool { return lessClass(out[i].Class, out[j].Class) })
	return out
}

// reasonOf writes a sample's reason without its counter's prefix: a
// reset's benchmark.stream_resets_remote_reset is remote_reset.
func reasonOf(class, reason string) string {
	if reason == "" {
		return ""
	}
	if r, ok := strings.CutPrefix(reason, class+"_"); ok {
		return r
	}
	return short(reason)
}

// describe is a note for what the attribution could not do.
func (a *Attribution) describe(live *LiveFailures) []string {
	// Without a live record each ROLL and FAULT line says so itself.
	var notes []string
	if live != nil && live.Skipped > 0 {
		notes = append(notes, fmt.Sprintf("the live record has %d line(s) that could not be read (torn or garbage), skipped: a failure they held is in no ROLL, FAULT or UNATTRIBUTED line", live.Skipped))
	}
	if live != nil && live.Unknown > 0 {
		// A newer writer's line type: this gate cannot say what it held.
		notes = append(notes, fmt.Sprintf("the live record has %d line(s) of a type this gate does not know (a newer writer's), skipped: a failure they held is in no ROLL, FAULT or UNATTRIBUTED line", live.Unknown))
	}
	return notes
}
