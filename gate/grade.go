package gate

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// Verdict results.
const (
	ResultPass       = "PASS"
	ResultFail       = "FAIL"
	ResultUnobserved = "UNOBSERVED"
)

// Input is everything Grade judges: one run's executions and the plan they
// are judged against.
type Input struct {
	// Source is the run's executions.
	Source *record.Source
	// Shares are the plan's targets and per-backend rates; nil means the
	// targets are the source's executions at their own planned rates.
	Shares []Share
	// Engines name the nodes (optional).
	Engines []Engine
	// Backends is how many engines every execution must have been
	// dispatched to.
	Backends int
	// FloorPct is the count floor in percent; the ceiling is 200 - FloorPct.
	FloorPct *big.Rat
	// MaxP99 judges every node's 2xx p99 when positive.
	MaxP99 time.Duration
	// Log is the driver's log summary (optional); LogName names it in lines.
	Log     *LogSummary
	LogName string
	// Notes are passed through to the verdict (what --dir chose, ...).
	Notes []string
	// Rolls are the run's rolls and faults, and Live the failures of its
	// live record (both optional); Settle is the settle window after a
	// roll's or fault's end.
	Rolls  *record.RollLog
	Live   *LiveFailures
	Settle time.Duration
}

// Verdict is the gate's judgement of a run.
type Verdict struct {
	// Result is PASS, FAIL or UNOBSERVED.
	Result string `json:"verdict"`
	// ExitCode is the exit code the result maps to: 0, 1 or 3.
	ExitCode int `json:"exit_code"`
	// Targets are graded in share-table (or report) order; executions that
	// are not in the share table follow.
	Targets []Target `json:"targets"`
	// RunFailures are failures of the run as a whole, not of one target
	// (a cancelled run, a driver log that disagrees with the report).
	RunFailures []RunFailure `json:"run_failures,omitempty"`
	// Lost lists every backend lost in the run, once.
	Lost []Lost `json:"lost,omitempty"`
	// Gaps lists, per node, the times it had no engine, summed over its
	// targets (each target's is among its reasons).
	Gaps []NodeGap `json:"gaps,omitempty"`
	// Attribution sets the failures against the rolls and faults; nil
	// when the gate was given neither nor a live record.
	Attribution *Attribution `json:"attribution,omitempty"`
	// Window is when the run ran.
	Window Window `json:"window"`
	// DriverGaps are the report's driver_gaps: the times no driver
	// followed the run, which a resumed driver went on with. They are
	// named, not judged: the engines ran on, and the counts are whole.
	DriverGaps []record.DriverGap `json:"driver_gaps,omitempty"`
	// Notes say what the gate noticed and did not judge.
	Notes []string `json:"notes,omitempty"`
	// Counts are the numbers of the VERDICT line.
	Counts Counts `json:"counts"`
}

// Counts are the numbers the VERDICT line carries.
type Counts struct {
	Targets      int    `json:"targets"`
	Passed       int    `json:"passed"`
	Failed       int    `json:"failed"`
	NotRun       int    `json:"not_run"`
	Backends     int    `json:"backends"`
	LostBackends int    `json:"lost_backends"`
	ReportPass   string `json:"report_pass"` // "true", "false" or "absent"
	Source       string `json:"source"`      // "report" or "stream"
	SkippedLines int    `json:"skipped_lines"`
	Runs         int    `json:"runs"`
}

// Target is the grade of one target.
type Target struct {
	// Name is the share table's name (or the label without its scenario).
	Name string `json:"name"`
	// Label is the execution's label, when the source has it.
	Label string `json:"label,omitempty"`
	// Status is PASS or FAIL.
	Status string `json:"status"`
	// Reasons say why it failed, in words, one per class of failure.
	Reasons []string `json:"reasons,omitempty"`
	// Ran is true when the execution was dispatched (it ran or was
	// refused); the fields below are set only then.
	Ran bool `json:"ran"`
	// RatePlanned is the pool's planned rate (share x backends), exact.
	RatePlanned string `json:"rate_planned,omitempty"`
	// RateAchieved is the sum of the nodes' http_2xx over their own elapsed
	// time (printed, never judged); nil when no node answered.
	RateAchieved *float64 `json:"rate_achieved,omitempty"`
	// HTTP2xx is the 2xx count summed over the nodes that answered; nil
	// when none did.
	HTTP2xx *uint64 `json:"http_2xx,omitempty"`
	// HTTP2xxPlanned is the planned count of the pool, exact.
	HTTP2xxPlanned string `json:"http_2xx_planned,omitempty"`
	// Survivors counts the nodes that answered and were not lost.
	Survivors int `json:"survivors"`
	// Backends is the number of engines the run was meant to use.
	Backends int `json:"backends"`
	// Latency is the worst node's 2xx latency.
	Latency *Latency `json:"latency,omitempty"`
	// Nodes are the per-node grades.
	Nodes []Node `json:"nodes,omitempty"`
}

// Latency is a 2xx latency summary in milliseconds; a nil field is unknown.
type Latency struct {
	P50Ms *float64 `json:"p50_ms,omitempty"`
	P99Ms *float64 `json:"p99_ms,omitempty"`
	MaxMs *float64 `json:"max_ms,omitempty"`
}

