package driver

import (
	"errors"
	"fmt"
	"strings"
	"time"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// baseExecution fills the fields every execution carries, run or not.
func baseExecution(sc *scenarioRun, ex *execRun) record.Execution {
	return record.Execution{
		Label:      ex.label,
		Scenario:   sc.name,
		Pool:       sc.pool,
		Rate:       ex.rate,
		PerBackend: ex.perBackend,
		DurationMs: ex.duration.Milliseconds(),
		RampMs:     ex.ramp.Milliseconds(),
		DNS:        sc.dns,
		Backends:   append([]string{}, sc.backends...),
	}
}

// notRun is an execution that was never started.
func notRun(sc *scenarioRun, ex *execRun, why string) record.Execution {
	e := baseExecution(sc, ex)
	e.NotRun = true
	e.Error = "not run: " + why
	return e
}

// refusal describes a stage an engine refused at its cap.
type refusal struct {
	backend string
	cap     uint32 // 0 when the engine did not say
	need    int    // executions the stage starts on every backend
	err     error
	// early says the driver refused the stage itself before starting any
	// of it, from the cap the engine's Info gave; over lists every
	// backend whose cap is below the need.
	early bool
	over  []string
}

// capRefusal refuses a stage before it starts when it starts more
// executions at once than a backend's cap (from the engines' Info): such a
// stage can never run whole, and starting it would send load that is then
// cancelled. Nil when every cap fits or is not known.
func (r *runner) capRefusal(sc *scenarioRun, st *stageRun) *refusal {
	need := len(st.execs)
	var rf *refusal
	for _, b := range sc.backends {
		c, ok := r.caps[b]
		if !ok || need <= int(c) {
			continue
		}
		if rf == nil {
			rf = &refusal{backend: b, cap: c, need: need, early: true,
				err: fmt.Errorf("the engine's Info gives its cap as %d concurrent executions", c)}
		}
		rf.over = append(rf.over, b)
	}
	return rf
}

// refusedEarly is the report entry of an execution of a stage that
// capRefusal refused: nothing of it started on any backend.
func refusedEarly(sc *scenarioRun, ex *execRun, rf *refusal) record.Execution {
	e := baseExecution(sc, ex)
	e.Refused = record.RefusedExecutionCap
	e.Error = rf.executionError()
	for _, b := range rf.over {
		e.BackendErrors = append(e.BackendErrors, record.BackendError{
			Backend: b,
			Kind:    record.KindRefused,
			Error:   fmt.Sprintf("refused before the start: the engine is at %s (%v)", rf.capText(), rf.err),
			Refused: record.RefusedExecutionCap,
		})
	}
	e.FailureReasons = []string{e.Error}
	return e
}

func (rf *refusal) capText() string {
	if rf.cap == 0 {
		return "its cap of concurrent executions"
	}
	return fmt.Sprintf("its cap of %d concurrent executions", rf.cap)
}

// executionError is the error of every execution of a refused stage.
func (rf *refusal) executionError() string {
	var b strings.Builder
	if rf.early {
		fmt.Fprintf(&b, "backend %s is at %s, and this stage starts %d at once on every backend, one per target; none of the stage was started. Raise the engine's --max-concurrent-executions to at least %d",
			rf.backend, rf.capText(), rf.need, rf.need)
	} else {
		fmt.Fprintf(&b, "backend %s refused a start because the engine is at %s, and this stage starts %d at once on every backend, one per target; the executions of the stage that had started were cancelled. Raise the engine's --max-concurrent-executions to at least %d",
			rf.backend, rf.capText(), rf.need, rf.need)
	}
	switch {
	case rf.cap != 0 && int(rf.cap) < rf.need:
		b.WriteString(": this stage does not fit the cap even on an idle engine")
	case rf.cap != 0:
		b.WriteString(", or keep other runs off the engine: the stage fits the cap only when nothing else runs on it")
	}
	fmt.Fprintf(&b, " (%v)", rf.err)
	return b.String()
}

// backendError is the backend_errors entry of a refusing backend.
func (rf *refusal) backendError(c *call) record.BackendError {
	return record.BackendError{
		Backend: c.backend,
		Kind:    record.KindRefused,
		Error:   fmt.Sprintf("refused the start: the engine is at %s (%v)", rf.capText(), c.err),
		Refused: record.RefusedExecutionCap,
	}
}

// notRunAfter is why the stages after a refused one are not run.
func (rf *refusal) notRunAfter(stage string) string {
	return fmt.Sprintf("%s was refused because the engine on backend %s was at %s, and the stages after a refused one are not attempted",
		stage, rf.backend, rf.capText())
}

// verdict builds the report entry of one execution of a finished stage.
func (r *runner) verdict(sc *scenarioRun, ex *execRun, out *stageOutcome, rf *refusal) record.Execution {
	e := baseExecution(sc, ex)
	e.StartedAt = out.dispatched.UTC().Format(record.TimeFormat)
	ended := out.dispatched
	var failures []string
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }

	calls := out.calls[ex]
	var longest time.Duration
	totals := map[string]uint64{}
	for _, c := range calls {
		if c.endedAt.After(ended) {
			ended = c.endedAt
		}
		bes := r.backendErrors(c, rf)
		if br, ok := r.rejoinedResult(c); ok {
			// Its engine came back: one result for the node, its gap
			// named; the requests due in the gap fail the execution.
			e.Results = append(e.Results, br)
			for k, v := range br.Counters {
				totals[k] += v
			}
			if d := time.Duration(br.ElapsedMs) * time.Millisecond; d > longest && !br.Partial {
				longest = d
			}
			bes = append(bes, accounting(br)...)
			for _, g := range br.GapUnsent {
				fail("backend %s (%s): %s: %d requests due from %s to %s were not sent (the engine at %s took up the rest)",
					c.backend, c.backendName, g.Why, g.Count, g.From, g.To, g.Backend)
			}
		} else if c.result != nil {
			br := backendResult(c)
			e.Results = append(e.Results, br)
			for k, v := range br.Counters {
				totals[k] += v
			}
			if d := c.result.GetElapsed().AsDuration(); d > longest {
				longest = d
			}
			bes = append(bes, accounting(br)...)
		} else if br, ok := c.tl.partial(c); ok && (c.state == lost || c.state == silent) {
			// What a lost engine had counted stays in the report, marked
			// partial; its backend error below still fails the node.
			e.Results = append(e.Results, br)
			for k, v := range br.Counters {
				totals[k] += v
			}
			bes = append(bes, accounting(br)...)
		}
		for _, be := range bes {
			e.BackendErrors = append(e.BackendErrors, be)
			fail("backend %s: %s", be.Backend, be.Error)
		}
	}
	e.EndedAt = ended.UTC().Format(record.TimeFormat)
	e.ElapsedMs = ended.Sub(out.dispatched).Milliseconds()
	if len(totals) > 0 {
		e.Totals = totals
	}

	switch {
	case rf != nil:
		e.Refused = record.RefusedExecutionCap
		e.Error = rf.executionError()
		failures = append([]string{e.Error}, failures...)
	case interrupted(out.calls[ex]):
		e.Error = "execution cancelled: the run was interrupted (SIGINT or SIGTERM); it is not judged"
		failures = append([]string{e.Error}, failures...)
	case len(e.Results) == 0:
		fail("no backend answered, so no threshold could be judged")
	case len(ex.thresholds) == 0 && totals["benchmark.http_2xx"] == 0:
		// Nothing judges it, and nothing succeeded: passing it would pass
		// a run in which every request failed.
		fail("no threshold judges this execution, and none of its requests got a 2xx")
	default:
		for _, t := range ex.thresholds {
			if t.Pool() {
				pass, actual := t.EvalPool(totals, longest)
				e.Thresholds = append(e.Thresholds, record.Threshold{Expr: t.Expr, Scope: "pool", Pass: pass, Actual: actual})
				if !pass {
					fail("threshold %s failed on the pool: actual %s", t.Expr, actual)
				}
				continue
			}
			for _, br := range e.Results {
				if br.Partial {
					continue // no histograms: its backend error judges it
				}
				pass, actual := t.EvalBackend(br.Statistics)
				e.Thresholds = append(e.Thresholds, record.Threshold{Expr: t.Expr, Scope: br.Backend, Pass: pass, Actual: actual})
				if !pass {
					fail("threshold %s failed on backend %s: actual %s", t.Expr, br.Backend, actual)
				}
			}
		}
	}
	e.FailureReasons = failures
	e.Failures = record.FailuresOf(e.Results)
	e.Pass = len(failures) == 0
	return e
}

