package record

import "testing"

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		be   BackendError
		want Kind
	}{
		{BackendError{Kind: KindSilent, Error: "lost: words that disagree"}, KindSilent}, // the typed kind first
		{BackendError{Refused: RefusedExecutionCap, Error: "anything"}, KindRefused},
		{BackendError{Error: "lost: rpc error: code = Unavailable"}, KindLost},
		{BackendError{Error: "silent: no answer within 1m0s of its deadline"}, KindSilent},
		{BackendError{Error: "rejected: the engine refused the request: bad url"}, KindRejected},
		{BackendError{Error: "refused the start: the engine is at its cap of 2 concurrent executions"}, KindRefused},
		{BackendError{Error: "it missed its deadline (2026-03-02T10:02:30.910Z) and was cancelled; it answered with what it had"}, KindLate},
		{BackendError{Error: "it stalled: its result took 9m0s"}, KindStalled},
		{BackendError{Error: "the engine cancelled the execution before its planned end"}, KindCancelled},
		{BackendError{Error: "accounting: 1349 outcomes for 1350 planned on node-b"}, KindAccounting},
		{BackendError{Error: "the engine refused the start: at its cap of 2 concurrent executions"}, ""}, // the older stack's words
		{BackendError{Error: "engine went away"}, ""},
	} {
		if got := KindOf(tc.be); got != tc.want {
			t.Errorf("KindOf(%+v) = %q, want %q", tc.be, got, tc.want)
		}
	}
}

func TestRefusals(t *testing.T) {
	const words = "backend 10.0.1.5:8443 refused a start because the engine is at its cap of 2 concurrent executions"
	older := BackendError{Backend: "10.0.1.5:8443", Error: "the engine refused the start: at its cap of 2 concurrent executions"}
	lost := BackendError{Backend: "10.0.2.6:8443", Error: "lost: engine killed"}
	for _, tc := range []struct {
		name        string
		e           Execution
		be          BackendError
		exec, byBkd bool
	}{
		{"marked", Execution{Refused: RefusedExecutionCap, Error: "x"}, BackendError{Refused: RefusedExecutionCap}, true, true},
		{"marked, a lost backend beside", Execution{Refused: RefusedExecutionCap, Error: words}, lost, true, false},
		{"typed kind alone", Execution{Refused: RefusedExecutionCap}, BackendError{Kind: KindRefused}, true, true},
		{"an older report: the words of the execution", Execution{Error: words}, older, true, true},
		{"an older report: every backend error of a refused execution", Execution{Error: words}, lost, true, true},
		{"not refused", Execution{Error: "execution cancelled"}, lost, false, false},
		{"another mark is not the cap", Execution{Refused: "something_else", Error: words}, lost, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExecutionRefused(tc.e); got != tc.exec {
				t.Errorf("ExecutionRefused = %v, want %v", got, tc.exec)
			}
			if got := BackendRefused(tc.e, tc.be); got != tc.byBkd {
				t.Errorf("BackendRefused = %v, want %v", got, tc.byBkd)
			}
		})
	}
}