// Node is the grade of one target on one node.
type Node struct {
	Node string `json:"node"`
	Addr string `json:"addr"`
	// Status is ok, FAIL, LOST or REFUSED.
	Status string `json:"status"`
	// Reasons say why it is not ok.
	Reasons []string `json:"reasons,omitempty"`
	// Answered is true when the node returned a result.
	Answered  bool     `json:"answered"`
	HTTP2xx   uint64   `json:"http_2xx"`
	Planned   string   `json:"planned,omitempty"`
	Share     string   `json:"share_rps,omitempty"`
	Rate      *float64 `json:"rate,omitempty"`
	ElapsedMs int64    `json:"elapsed_ms"`
	StartedAt string   `json:"started_at,omitempty"`
	Latency   *Latency `json:"latency,omitempty"`
	// Failures are the non-zero counters of the zero-failure set.
	Failures []ClassCount `json:"failures,omitempty"`
	// Gaps are the times the node had no engine (its result's
	// gap_unsent); each fails the node by name.
	Gaps []NodeGap `json:"gaps,omitempty"`
}

// ClassCount is one counter of the zero-failure set on one node.
type ClassCount struct {
	Class string `json:"class"`
	Count uint64 `json:"count"`
}

// RunFailure is a failure of the whole run, printed as a FAIL line of its
// own under Name.
type RunFailure struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Lost is a backend that was lost (in backend_errors without a refusal).
type Lost struct {
	Node    string `json:"node"`
	Addr    string `json:"addr"`
	Targets int    `json:"targets"`
	Error   string `json:"error"`
}

// Window is when the run ran: the driver's dispatch bracket and the span of
// the engines' first due times. Empty strings are unknown.
type Window struct {
	Dispatched     string `json:"dispatched,omitempty"`
	Ended          string `json:"ended,omitempty"`
	EnginesFirst   string `json:"engines_first,omitempty"`
	EnginesLast    string `json:"engines_last,omitempty"`
	StartedExecs   int    `json:"started_executions"`
	ExecutionCount int    `json:"executions"`
}

// Grade judges a run. It is a pure function of its input.
func Grade(in Input) Verdict {
	g := newGrader(in)
	v := Verdict{Notes: append([]string(nil), in.Notes...)}
	src := in.Source
	v.DriverGaps = src.DriverGaps
	execs := src.Executions

	// The targets: the share table's, each matched to its executions, or
	// the executions' own labels.
	type group struct {
		name  string
		share *Share
		execs []record.Entry
	}
	var groups []group
	matched := make([]bool, len(execs))
	if in.Shares != nil {
		for i := range in.Shares {
			s := &in.Shares[i]
			gr := group{name: s.Name, share: s}
			for j, e := range execs {
				if e.Label == s.Name || targetName(e) == s.Name {
					gr.execs = append(gr.execs, e)
					matched[j] = true
				}
			}
			groups = append(groups, gr)
		}
	} else {
		idx := map[string]int{}
		for j, e := range execs {
			matched[j] = true
			if k, ok := idx[e.Label]; ok {
				groups[k].execs = append(groups[k].execs, e)
				continue
			}
			idx[e.Label] = len(groups)
			groups = append(groups, group{name: targetName(e), execs: []record.Entry{e}})
		}
	}

	allNothingPlanned := len(groups) > 0
	for _, gr := range groups {
		t, nothingPlanned := g.target(gr.name, gr.share, gr.execs)
		if !nothingPlanned {
			allNothingPlanned = false
		}
		v.Targets = append(v.Targets, t)
	}
	for j, e := range execs {
		if matched[j] {
			continue
		}
		why := "in the report but not in the share table (a different plan?)"
		if e.NotRun {
			why += " and NOT RUN"
		}
		v.Targets = append(v.Targets, Target{Name: e.Label, Label: e.Label, Status: ResultFail, Reasons: []string{why}})
	}

	// The run as a whole.
	notRun := 0
	for _, e := range execs {
		if e.NotRun {
			notRun++
		}
	}
	if src.Cancelled {
		v.RunFailures = append(v.RunFailures, RunFailure{Name: "run", Reason: `the report says the run was cancelled before its end ("cancelled": true): a cancelled run never passes`})
	}
	if in.Log != nil {
		nr, rf, note := judgeLog(in.Log, in.LogName, execs)
		if nr > notRun {
			notRun = nr
		}
		if rf != nil {
			v.RunFailures = append(v.RunFailures, *rf)
		}
		if note != "" {
			v.Notes = append(v.Notes, note)
		}
	}
	v.Lost = g.lostSummary(execs)
	v.Gaps = gapSummary(v.Targets)
	if v.Attribution = g.attribute(execs); v.Attribution != nil {
		v.Notes = append(v.Notes, v.Attribution.describe(in.Live)...)
	}
	v.Window = window(execs)
	if src.Form == record.FormStream {
		if n := len(src.Skipped); n > 0 {
			v.Notes = append(v.Notes, fmt.Sprintf("%d line(s) of the results stream hold no execution (a torn or unparseable line) and were skipped: line(s) %s; an execution they held is missing", n, intList(src.Skipped)))
		}
		if n := len(src.Runs); n > 1 {
			last := src.Runs[n-1]
			v.Notes = append(v.Notes, fmt.Sprintf("the results stream holds %d runs (a label repeats when a run starts again in the same file; %s repeats at line %d): graded the last run, lines %d..%d, %d execution(s); the earlier lines are not graded", n, last.Repeated, last.FirstLine, last.FirstLine, last.LastLine, last.Executions))
		}
	}

	c := Counts{
		Targets:      len(v.Targets),
		NotRun:       notRun,
		Backends:     in.Backends,
		LostBackends: len(v.Lost),
		ReportPass:   "absent",
		Source:       string(src.Form),
		SkippedLines: len(src.Skipped),
		Runs:         len(src.Runs),
	}
	if src.Pass != nil {
		c.ReportPass = fmt.Sprint(*src.Pass)
	}
	for _, t := range v.Targets {
		if t.Status == ResultPass {
			c.Passed++
		} else {
			c.Failed++
		}
	}
	v.Counts = c

	switch {
	case len(groups) == 0:
		v.Result, v.ExitCode = ResultUnobserved, 3
		what := "the report has no execution"
		if in.Shares != nil {
			what = "the share table lists no target"
		}
		v.Notes = append(v.Notes, "UNOBSERVED: nothing to grade, "+what+"; a gate never passes an empty set")
	case allNothingPlanned && len(v.RunFailures) == 0 && len(groups) == len(v.Targets):
		v.Result, v.ExitCode = ResultUnobserved, 3
		v.Notes = append(v.Notes, "UNOBSERVED: no target was planned a single request (share x duration is zero everywhere); a gate never passes an empty set")
	case c.Failed == 0 && len(v.RunFailures) == 0:
		v.Result, v.ExitCode = ResultPass, 0
	default:
		v.Result, v.ExitCode = ResultFail, 1
	}
	return v
}