// backendErrors says how a backend failed an execution, if it did: one
// entry per kind. A result that was kept may carry several (a late one
// that also stalled); the words of each begin as they always have, for
// readers that predate the kind.
func (r *runner) backendErrors(c *call, rf *refusal) []record.BackendError {
	o := r.opts
	one := func(k record.Kind, format string, args ...any) []record.BackendError {
		return []record.BackendError{{Backend: c.backend, Kind: k, Error: fmt.Sprintf(format, args...)}}
	}
	switch c.state {
	case refused:
		if rf == nil {
			rf = &refusal{backend: c.backend}
		}
		return []record.BackendError{rf.backendError(c)}
	case lost:
		return one(record.KindLost, "lost: %v", c.err)
	case rejected:
		return one(record.KindRejected, "rejected: the engine refused the request: %v", c.err)
	case silent:
		switch c.cancelWhy {
		case cancelRefusal:
			return one(record.KindSilent, "silent: no answer within %v of the cancel that stopped its refused stage; the engine is silent (frozen or partitioned)", o.CancelWait)
		case cancelInterrupt:
			return one(record.KindSilent, "silent: no answer within %v of the cancel that stopped the interrupted run; the engine is silent (frozen or partitioned)", o.InterruptWait)
		}
		return one(record.KindSilent, "silent: no answer within %v of its deadline (%s): not in the answer window, nor after the cancel; the engine is silent (frozen or partitioned)",
			o.AnswerWindow+o.CancelWait, c.deadline.UTC().Format(record.TimeFormat))
	case answered:
		var out []record.BackendError
		if c.cancelWhy == cancelDeadline {
			out = append(out, one(record.KindLate, "it missed its deadline (%s) and was cancelled; it answered with what it had",
				c.deadline.UTC().Format(record.TimeFormat))...)
		}
		limit := c.ex.duration + c.ex.timeout + o.Drain
		if el := c.result.GetElapsed().AsDuration(); el > limit {
			out = append(out, one(record.KindStalled, "it stalled: its result took %v, past the planned %v + timeout %v + drain %v",
				el.Round(time.Millisecond), c.ex.duration, c.ex.timeout, o.Drain)...)
		}
		if c.result.GetCancelled() && c.cancelWhy == notCancelled {
			out = append(out, one(record.KindCancelled, "the engine cancelled the execution before its planned end")...)
		}
		return out
	}
	return nil
}

