package render

import (
	"fmt"
	"io"
	"strconv"
	"strings"
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
// the shares would no longer add up to the rate (principle 3).
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
	weights := make([]int, len(targets))
	for i, t := range targets {
		if t.Weight < 1 || t.Weight > maxWeight {
			return nil, fmt.Errorf("target %q: weight %d must be 1 to %d", t.Name, t.Weight, maxWeight)
		}
		weights[i] = t.Weight
	}
	total := sum(weights)
	shares := make([]Share, len(targets))
	for i, t := range targets {
		num := rate * t.Weight
		problem := ""
		switch {
		case num%total != 0:
			problem = fmt.Sprintf("would get %d x %d/%d = %s rps", rate, t.Weight, total,
				strconv.FormatFloat(float64(num)/float64(total), 'f', 3, 64))
		case (num/total)%concurrency != 0:
			problem = fmt.Sprintf("would get %d rps, not a multiple of concurrency %d", num/total, concurrency)
		}
		if problem != "" {
			return nil, &ShareError{
				Rate: rate, Concurrency: concurrency, Weights: weights,
				Target: t.Name, Problem: problem,
				Nearest: nearest(weights, rate, concurrency),
			}
		}
		shares[i] = Share{Target: t, RPS: num / total}
	}
	return shares, nil
}

// nearest returns the nearest rates below and above rate that split exactly.
// A share rate·w/S is a whole multiple of c for every w exactly when rate is
// a multiple of c·S / gcd(c·S, gcd(weights)).
func nearest(weights []int, rate, concurrency int) []Split {
	g := 0
	for _, w := range weights {
		g = gcd(g, w)
	}
	cs := concurrency * sum(weights)
	step := cs / gcd(cs, g)
	var out []Split
	split := func(r int) Split {
		s := Split{Rate: r}
		for _, w := range weights {
			s.Shares = append(s.Shares, r*w/sum(weights))
		}
		return s
	}
	if below := rate / step * step; below > 0 {
		out = append(out, split(below))
	}
	if above := (rate/step + 1) * step; above <= MaxRate {
		out = append(out, split(above))
	}
	return out
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

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
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