// grader holds what every target's grading needs.
type grader struct {
	in       Input
	nameOf   map[string]string // backend address -> backend_name from results
	floor    *big.Rat
	ceiling  *big.Rat
	backends int
}

func newGrader(in Input) *grader {
	g := &grader{in: in, nameOf: map[string]string{}, backends: in.Backends}

	for _, e := range in.Source.Executions {
		for _, r := range e.Results {
			if r.BackendName != "" {
				g.nameOf[r.Backend] = r.BackendName
			}
		}
	}
	g.floor = in.FloorPct
	if g.floor == nil {
		g.floor = big.NewRat(99, 1)
	}
	g.ceiling = new(big.Rat).Sub(big.NewRat(200, 1), g.floor)
	return g
}

// node names an engine address: by the engine list, else by the engine's
// own --backend-name, else by the address itself.
// nodeNamed is the node of an engine at addr that calls itself name (its
// --backend-name, "" when it has none): the engine list's name, else the
// report's, else its own, else the address.
func (g *grader) nodeNamed(addr, name string) string {
	if n := g.node(addr); n != addr || name == "" {
		return n
	}
	return name
}

func (g *grader) node(addr string) string {
	// An exact entry wins over one that names the whole host.
	for _, en := range g.in.Engines {
		if en.Addr == addr {
			return en.Node
		}
	}
	for _, en := range g.in.Engines {
		if en.matches(addr) {
			return en.Node
		}
	}
	if n, ok := g.nameOf[addr]; ok {
		return n
	}
	return addr
}

// targetName is an execution's label without its scenario prefix.
func targetName(e record.Entry) string {
	if e.Scenario != "" && strings.HasPrefix(e.Label, e.Scenario+"/") {
		return e.Label[len(e.Scenario)+1:]
	}
	return e.Label
}

// target grades one target from its executions. nothingPlanned is true when
// the target was run and planned no request at all.
func (g *grader) target(name string, share *Share, execs []record.Entry) (Target, bool) {
	t := Target{Name: name, Status: ResultFail, Backends: g.backends}
	switch {
	case len(execs) == 0:
		if g.in.Source.Form == record.FormStream {
			t.Reasons = []string{"missing from the results stream (never driven, or its line was torn)"}
		} else {
			t.Reasons = []string{"missing from the report (never driven)"}
		}
		return t, false
	case len(execs) > 1:
		var starts []string
		for _, e := range execs {
			s := e.StartedAt
			if s == "" {
				s = "?"
			}
			starts = append(starts, s)
		}
		t.Label = execs[0].Label
		t.Reasons = []string{fmt.Sprintf("listed %d times (started_at %s): which one is this plan's run cannot be told apart", len(execs), strings.Join(starts, ", "))}
		return t, false
	}
	e := execs[0]
	t.Label = e.Label
	if e.NotRun {
		why := oneLine(e.Error)
		if why == "" {
			why = "no reason given"
		}
		t.Reasons = []string{"NOT RUN: never started, so it has no counters and its zeros mean nothing (" + why + ")"}
		return t, false
	}
	return g.execution(t, share, e)
}

// nodeState is what one dispatched engine did for one execution.
type nodeState struct {
	addr    string
	result  *record.BackendResult
	lost    *record.BackendError
	refused *record.BackendError
	// accounting is the driver's word that the result breaks planned =
	// unsent + outcomes (kind accounting): a failure of the result, not a
	// lost backend.
	accounting *record.BackendError
	dispatch   bool
	dupes      int
}

