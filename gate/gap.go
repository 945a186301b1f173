package gate

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// NodeGap is a time a node had no engine (a result's gap_unsent: its
// engine was lost and an engine of the same node came back and took up the
// rest of the schedule), with the node's counts outside it. On a Node it is
// one target's; in the Verdict, the node's over every target it ran.
type NodeGap struct {
	Node string `json:"node"`
	Addr string `json:"addr"`
	// FromMs and ToMs bound the gap, in ms from the node's started_at
	// (the due time of its request 0).
	FromMs int64 `json:"from_ms"`
	ToMs   int64 `json:"to_ms"`
	// Why is the gap's why ("engine restarted").
	Why string `json:"why"`
	// NotSent counts the requests due in the gap; Answered the 2xx of the
	// requests due outside it, Outside how many were due outside it.
	NotSent  uint64 `json:"not_sent"`
	Answered uint64 `json:"answered_2xx"`
	Outside  uint64 `json:"outside"`
	// Targets is how many targets' gaps the node's line sums.
	Targets int `json:"targets"`
	// Nth is the gap's place among its result's gaps, from 0: an engine
	// that came back twice leaves two gaps in each target's result, and
	// the n-th of every target sums into the node's n-th line.
	Nth int `json:"nth,omitempty"`
}

// Line is the gap's line:
// "GAP node-b +41.2s..+63.0s (engine restarted): 198 requests not sent; 1,530/1,530 answered 2xx outside it".
func (g NodeGap) Line() string {
	why := g.Why
	if why == "" {
		why = "no reason given"
	}
	return fmt.Sprintf("GAP %s +%ss..+%ss (%s): %s requests not sent; %s/%s answered 2xx outside it",
		clip(g.Node), tenths(g.FromMs), tenths(g.ToMs), clip(why), thousands(g.NotSent), thousands(g.Answered), thousands(g.Outside))
}

// nodeGaps are the gaps of one node's result for one target, each with
// the result's counts outside every gap.
func nodeGaps(node, addr string, r *record.BackendResult) []NodeGap {
	if len(r.GapUnsent) == 0 {
		return nil
	}
	in, _ := r.GapCount()
	outside := uint64(0)
	if r.Planned > in {
		outside = r.Planned - in
	}
	start, _ := record.ParseTime(r.StartedAt)
	var out []NodeGap
	for i, g := range r.GapUnsent {
		ng := NodeGap{Node: node, Addr: addr, Why: g.Why, NotSent: g.Count,
			Answered: r.Counters[record.HTTP2xx], Outside: outside, Targets: 1, Nth: i}
		from, err1 := record.ParseTime(g.From)
		to, err2 := record.ParseTime(g.To)
		if err1 == nil && err2 == nil && !start.IsZero() {
			ng.FromMs, ng.ToMs = from.Sub(start).Milliseconds(), to.Sub(start).Milliseconds()
		}
		out = append(out, ng)
	}
	return out
}

// gapSummary sums every target's gaps per node and per place among its
// result's gaps (the first restart, the second...), in the order they
// first appear: the requests not sent and the counts outside add up, the
// times span the earliest start to the latest end.
func gapSummary(targets []Target) []NodeGap {
	var out []NodeGap
	idx := map[string]int{}
	for _, t := range targets {
		for _, n := range t.Nodes {
			for _, g := range n.Gaps {
				k := fmt.Sprintf("%s\x00%s\x00%s\x00%d", g.Node, g.Addr, g.Why, g.Nth)
				i, ok := idx[k]
				if !ok {
					idx[k] = len(out)
					out = append(out, g)
					continue
				}
				s := &out[i]
				s.FromMs, s.ToMs = min(s.FromMs, g.FromMs), max(s.ToMs, g.ToMs)
				s.NotSent = satAdd(s.NotSent, g.NotSent)
				s.Answered = satAdd(s.Answered, g.Answered)
				s.Outside = satAdd(s.Outside, g.Outside)
				s.Targets++
			}
		}
	}
	return out
}

// satAdd is a + b, held at the largest uint64 instead of wrapping round
// to a small number (the reader bounds each execution's sums, not the
// sum over every target).
func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// tenths formats ms as seconds with one decimal: 41200 -> "41.2".
func tenths(ms int64) string {
	return strconv.FormatFloat(time.Duration(ms*int64(time.Millisecond)).Seconds(), 'f', 1, 64)
}

// thousands formats n with a comma between every three digits: 1530 ->
// "1,530".
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