// accounting checks the law every result of this project's engine keeps,
// planned = unsent + the outcome classes, and names a result that breaks
// it: requests counted nowhere, or twice.
func accounting(br record.BackendResult) []record.BackendError {
	var ae *record.AccountingError
	if !errors.As(br.Conserves(), &ae) {
		return nil
	}
	return []record.BackendError{{Backend: br.Backend, Kind: record.KindAccounting, Error: ae.Error()}}
}

// backendResult copies an engine's Result into the report.
func backendResult(c *call) record.BackendResult {
	res := c.result
	br := record.BackendResult{
		Backend:     c.backend,
		BackendName: c.backendName,
		ElapsedMs:   res.GetElapsed().AsDuration().Milliseconds(),
		Planned:     res.GetPlanned(),
		Unsent:      res.GetUnsent(),
		Cancelled:   res.GetCancelled(),
		Counters:    map[string]uint64{},
	}
	if br.Planned == 0 {
		br.Planned = c.ex.planned[c.backend]
	}
	if ts := res.GetStartedAt(); ts != nil && ts.IsValid() {
		br.StartedAt = ts.AsTime().UTC().Format(record.TimeFormat)
	}
	for k, v := range res.GetCounters() {
		// An engine may send zero counters; the report omits them, as an
		// absent counter reads zero.
		if v != 0 {
			br.Counters[k] = v
		}
	}
	for _, s := range res.GetStatistics() {
		if br.Statistics == nil {
			br.Statistics = map[string]record.Statistic{}
		}
		br.Statistics[s.GetId()] = statistic(s)
	}
	return br
}

func statistic(s *enginev1.Statistic) record.Statistic {
	return record.Statistic{
		Count:  s.GetCount(),
		Unit:   s.GetUnit(),
		Mean:   s.GetMean(),
		Pstdev: s.GetPstdev(),
		Min:    float64(s.GetMin()),
		Max:    float64(s.GetMax()),
		P50:    float64(s.GetP50()),
		P90:    float64(s.GetP90()),
		P99:    float64(s.GetP99()),
		P999:   float64(s.GetP999()),
	}
}

// interrupted reports whether the run's interrupt cancelled any of the
// calls; an execution that had finished everywhere before it is judged.
func interrupted(calls []*call) bool {
	for _, c := range calls {
		if c.cancelWhy == cancelInterrupt {
			return true
		}
	}
	return false
}