// execution grades a target whose execution was dispatched.
func (g *grader) execution(t Target, share *Share, e record.Entry) (Target, bool) {
	t.Ran = true
	var reasons []string
	add := func(s string) { reasons = append(reasons, s) }
	N := g.backends

	// The planned share per backend: the share table's, else the report's
	// own rate (split over the pool unless it is per backend).
	var perBackend *big.Rat
	reportShare := e.ExactRate
	if reportShare != nil && !e.PerBackend && N > 0 {
		reportShare = new(big.Rat).Quo(reportShare, big.NewRat(int64(N), 1))
	}
	switch {
	case share != nil:
		perBackend = share.rps
		if reportShare != nil && reportShare.Cmp(perBackend) != 0 {
			add(fmt.Sprintf("the report plans %s rps per backend, the share table %s (a different plan?)", fmtRat(reportShare), share.RPS))
		}
	case reportShare != nil:
		perBackend = reportShare
	default:
		add("the report gives no planned rate, and there is no share table: the count floor cannot be judged")
	}
	var planned *big.Rat
	if perBackend != nil {
		planned = plannedPerNode(perBackend, e.DurationMs, e.RampMs)
		t.RatePlanned = fmtRat(new(big.Rat).Mul(perBackend, big.NewRat(int64(N), 1)))
		t.HTTP2xxPlanned = fmtRat(new(big.Rat).Mul(planned, big.NewRat(int64(N), 1)))
	}
	nothingPlanned := planned != nil && planned.Sign() == 0
	if nothingPlanned {
		add("nothing was planned (share x duration is zero): a target that asks for nothing proves nothing")
	}

	// Every engine this execution concerns: dispatched ones in dispatch
	// order, then any that answered or erred without being dispatched.
	refusedExec := record.ExecutionRefused(e.Execution)
	var nodes []*nodeState
	byAddr := map[string]*nodeState{}
	get := func(addr string) *nodeState {
		if ns, ok := byAddr[addr]; ok {
			return ns
		}
		ns := &nodeState{addr: addr}
		byAddr[addr] = ns
		nodes = append(nodes, ns)
		return ns
	}
	for _, b := range e.Backends {
		get(b).dispatch = true
	}
	dispatched := len(nodes)
	for i := range e.Results {
		ns := get(e.Results[i].Backend)
		if ns.result != nil {
			ns.dupes++
			continue
		}
		ns.result = &e.Results[i]
	}
	for i := range e.BackendErrors {
		be := &e.BackendErrors[i]
		ns := get(be.Backend)
		switch {
		case record.BackendRefused(e.Execution, *be):
			ns.refused = be
		case accountingError(e, be):
			ns.accounting = be
		case ns.lost == nil:
			ns.lost = be
		}
	}

	if refusedExec {
		why := oneLine(e.Error)
		if why == "" {
			why = "no reason given"
		}
		r := "REFUSED AT THE EXECUTION CAP, nothing of this stage ran: " + why
		var by []string
		for _, ns := range nodes {
			if ns.refused != nil {
				by = append(by, g.node(ns.addr))
			}
		}
		if len(by) > 0 {
			r += " [refused by: " + strings.Join(by, " ") + "]"
		}
		add(r)
	}

	// Per node.
	var lostN, survivors int
	var survivorMarks, offPlan, below, above, cancelled, silent, slow, undispatched, dupes, inexact []string
	type classAt struct {
		node  string
		count uint64
	}
	classes := map[string][]classAt{}
	var worst Latency
	var rateSum float64
	var rateKnown bool
	var total uint64
	for _, ns := range nodes {
		nd := Node{Node: g.node(ns.addr), Addr: ns.addr, Status: "ok"}
		if perBackend != nil {
			nd.Share = fmtRat(perBackend)
			nd.Planned = fmtRat(planned)
		}
		var nr []string
		if !ns.dispatch {
			undispatched = append(undispatched, fmt.Sprintf("%s (%s)", nd.Node, ns.addr))
			nr = append(nr, "not dispatched to, yet named in the execution")
		}
		if ns.dupes > 0 {
			dupes = append(dupes, fmt.Sprintf("%s (%s)", nd.Node, ns.addr))
			nr = append(nr, fmt.Sprintf("reported %d times", ns.dupes+1))
		}
		if ns.refused != nil {
			nd.Status = "REFUSED"
			nr = append(nr, "REFUSED the start: the engine was at its execution cap")
		}
		if ns.lost != nil {
			lostN++
			what := "[returned nothing]"
			switch {
			case ns.result != nil && ns.result.Partial:
				what = lostAt(ns.result)
			case ns.result != nil:
				what = "[counters reported]"
			}
			add(fmt.Sprintf("LOST BACKEND %s (%s) %s", nd.Node, ns.addr, what))
			nd.Status = "LOST"
			nr = append(nr, "LOST "+what+": "+oneLine(ns.lost.Error))
		}
		if r := ns.result; r != nil {
			// A gap fails the node by name; the rest of it is judged
			// as usual, against what was due outside the gap.
			nd.Gaps = nodeGaps(nd.Node, ns.addr, r)
			for _, gp := range nd.Gaps {
				add(gp.Line())
				nr = append(nr, gp.Line())
			}
		}
		if r := ns.result; r != nil {
			nd.Answered = true
			c := record.Succeeded(r.Counters)
			nd.HTTP2xx = c
			total += c
			nd.ElapsedMs = r.ElapsedMs
			nd.StartedAt = r.StartedAt
			if r.ElapsedMs > 0 {
				rate := float64(c) / (float64(r.ElapsedMs) / 1000)
				nd.Rate = &rate
				rateSum += rate
				rateKnown = true
			}
			nd.Latency = latencyOf(r)
			worst.worsen(nd.Latency)
			nd.Failures = failureClasses(r.Counters)
			for _, f := range nd.Failures {
				classes[f.Class] = append(classes[f.Class], classAt{nd.Node, f.Count})
				switch f.Class {
				case short(record.PoolOverflow):
					nr = append(nr, fmt.Sprintf("driver saturated: %d request(s) not sent [%s=%d]", f.Count, nd.Node, f.Count))
				case short(record.InflightLost):
					nr = append(nr, fmt.Sprintf("in flight at the end: %d request(s) with no outcome [%s=%d]", f.Count, nd.Node, f.Count))
				case short(record.LateDropped):
					nr = append(nr, fmt.Sprintf("engine behind: %d request(s) not sent [%s=%d]", f.Count, nd.Node, f.Count))
				default:
					nr = append(nr, fmt.Sprintf("%s=%d", f.Class, f.Count))
				}
			}
			if r.Cancelled {
				cancelled = append(cancelled, nd.Node)
				nr = append(nr, "cancelled before its planned end")
			}
			if ns.lost == nil {
				survivors++
				// A result of this project's engine is judged exactly:
				// every planned request has one outcome (or was unsent).
				if why := exact(nd.Node, r, len(nd.Failures) > 0, ns.accounting); why != "" {
					inexact = append(inexact, why)
					nr = append(nr, why)
				}
				// The floor and the plan's duration are judged on the
				// survivors only; a lost node has already failed.
				if planned != nil {
					cnt := new(big.Rat).SetUint64(c)
					own := planned
					if gap, _ := r.GapCount(); gap > 0 {
						// What the gap left to send.
						own = new(big.Rat).Sub(planned, new(big.Rat).SetUint64(gap))
					}
					lo := pct(own, g.floor)
					hi := pct(own, g.ceiling)
					if cnt.Cmp(lo) < 0 {
						below = append(below, fmt.Sprintf("%s=%d", nd.Node, c))
						nr = append(nr, fmt.Sprintf("http_2xx below %s%% of the planned %s", fmtRat(g.floor), fmtRat(own)))
					} else if cnt.Cmp(hi) > 0 {
						above = append(above, fmt.Sprintf("%s=%d", nd.Node, c))
						nr = append(nr, fmt.Sprintf("http_2xx above %s%% of the planned %s", fmtRat(g.ceiling), fmtRat(own)))
					}
				}
				if offPlanned(r.ElapsedMs, e.DurationMs, perBackend) {
					offPlan = append(offPlan, fmt.Sprintf("%s=%ss", nd.Node, fmtMsAsS(r.ElapsedMs)))
					nr = append(nr, fmt.Sprintf("ran off plan: %ss of %ss", fmtMsAsS(r.ElapsedMs), fmtMsAsS(e.DurationMs)))
				}
			}
			if g.in.MaxP99 > 0 {
				switch l := nd.Latency; {
				case l != nil && l.P99Ms != nil:
					if *l.P99Ms*1e6 > float64(g.in.MaxP99.Nanoseconds()) {
						slow = append(slow, fmt.Sprintf("%s=%s", nd.Node, fmtMs(l.P99Ms)))
						nr = append(nr, fmt.Sprintf("p99 %s above %s", fmtMs(l.P99Ms), g.in.MaxP99))
					}
				case c > 0:
					slow = append(slow, nd.Node+"=?")
					nr = append(nr, "p99 unknown (no latency_2xx statistic in ns)")
				}
			}
		} else if ns.lost == nil && ns.refused == nil {
			if refusedExec {
				nr = append(nr, "nothing ran: the stage was refused at the execution cap")
			} else {
				silent = append(silent, nd.Node)
				nr = append(nr, "no result and no error")
			}
		}
		if len(nr) > 0 && nd.Status == "ok" {
			nd.Status = "FAIL"
		}
		if ns.result != nil && ns.lost == nil {
			mark := "ok"
			if nd.Status != "ok" {
				mark = "FAIL"
			}
			survivorMarks = append(survivorMarks, nd.Node+"="+mark)
		}
		nd.Reasons = nr
		t.Nodes = append(t.Nodes, nd)
	}
	t.Survivors = survivors
	if len(e.Results) > 0 {
		t.HTTP2xx = &total
	}
	if rateKnown {
		t.RateAchieved = &rateSum
	}
	if worst.P50Ms != nil || worst.P99Ms != nil || worst.MaxMs != nil {
		t.Latency = &worst
	}

	if lostN > 0 && !refusedExec {
		if survivors > 0 {
			add("survivors " + strings.Join(survivorMarks, " "))
		} else {
			add("no backend survived")
		}
	}
	if e.Error != "" && lostN == 0 && !refusedExec {
		add("error: " + oneLine(e.Error))
	}
	if e.Error == "" && !refusedExec && e.ElapsedMs < e.DurationMs {
		add(fmt.Sprintf("ran %dms of %dms", e.ElapsedMs, e.DurationMs))
	}
	if len(offPlan) > 0 {
		add(fmt.Sprintf("ran off plan (%ss) on [%s]", fmtMsAsS(e.DurationMs), strings.Join(offPlan, " ")))
	}
	if len(cancelled) > 0 {
		add("cancelled before the planned end on [" + strings.Join(cancelled, " ") + "]")
	}
	if dispatched != N {
		r := fmt.Sprintf("backends %d/%d dispatched", dispatched, N)
		var missing []string
		for _, en := range g.in.Engines {
			found := false
			for _, b := range e.Backends {
				if en.matches(b) {
					found = true
					break
				}
			}
			if !found {
				missing = append(missing, en.Node)
			}
		}
		if len(missing) > 0 {
			r += " (not dispatched: " + strings.Join(missing, " ") + ")"
		}
		add(r + ": a node missing from the pool fails the run instead of shrinking it")
	}
	if len(undispatched) > 0 {
		add("named but not dispatched to: " + strings.Join(undispatched, " "))
	}
	if len(dupes) > 0 {
		add("reported more than once: " + strings.Join(dupes, " "))
	}
	if len(silent) > 0 {
		add("no result and no error from [" + strings.Join(silent, " ") + "]: nothing to count")
	}
	// The zero-failure set, by class, with the count of every node; three
	// classes are worded apart because none is an answer of the target.
	var mesh []string
	var saturated, inflight, behind string
	for _, cl := range sortedClasses(classes) {
		at := classes[cl]
		var sum uint64
		var per []string
		for _, a := range at {
			sum += a.count
			per = append(per, fmt.Sprintf("%s=%d", a.node, a.count))
		}
		list := "[" + strings.Join(per, " ") + "]"
		switch cl {
		case short(record.PoolOverflow):
			saturated = fmt.Sprintf("driver saturated: %d request(s) not sent %s (pool_overflow: the engine's own client queue was full, so they never reached the target)", sum, list)
		case short(record.LateDropped):
			behind = fmt.Sprintf("engine behind: %d request(s) not sent %s (late_dropped: due longer ago than the plan's max_lateness when the engine got to them, a frozen or starved engine; they never reached the target)", sum, list)
		case short(record.InflightLost):
			inflight = fmt.Sprintf("in flight at the end: %d request(s) with no outcome %s (http_inflight_lost: sent or queued, neither answered nor reset when the run and its request timeout were over)", sum, list)
		default:
			mesh = append(mesh, fmt.Sprintf("%s=%d %s", cl, sum, list))
		}
	}
	if len(mesh) > 0 {
		add("failures " + strings.Join(mesh, " "))
	}
	if saturated != "" {
		add(saturated)
	}
	if inflight != "" {
		add(inflight)
	}
	if behind != "" {
		add(behind)
	}
	reasons = append(reasons, inexact...)
	if planned != nil {
		if len(below) > 0 {
			add(fmt.Sprintf("http_2xx below %s%% of the planned %s on [%s]", fmtRat(g.floor), fmtRat(planned), strings.Join(below, " ")))
		}
		if len(above) > 0 {
			add(fmt.Sprintf("http_2xx above %s%% of the planned %s on [%s] (more than the plan asked for: not this plan's load)", fmtRat(g.ceiling), fmtRat(planned), strings.Join(above, " ")))
		}
	}
	if len(e.Results) == 0 && lostN == 0 && e.Error == "" && !refusedExec && len(silent) == 0 {
		add("no per-backend results: the 2xx count cannot be checked")
	}
	if len(slow) > 0 {
		add(fmt.Sprintf("p99 above %s on [%s]", g.in.MaxP99, strings.Join(slow, " ")))
	}
	// The driver's own thresholds: every one that failed, except a counter
	// of the zero-failure set whose class is already listed above.
	var thr []string
	for _, th := range e.Thresholds {
		if th.Pass {
			continue
		}
		if cl, ok := thresholdClass(th.Expr); ok && len(classes[cl]) > 0 {
			continue
		}
		thr = append(thr, fmt.Sprintf("%s (actual %s)", oneLine(th.Expr), oneLine(th.Actual)))
	}
	if len(thr) > 0 {
		add("thresholds failed: " + strings.Join(thr, "; "))
	}

	t.Reasons = reasons
	if len(reasons) == 0 {
		t.Status = ResultPass
	}
	return t, nothingPlanned
}

