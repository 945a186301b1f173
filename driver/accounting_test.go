package driver

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// TestAccounting: a result that breaks planned = unsent + Σ outcome
// classes, from an engine on loopback, is named in the report itself: a
// backend error of kind accounting with the numbers and the node, which
// fails the execution. The result is kept, so the counters can be read.
func TestAccounting(t *testing.T) {
	for _, tc := range []struct {
		name     string
		counters map[string]uint64
		unsent   uint64
		err      string // "" when the result conserves
	}{
		{name: "one request missing", counters: map[string]uint64{record.HTTP2xx: 1349},
			err: "accounting: 1349 outcomes for 1350 planned on node-b"},
		{name: "one request counted twice", counters: map[string]uint64{record.HTTP2xx: 1350, record.HTTP5xx: 1},
			err: "accounting: 1351 outcomes for 1350 planned on node-b"},
		{name: "unsent after a cancel, one missing", counters: map[string]uint64{record.HTTP2xx: 999}, unsent: 350,
			err: "accounting: 999 outcomes + 350 unsent for 1350 planned on node-b"},
		// Detail counters overlap the classes by design and are not added.
		{name: "whole, with detail counters", counters: map[string]uint64{record.HTTP2xx: 1346, record.StreamResets: 4,
			record.ResetsBeforeHeaders: 4, record.StreamResetsPrefix + record.ReasonRemoteReset: 4}},
		{name: "whole after a cancel", counters: map[string]uint64{record.HTTP2xx: 1000}, unsent: 350},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSim()
			answer := func(counters map[string]uint64, unsent uint64) func(a *act) error {
				return func(a *act) error {
					if err := a.at(scriptDuration); err != nil {
						return err
					}
					return a.send(&enginev1.Result{
						ExecutionId: a.req.GetExecutionId(), BackendName: a.s.backendName(),
						Counters: counters, Planned: 1350, Unsent: unsent, Cancelled: unsent > 0,
						StartedAt: a.req.GetStartTime(), Elapsed: durationpb.New(scriptDuration),
					})
				}
			}
			good := serveScripted(t, &scripted{sim: s, name: "node-a", behave: answer(map[string]uint64{record.HTTP2xx: 1350}, 0)})
			bad := serveScripted(t, &scripted{sim: s, name: "node-b", behave: answer(tc.counters, tc.unsent)})
			e, lines := runScripted(t, s, scriptOptions(), context.Background(), good, bad)
			t.Logf("lines:\n%s", lines)
			if _, ok := backendErrorOf(e, good); ok {
				t.Errorf("the conserving backend has an error: %+v", e.BackendErrors)
			}
			if _, ok := backendOf(t, e, bad); !ok {
				t.Fatalf("the result of %s was not kept", bad)
			}
			var acc []record.BackendError
			for _, be := range e.BackendErrors {
				if be.Kind == record.KindAccounting {
					acc = append(acc, be)
				}
			}
			if tc.err == "" {
				if len(acc) > 0 {
					t.Errorf("backend errors %+v for a result that conserves", acc)
				}
				// Cancelled by the engine fails it, for another reason.
				if want := tc.unsent == 0; e.Pass != want {
					t.Errorf("pass = %v, want %v (%q)", e.Pass, want, e.FailureReasons)
				}
				return
			}
			want := []record.BackendError{{Backend: bad, Kind: record.KindAccounting, Error: tc.err}}
			if d := cmp.Diff(want, acc); d != "" {
				t.Errorf("accounting errors (-want +got):\n%s", d)
			}
			if e.Pass {
				t.Error("an execution whose result breaks the accounting passed")
			}
			if reason := "backend " + bad + ": " + tc.err; !slices.Contains(e.FailureReasons, reason) {
				t.Errorf("failure_reasons %q lack %q", e.FailureReasons, reason)
			}
		})
	}
}
