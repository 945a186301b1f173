package render

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sortie-soak/sortie/record"
)

// MaxRate bounds the per-node rate the renderer accepts, so that the share
// arithmetic stays far from overflow.
const MaxRate = 1_000_000

// MaxConcurrency bounds the workers per target per engine.
const MaxConcurrency = 1024

// Share is a target with the requests per second it gets on every node.
type Share struct {
	Target
	// RPS is rate × weight / Σweight, whole and a multiple of the
	// concurrency.
	RPS int
}

// ShareError refuses a rate the weights cannot split exactly. It names the
// first target whose share is not whole (or not a multiple of the
// concurrency) and the nearest rates that would split.
type ShareError struct {
	Rate        int
	Concurrency int
	Weights     []int
	// Target and Problem describe the first share that does not work.
	Target  string
	Problem string
	// Nearest are the nearest rates below and above Rate whose split is
	// exact, with their splits (one or two entries).
	Nearest []Split

	split *record.ShareError
}

// Unwrap returns the calculator's refusal, which carries the exact step.
func (e *ShareError) Unwrap() error {
	if e.split == nil {
		return nil
	}
	return e.split
}

// Split is a rate and the shares it splits into.
type Split struct {
	Rate   int
	Shares []int
}

func (e *ShareError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rps over weights %s (sum %d) does not split into whole shares: target %q %s",
		e.Rate, joinInts(e.Weights, ","), sum(e.Weights), e.Target, e.Problem)
	if len(e.Nearest) > 0 {
		b.WriteString("; nearest whole split")
		if len(e.Nearest) > 1 {
			b.WriteString("s")
		}
		b.WriteString(": ")
		for i, s := range e.Nearest {
			if i > 0 {
				b.WriteString(" or ")
			}
			fmt.Fprintf(&b, "--rate %d (%s)", s.Rate, SplitString(s.Shares))
		}
	}
	return b.String()
}

// ComputeShares splits rate (requests per second per node) over the targets
// by weight. Every share must be whole and a multiple of concurrency, or the
// split is refused with a *ShareError: the engine would otherwise round, and
// the shares would no longer add up to the rate (principle 3). The
// arithmetic is record.Shares; this words its refusal for a targets file.
func ComputeShares(targets []Target, rate, concurrency int) ([]Share, error) {
	if rate < 1 || rate > MaxRate {
		return nil, fmt.Errorf("rate %d must be 1 to %d", rate, MaxRate)
	}
	if concurrency < 1 || concurrency > MaxConcurrency {
		return nil, fmt.Errorf("concurrency %d must be 1 to %d", concurrency, MaxConcurrency)
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("no targets")
	}
	weights := make([]uint64, len(targets))
	for i, t := range targets {
		if t.Weight < 1 || t.Weight > maxWeight {
			return nil, fmt.Errorf("target %q: weight %d must be 1 to %d", t.Name, t.Weight, maxWeight)
		}
		weights[i] = uint64(t.Weight)
	}
	rps, err := record.Shares(uint64(rate), weights, uint64(concurrency))
	if err != nil {
		var se *record.ShareError
		if errors.As(err, &se) {
			return nil, shareError(targets, concurrency, se)
		}
		return nil, err
	}
	shares := make([]Share, len(targets))
	for i, t := range targets {
		shares[i] = Share{Target: t, RPS: int(rps[i])}
	}
	return shares, nil
}

// shareError words a refused split: the first target that does not get a
// whole multiple of the concurrency, and the nearest rates that split that
// the renderer accepts.
func shareError(targets []Target, concurrency int, se *record.ShareError) *ShareError {
	e := &ShareError{Rate: int(se.Rate), Concurrency: concurrency, Target: targets[se.First].Name, split: se}
	for _, w := range se.Weights {
		e.Weights = append(e.Weights, int(w))
	}
	w, total := e.Weights[se.First], sum(e.Weights)
	if se.Whole {
		e.Problem = fmt.Sprintf("would get %d rps, not a multiple of concurrency %d", e.Rate*w/total, concurrency)
	} else {
		e.Problem = fmt.Sprintf("would get %d x %d/%d = %s rps", e.Rate, w, total,
			strconv.FormatFloat(float64(e.Rate*w)/float64(total), 'f', 3, 64))
	}
	for _, s := range []*record.Split{se.Below, se.Above} {
		if s == nil || s.Rate > MaxRate {
			continue
		}
		sp := Split{Rate: int(s.Rate)}
		for _, x := range s.Shares {
			sp.Shares = append(sp.Shares, int(x))
		}
		e.Nearest = append(e.Nearest, sp)
	}
	return e
}

// SplitString writes shares compactly, grouping equal shares in order of
// first appearance: 9,9,9,9,9,9,3,3 is "9x6 + 3x2" (six targets at 9 rps,
// two at 3 rps).
func SplitString(shares []int) string {
	var order []int
	count := map[int]int{}
	for _, s := range shares {
		if count[s] == 0 {
			order = append(order, s)
		}
		count[s]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%dx%d", s, count[s])
	}
	return strings.Join(parts, " + ")
}

// WriteShares writes the share table, one `name<TAB>rps<TAB>url` line per
// target in file order: the format the gate and the harness read.
func WriteShares(w io.Writer, shares []Share) error {
	var b strings.Builder
	for _, s := range shares {
		fmt.Fprintf(&b, "%s\t%d\t%s\n", s.Name, s.RPS, s.URL)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func joinInts(xs []int, sep string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, sep)
}