// exact judges a result by the law every result of this project's engine
// keeps, when it carries planned (the older stack's do not, and keep the
// count floor alone): planned = unsent + the sum of the outcome classes,
// exactly, and, on a node with no failure, http_2xx = planned. It returns
// why the result breaks it, naming the node, or "". driver is the driver's
// own accounting error for the result, if it gave one.
func exact(node string, r *record.BackendResult, failed bool, driver *record.BackendError) string {
	if why := conservation(node, r, failed); why != "" || driver == nil {
		return why
	}
	// The driver saw what the report does not show (a result rewritten
	// since?): its word stands, never a pass.
	return "the driver says the result of " + node + " breaks planned = unsent + outcomes: " + oneLine(driver.Error)
}

// conservation is exact without the driver's word.
func conservation(node string, r *record.BackendResult, failed bool) string {
	if !r.HasPlanned() {
		return ""
	}
	var ae *record.AccountingError
	if errors.As(r.Conserves(), &ae) {
		named := *ae
		named.Backend = node
		switch d := named.Diff(); {
		case d < 0:
			return fmt.Sprintf("%s (%d missing)", named.Error(), -d)
		case d > 0:
			return fmt.Sprintf("%s (%d counted twice)", named.Error(), d)
		}
		return named.Error()
	}
	n := record.Succeeded(r.Counters)
	gap, _ := r.GapCount()
	if failed || n == r.Planned-gap {
		// A node with failures is named by them; the rest is clean. The
		// requests due in a gap are named by its GAP line.
		return ""
	}
	var rest []string
	for _, k := range record.Outcomes {
		if c := r.Counters[k]; c > 0 && !record.Succeeding(k) {
			rest = append(rest, fmt.Sprintf("%s=%d", short(k), c))
		}
	}
	if r.Unsent > 0 {
		rest = append(rest, fmt.Sprintf("unsent=%d", r.Unsent))
	}
	if gap > 0 {
		rest = append(rest, fmt.Sprintf("gap_unsent=%d", gap))
	}
	return fmt.Sprintf("not clean: http_2xx %d != %d planned on %s (%s)", n, r.Planned, node, strings.Join(rest, " "))
}

