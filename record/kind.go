package record

import "strings"

// Kind is what happened to a backend that failed an execution: the typed
// form of BackendError.Error's first words.
type Kind string

// The kinds of backend errors.
const (
	// KindLost: its stream broke (engine killed, unreachable).
	KindLost Kind = "lost"
	// KindSilent: no answer in the window after its deadline, nor after
	// the cancel that followed (frozen or partitioned).
	KindSilent Kind = "silent"
	// KindRejected: the engine refused the request as invalid.
	KindRejected Kind = "rejected"
	// KindRefused: the engine refused the start at its execution cap.
	KindRefused Kind = "refused"
	// KindLate: it missed its deadline and was cancelled; it answered
	// with what it had.
	KindLate Kind = "late"
	// KindStalled: its result came past duration + timeout + drain.
	KindStalled Kind = "stalled"
	// KindCancelled: the engine cancelled the execution before its end.
	KindCancelled Kind = "cancelled"
	// KindAccounting: its result breaks planned = unsent + Σ outcomes.
	KindAccounting Kind = "accounting"
)

// KindOf returns the error's kind: its Kind field, or, for a report
// written before the field existed, the kind its words begin with (the
// driver of this project always began them so). Unknown words give "".
func KindOf(be BackendError) Kind {
	if be.Kind != "" {
		return be.Kind
	}
	if be.Refused == RefusedExecutionCap {
		return KindRefused
	}
	e := be.Error
	for _, w := range []struct {
		prefix string
		kind   Kind
	}{
		{"lost: ", KindLost},
		{"silent: ", KindSilent},
		{"rejected: ", KindRejected},
		{"refused the start", KindRefused},
		{"it missed its deadline", KindLate},
		{"it stalled", KindStalled},
		{"the engine cancelled", KindCancelled},
		{"accounting: ", KindAccounting},
	} {
		if strings.HasPrefix(e, w.prefix) {
			return w.kind
		}
	}
	return ""
}

// refusalWords is how a report from before the "refused" mark worded an
// execution refused at an engine's cap of concurrent executions.
const refusalWords = "refused a start because the engine is at"

// ExecutionRefused says an execution was refused at an engine's cap of
// concurrent executions: by its refused mark, or, in a report from before
// the mark existed, by the words of its error.
func ExecutionRefused(e Execution) bool {
	if e.Refused != "" {
		return e.Refused == RefusedExecutionCap
	}
	return strings.Contains(e.Error, refusalWords)
}

// BackendRefused says a backend error of the execution is an engine's
// refusal at its cap, not a failure of the backend: by its kind (KindOf),
// or, in a report from before the refused mark existed, because the
// execution was refused (every backend error of a refused execution was a
// refusal then).
func BackendRefused(e Execution, be BackendError) bool {
	return KindOf(be) == KindRefused || (e.Refused == "" && ExecutionRefused(e))
}
