package gate

import (
	"math"
	"testing"

	"github.com/sortie-soak/sortie/record"
)

// The GAP line's numbers: offsets in seconds with one decimal from the
// node's start, counts with a comma every three digits.
func TestGapLine(t *testing.T) {
	for _, tt := range []struct {
		g    NodeGap
		want string
	}{
		{NodeGap{Node: "node-b", FromMs: 41200, ToMs: 63000, Why: record.GapRestarted, NotSent: 198, Answered: 1530, Outside: 1530},
			"GAP node-b +41.2s..+63.0s (engine restarted): 198 requests not sent; 1,530/1,530 answered 2xx outside it"},
		{NodeGap{Node: "node-c", FromMs: 7000, ToMs: 15049, Why: record.GapRestarted, NotSent: 1234567, Answered: 999, Outside: 1000},
			"GAP node-c +7.0s..+15.0s (engine restarted): 1,234,567 requests not sent; 999/1,000 answered 2xx outside it"},
		{NodeGap{Node: "node-d", ToMs: 100, NotSent: math.MaxUint64},
			"GAP node-d +0.0s..+0.1s (no reason given): 18,446,744,073,709,551,615 requests not sent; 0/0 answered 2xx outside it"},
	} {
		if got := tt.g.Line(); got != tt.want {
			t.Errorf("Line() = %q\nwant     %q", got, tt.want)
		}
	}
}

// A node's gaps over its targets sum into one line per node; a sum never
// wraps round to a small number.
func TestGapSummary(t *testing.T) {
	g := func(from, to int64, n, a, o uint64) NodeGap {
		return NodeGap{Node: "node-b", Addr: "10.0.2.6:8443", Why: record.GapRestarted, FromMs: from, ToMs: to, NotSent: n, Answered: a, Outside: o, Targets: 1}
	}
	targets := []Target{
		{Nodes: []Node{{Node: "node-a"}, {Node: "node-b", Gaps: []NodeGap{g(7000, 15000, 72, 198, 198)}}}},
		{Nodes: []Node{{Node: "node-b", Gaps: []NodeGap{g(6000, 15000, 24, 66, 66)}}}},
		{Nodes: []Node{{Node: "node-b", Gaps: []NodeGap{g(7000, 16000, math.MaxUint64, 0, 0)}}}},
	}
	got := gapSummary(targets)
	if len(got) != 1 {
		t.Fatalf("%d lines, want 1: %+v", len(got), got)
	}
	s := got[0]
	if s.FromMs != 6000 || s.ToMs != 16000 || s.NotSent != math.MaxUint64 || s.Answered != 264 || s.Outside != 264 || s.Targets != 3 {
		t.Errorf("summary %+v", s)
	}
}

// A node whose engine came back twice has two gaps in each target's
// result: each is its own line, the first restart's summed over the
// targets apart from the second's.
func TestGapSummaryTwoRestarts(t *testing.T) {
	r := func(gaps ...record.Gap) *record.BackendResult {
		return &record.BackendResult{StartedAt: "2026-03-02T10:00:00.000Z", Planned: 900, GapUnsent: gaps,
			Counters: map[string]uint64{record.HTTP2xx: 900 - gaps[0].Count - gaps[1].Count}}
	}
	gap := func(from, to string, n uint64) record.Gap {
		return record.Gap{From: "2026-03-02T10:00:" + from + ".000Z", To: "2026-03-02T10:00:" + to + ".000Z", Count: n, Why: record.GapRestarted}
	}
	targets := []Target{
		{Nodes: []Node{{Node: "node-b", Gaps: nodeGaps("node-b", "127.0.0.1:9", r(gap("06", "12", 180), gap("16", "22", 180)))}}},
		{Nodes: []Node{{Node: "node-b", Gaps: nodeGaps("node-b", "127.0.0.1:9", r(gap("07", "12", 150), gap("17", "23", 180)))}}},
	}
	got := gapSummary(targets)
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2: %+v", len(got), got)
	}
	want := []string{
		"GAP node-b +6.0s..+12.0s (engine restarted): 330 requests not sent; 1,110/1,110 answered 2xx outside it",
		"GAP node-b +16.0s..+23.0s (engine restarted): 360 requests not sent; 1,110/1,110 answered 2xx outside it",
	}
	for i, g := range got {
		if g.Line() != want[i] || g.Targets != 2 {
			t.Errorf("line %d: %q over %d targets\nwant     %q over 2", i, g.Line(), g.Targets, want[i])
		}
	}
}