// accountingError says a backend error is the driver's word that the
// backend's result breaks planned = unsent + outcomes: its kind is
// accounting and the result is there to judge. Such a backend answered; it
// is not lost.
func accountingError(e record.Entry, be *record.BackendError) bool {
	if record.KindOf(*be) != record.KindAccounting {
		return false
	}
	for _, r := range e.Results {
		if r.Backend == be.Backend {
			return true
		}
	}
	return false
}

// plannedPerNode is share x (D - T/2) seconds: what a constant rate sends
// over the duration D, less the half that a linear ramp from zero over T
// does not send. D and T are in milliseconds; the result is exact.
func plannedPerNode(share *big.Rat, durMs, rampMs int64) *big.Rat {
	num := new(big.Int).Mul(big.NewInt(durMs), big.NewInt(2))
	num.Sub(num, big.NewInt(rampMs))
	eff := new(big.Rat).SetFrac(num, big.NewInt(2000))
	return eff.Mul(eff, share)
}

// offPlanned says an elapsed time is off the planned duration, either
// side, by more than 5 % of it and by more than one request interval of
// the planned per-node rate (nil when unknown). (A frozen node that thawed
// hands back several times the duration; one that stopped early, a
// fraction of it. A short run is measured to about its last request,
// which is up to an interval from its end: 5 % alone would fail every run
// of fewer than about twenty requests per node.)
func offPlanned(elapsedMs, durMs int64, perNode *big.Rat) bool {
	if durMs <= 0 {
		return false
	}
	diff := new(big.Rat).SetInt64(elapsedMs - durMs)
	diff.Abs(diff)
	tol := big.NewRat(durMs, 20) // 5 %
	if perNode != nil && perNode.Sign() > 0 {
		if interval := new(big.Rat).Quo(big.NewRat(1000, 1), perNode); interval.Cmp(tol) > 0 {
			tol = interval
		}
	}
	return diff.Cmp(tol) > 0
}

// pct is p percent of x.
func pct(x, p *big.Rat) *big.Rat {
	r := new(big.Rat).Mul(x, p)
	return r.Quo(r, big.NewRat(100, 1))
}

// worsen raises l to the worse of l and o, field by field.
func (l *Latency) worsen(o *Latency) {
	if o == nil {
		return
	}
	up := func(dst **float64, v *float64) {
		if v != nil && (*dst == nil || *v > **dst) {
			x := *v
			*dst = &x
		}
	}
	up(&l.P50Ms, o.P50Ms)
	up(&l.P99Ms, o.P99Ms)
	up(&l.MaxMs, o.MaxMs)
}

// latencyOf reads a result's 2xx latency statistic, in milliseconds; nil
// when there is none or it is not in nanoseconds.
func latencyOf(r *record.BackendResult) *Latency {
	st, ok := r.Statistics[record.Latency2xx]
	if !ok || st.Unit != "ns" || st.Count == 0 {
		return nil
	}
	ms := func(ns float64) *float64 {
		v := ns / 1e6
		return &v
	}
	l := &Latency{MaxMs: ms(st.Max)}
	if st.P50 > 0 {
		l.P50Ms = ms(st.P50)
	}
	if st.P99 > 0 {
		l.P99Ms = ms(st.P99)
	}
	return l
}

// short is a counter's name without "benchmark.".
func short(name string) string { return strings.TrimPrefix(name, "benchmark.") }

// classRank orders the zero-failure classes the way they are listed.
func classRank(cl string) int {
	switch {
	case cl == short(record.HTTP4xx):
		return 0
	case cl == short(record.HTTP5xx):
		return 1
	case cl == short(record.StreamResets):
		return 2
	case strings.HasPrefix(cl, short(record.StreamResetsPrefix)):
		return 3
	case cl == short(record.PoolConnectionFailure):
		return 4
	case strings.HasPrefix(cl, "pool_failure_"):
		return 5
	case cl == short(record.PoolOverflow):
		return 6
	case cl == short(record.InflightLost):
		return 7
	case cl == short(record.RequestTimeout):
		return 8
	case cl == short(record.LateDropped):
		return 9
	}
	return 10
}

func lessClass(a, b string) bool {
	if ra, rb := classRank(a), classRank(b); ra != rb {
		return ra < rb
	}
	return a < b
}

// failureClasses lists a node's non-zero counters of the zero-failure set.
// Each is its own class: the detail counters overlap their class by design
// and are listed beside it, never added to it.
func failureClasses(c map[string]uint64) []ClassCount {
	var out []ClassCount
	for k, v := range c {
		if v > 0 && record.InZeroFailureSet(k) {
			out = append(out, ClassCount{Class: short(k), Count: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return lessClass(out[i].Class, out[j].Class) })
	return out
}

func sortedClasses[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return lessClass(out[i], out[j]) })
	return out
}

// thresholdClass returns the zero-failure class a "counter:benchmark.X ..."
// threshold is about.
func thresholdClass(expr string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(expr), "counter:")
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, " ")
	if !record.InZeroFailureSet(name) {
		return "", false
	}
	return short(name), true
}

// lostSummary lists every lost backend of the run once, with the number of
// executions it was lost from and the first error the driver gave.
func (g *grader) lostSummary(execs []record.Entry) []Lost {
	var out []Lost
	idx := map[string]int{}
	for _, e := range execs {
		seen := map[string]bool{}
		for i := range e.BackendErrors {
			be := &e.BackendErrors[i]
			if record.BackendRefused(e.Execution, *be) || accountingError(e, be) || seen[be.Backend] {
				continue
			}
			seen[be.Backend] = true
			if i, ok := idx[be.Backend]; ok {
				out[i].Targets++
				continue
			}
			idx[be.Backend] = len(out)
			out = append(out, Lost{Node: g.node(be.Backend), Addr: be.Backend, Targets: 1, Error: oneLine(be.Error)})
		}
	}
	return out
}

// window finds the dispatch bracket of the run and the span of the
// engines' first due times.
func window(execs []record.Entry) Window {
	w := Window{ExecutionCount: len(execs)}
	var t0, t1, e0, e1 time.Time
	for _, e := range execs {
		if s, err := record.ParseTime(e.StartedAt); err == nil && !s.IsZero() {
			w.StartedExecs++
			if t0.IsZero() || s.Before(t0) {
				t0 = s
			}
		}
		if s, err := record.ParseTime(e.EndedAt); err == nil && !s.IsZero() && s.After(t1) {
			t1 = s
		}
		for _, r := range e.Results {
			if s, err := record.ParseTime(r.StartedAt); err == nil && !s.IsZero() {
				if e0.IsZero() || s.Before(e0) {
					e0 = s
				}
				if s.After(e1) {
					e1 = s
				}
			}
		}
	}
	f := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(record.TimeFormat)
	}
	w.Dispatched, w.Ended, w.EnginesFirst, w.EnginesLast = f(t0), f(t1), f(e0), f(e1)
	return w
}

// judgeLog compares the driver's log with the executions. It returns the
// number of executions the log says were not run, a run failure when the
// log shows skipped executions the report does not, and a note otherwise.
func judgeLog(ls *LogSummary, name string, execs []record.Entry) (int, *RunFailure, string) {
	if name == "" {
		name = DirLog
	}
	notRun := map[string]bool{}
	for _, e := range execs {
		if e.NotRun {
			notRun[e.Label] = true
		}
	}
	k := ls.NotRun
	if len(ls.Skipped) > k {
		k = len(ls.Skipped)
	}
	var unseen []string
	for _, l := range ls.Skipped {
		if !notRun[l] {
			unseen = append(unseen, l)
		}
	}
	said := fmt.Sprintf("%d SKIP line(s)", ls.SkipLines)
	if ls.Summary != "" {
		said += fmt.Sprintf(", summary %q", ls.Summary)
	}
	switch {
	case len(unseen) > 0 || k > len(notRun):
		why := fmt.Sprintf("the driver's log shows %d execution(s) not run (%s), the graded run %d", k, said, len(notRun))
		if len(unseen) > 0 {
			why += "; skipped there and not marked not_run here: " + record.ListSome(unseen)
		}
		return k, &RunFailure{Name: name, Reason: why + ": a stage that was skipped was not tested"}, ""
	case k > 0:
		return k, nil, fmt.Sprintf("%s agrees on the executions not run: %s", name, said)
	case ls.Summary == "":
		return k, nil, fmt.Sprintf("%s has no summary line (\"N/M executions passed\"): it could not witness executions not run", name)
	}
	return k, nil, ""
}

// lostAt says when a lost node's partial result ends and what it had
// counted by then: "at +41s, 369 answered 2xx before". The offset runs
// from the node's started_at to its counted_until; without both, its
// elapsed_ms (which the driver sets to the same span).
func lostAt(r *record.BackendResult) string {
	ms := r.ElapsedMs
	from, err1 := time.Parse(time.RFC3339Nano, r.StartedAt)
	until, err2 := time.Parse(time.RFC3339Nano, r.CountedUntil)
	if err1 == nil && err2 == nil && !until.Before(from) {
		ms = until.Sub(from).Milliseconds()
	}
	return fmt.Sprintf("at +%ss, %d answered 2xx before", fmtMsAsS(ms), r.Counters[record.HTTP2xx])
}
