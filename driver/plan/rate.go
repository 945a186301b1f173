package plan

// Rate arithmetic. An engine worker sends a whole number of requests per
// second, so a scenario's rate R must split exactly: over the backends when
// it is the pool's rate (B of them), over the targets by weight, and over the
// workers (W, the concurrency). Target t's worker rate is
//
//	R × w_t / (ΣW × B × W)
//
// which is whole for every target exactly when R is a multiple of
// (Σw / gcd(w)) × B × W: the weights divided by their common factor have no
// common factor left, so no smaller step works. That split is record.Shares,
// the calculator the plan renderer uses too, with the unit B × W; this file
// only words its refusals. A worker at rate r for a duration D sends r × D
// requests, whole when D is a multiple of 1 s / gcd(r, 1e9 ns); a ramp over
// T sends r × T / 2. Everything is computed in big integers: plans are
// outside input.

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// splitErr is a refused split, at the value to change.
type splitErr struct {
	at  loc
	msg string
}

// unit is the planned load of one target in one stage.
type unit struct {
	// workerRate is each worker's rate, the engine request's rate.
	workerRate uint32
	// rate is the report's rate: per backend when per_backend, else the
	// pool's.
	rate float64
	// planned is the requests each backend sends.
	planned uint64
}

// split computes every stage's units (stage by target) over n backends, or
// the errors that refuse it. n counts only when the rate is the pool's.
func (s *Scenario) split(n int) ([][]unit, []splitErr) {
	type stageSpec struct {
		rate           uint32
		duration, ramp time.Duration
		rateAt, durAt  loc
	}
	var specs []stageSpec
	switch s.Executor.Type {
	case Staircase:
		for i, st := range s.Executor.Stages {
			var p stagePos
			if i < len(s.pos.stages) {
				p = s.pos.stages[i]
			}
			specs = append(specs, stageSpec{rate: st.Rate, duration: st.Duration, rateAt: p.rate, durAt: p.duration})
		}
	default:
		specs = append(specs, stageSpec{rate: s.Executor.Rate, duration: s.Executor.Duration, ramp: s.Executor.RampTime, rateAt: s.pos.rate, durAt: s.pos.duration})
	}
	backends := uint64(n)
	if s.Executor.PerBackend || backends == 0 {
		backends = 1
	}
	var out [][]unit
	var errs []splitErr
	for _, sp := range specs {
		rates, msg := splitRate(uint64(sp.rate), s.Targets, backends, uint64(s.Concurrency))
		if msg != "" {
			errs = append(errs, splitErr{at: sp.rateAt, msg: msg})
			continue
		}
		counts, cerrs := s.counts(rates, sp.duration, sp.ramp, sp.durAt)
		if len(cerrs) > 0 {
			errs = append(errs, cerrs...)
			continue
		}
		units := make([]unit, len(rates))
		for i, r := range rates {
			planned := new(big.Int).Mul(big.NewInt(int64(s.Concurrency)), new(big.Int).SetUint64(counts[i]))
			if !planned.IsUint64() {
				errs = append(errs, splitErr{at: sp.durAt, msg: "the plan asks more requests than can be counted"})
				continue
			}
			units[i] = unit{
				workerRate: uint32(r),
				rate:       float64(r) * float64(s.Concurrency) * float64(backends),
				planned:    planned.Uint64(),
			}
		}
		out = append(out, units)
	}
	return out, errs
}

// splitRate returns each target's worker rate, or why rate does not split
// and the nearest rates that do. The pool's (or, per backend, each
// backend's) share of a target must be a whole multiple of backends ×
// workers; record.Shares decides and finds the nearest rates, and this words
// its refusal in the plan's terms: per backend, per target, per worker.
func splitRate(rate uint64, targets []Target, backends, workers uint64) ([]uint64, string) {
	weights := make([]uint64, len(targets))
	for i, t := range targets {
		weights[i] = uint64(t.Weight)
	}
	// backends is a count of addresses and workers at most MaxConcurrency:
	// their product is far from overflow.
	shares, err := record.Shares(rate, weights, backends*workers)
	var se *record.ShareError
	switch {
	case err == nil:
		out := make([]uint64, len(shares))
		for i, s := range shares {
			out[i] = s / (backends * workers)
		}
		return out, ""
	case !errors.As(err, &se):
		return nil, err.Error()
	}
	return nil, shareRefusal(se, backends, workers)
}

// shareRefusal says why se.Rate does not split over the backends, the
// weights and the workers, in that order, and names the nearest rates that
// do with what each gives per backend, per target and per worker.
func shareRefusal(se *record.ShareError, backends, workers uint64) string {
	rate, n := se.Rate, len(se.Weights)
	r, b := new(big.Int).SetUint64(rate), new(big.Int).SetUint64(backends)
	exact := se.Exact()
	// over writes the exact shares of the rate divided by div.
	over := func(div uint64) string {
		parts := make([]string, n)
		for i, x := range exact {
			q := new(big.Rat).Quo(x, new(big.Rat).SetInt(new(big.Int).SetUint64(div)))
			parts[i] = ratString(q.Num(), q.Denom())
		}
		return group(parts)
	}
	perBackendNote := ""
	if backends > 1 {
		perBackendNote = " (" + ratString(r, b) + " per backend)"
	}
	_, notWhole := record.Shares(rate, se.Weights, backends)
	var why string
	switch {
	case backends > 1 && rate%backends != 0:
		why = fmt.Sprintf("rate %d over %d backends is %s per backend, not a whole number", rate, backends, ratString(r, b))
	case n > 1 && notWhole != nil:
		why = fmt.Sprintf("rate %d%s over weights %s gives shares %s, not whole numbers", rate, perBackendNote, joinWeights(se.Weights), over(backends))
	case n == 1:
		why = fmt.Sprintf("rate %d%s over concurrency %d is %s per worker, not a whole number", rate, perBackendNote, workers, ratString(r, new(big.Int).Mul(b, new(big.Int).SetUint64(workers))))
	default:
		why = fmt.Sprintf("rate %d%s gives shares %s, which over concurrency %d are %s per worker, not whole numbers", rate, perBackendNote, over(backends), workers, over(backends*workers))
	}

	// describe writes what a rate that splits gives: whole numbers all.
	describe := func(x *record.Split) string {
		var parts []string
		if backends > 1 {
			parts = append(parts, fmt.Sprintf("%d per backend", x.Rate/backends))
		}
		each := func(div uint64) string {
			ps := make([]string, n)
			for i, s := range x.Shares {
				ps[i] = fmt.Sprint(s / div)
			}
			return group(ps)
		}
		if n > 1 {
			parts = append(parts, each(backends))
		}
		if workers > 1 {
			parts = append(parts, each(backends*workers)+" per worker")
		}
		if len(parts) == 0 {
			return ""
		}
		return " (" + strings.Join(parts, ", ") + ")"
	}
	switch lo, hi := se.Below, se.Above; {
	case lo != nil && hi != nil:
		return fmt.Sprintf("%s; nearest whole splits: rate %d%s or rate %d%s", why, lo.Rate, describe(lo), hi.Rate, describe(hi))
	case hi != nil:
		return fmt.Sprintf("%s; the smallest whole split is rate %d%s", why, hi.Rate, describe(hi))
	case lo != nil:
		return fmt.Sprintf("%s; the largest whole split is rate %d%s", why, lo.Rate, describe(lo))
	default:
		return why + "; no rate an engine can count splits"
	}
}

// joinWeights writes weights as the plan's ratio: 9:9:3.
func joinWeights(ws []uint64) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprint(w)
	}
	return strings.Join(parts, ":")
}

// counts returns the requests each worker of each target sends over
// duration (ramp included), or why one is not a whole count.
func (s *Scenario) counts(rates []uint64, duration, ramp time.Duration, durAt loc) ([]uint64, []splitErr) {
	second := big.NewInt(int64(time.Second))
	hold := duration - ramp
	// The duration (after the ramp) must be a multiple of every target's
	// step; the ramp, of every target's step for r×T/2.
	holdStep, rampStep := big.NewInt(1), big.NewInt(1)
	for _, r := range rates {
		rb := new(big.Int).SetUint64(r)
		holdStep = lcm(holdStep, new(big.Int).Quo(second, new(big.Int).GCD(nil, nil, rb, second)))
		two := new(big.Int).Mul(second, big.NewInt(2))
		rampStep = lcm(rampStep, new(big.Int).Quo(two, new(big.Int).GCD(nil, nil, rb, two)))
	}
	var errs []splitErr
	example := func(check func(r uint64) bool) (uint64, string) {
		for i, r := range rates {
			if !check(r) {
				if s.Targets[i].Name != "" {
					return r, " (target " + s.Targets[i].Name + ")"
				}
				return r, ""
			}
		}
		return rates[0], ""
	}
	if ramp > 0 && new(big.Int).Rem(big.NewInt(int64(ramp)), rampStep).Sign() != 0 {
		r, which := example(func(r uint64) bool {
			return new(big.Int).Rem(new(big.Int).Mul(new(big.Int).SetUint64(r), big.NewInt(int64(ramp))), big.NewInt(2*int64(time.Second))).Sign() == 0
		})
		lo, hi := nearest(ramp, rampStep)
		errs = append(errs, splitErr{at: s.pos.ramp, msg: fmt.Sprintf(
			"ramp_time %v to %d/s per worker%s plans %s requests during the ramp (rate × ramp_time / 2), not a whole count; %s",
			ramp, r, which, durCount(r, ramp, 2), nearestText("ramp_time", lo, hi, 0))})
	}
	if new(big.Int).Rem(big.NewInt(int64(hold)), holdStep).Sign() != 0 {
		r, which := example(func(r uint64) bool {
			return new(big.Int).Rem(new(big.Int).Mul(new(big.Int).SetUint64(r), big.NewInt(int64(hold))), second).Sign() == 0
		})
		lo, hi := nearest(hold, holdStep)
		what := fmt.Sprintf("duration %v", duration)
		if ramp > 0 {
			what = fmt.Sprintf("the %v after the ramp (duration %v less ramp_time %v)", hold, duration, ramp)
		}
		errs = append(errs, splitErr{at: durAt, msg: fmt.Sprintf(
			"%s at %d/s per worker%s plans %s requests, not a whole count; %s",
			what, r, which, durCount(r, hold, 1), nearestText("duration", lo, hi, ramp))})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	out := make([]uint64, len(rates))
	for i, r := range rates {
		rb := new(big.Int).SetUint64(r)
		n := new(big.Int).Mul(rb, big.NewInt(int64(hold)))
		n.Quo(n, second)
		m := new(big.Int).Mul(rb, big.NewInt(int64(ramp)))
		m.Quo(m, new(big.Int).Mul(second, big.NewInt(2)))
		n.Add(n, m)
		if !n.IsUint64() {
			return nil, []splitErr{{at: durAt, msg: "the plan asks more requests than can be counted"}}
		}
		out[i] = n.Uint64()
	}
	return out, nil
}

// nearest returns the multiples of step around d; lo is 0 when none is
// below.
func nearest(d time.Duration, step *big.Int) (lo, hi time.Duration) {
	s := step.Int64()
	lo = d / time.Duration(s) * time.Duration(s)
	return lo, lo + time.Duration(s)
}

// nearestText names the nearest durations, offset by ramp for a duration
// that includes one.
func nearestText(what string, lo, hi, ramp time.Duration) string {
	if lo <= 0 {
		return fmt.Sprintf("the shortest %s that works is %v", what, hi+ramp)
	}
	return fmt.Sprintf("nearest %s that works: %v or %v", what, lo+ramp, hi+ramp)
}

// durCount formats r × d / div requests, in decimal.
func durCount(r uint64, d time.Duration, div int64) string {
	num := new(big.Int).Mul(new(big.Int).SetUint64(r), big.NewInt(int64(d)))
	return ratString(num, big.NewInt(div*int64(time.Second)))
}

func lcm(a, b *big.Int) *big.Int {
	g := new(big.Int).GCD(nil, nil, a, b)
	out := new(big.Int).Mul(a, b)
	return out.Quo(out, g)
}

// ratString formats num/den in decimal: exact when it terminates within six
// places, else six places and an ellipsis.
func ratString(num, den *big.Int) string {
	q := new(big.Rat).SetFrac(num, den)
	if q.IsInt() {
		return q.Num().String()
	}
	// Six decimals, or as many more as a tiny count needs to show a digit
	// that is not zero (1ns at 10/s plans 0.00000001 requests, not "0.…").
	prec := 6
	s := q.FloatString(prec)
	for strings.Trim(s, "-0.") == "" && prec < 60 {
		prec += 3
		s = q.FloatString(prec)
	}
	exact, _ := new(big.Rat).SetString(s)
	s = strings.TrimRight(s, "0")
	if exact == nil || exact.Cmp(q) != 0 {
		return s + "…"
	}
	return s
}

// group writes a list of shares compactly, runs of equal values as value×n:
// 9×6+3×2.
func group(parts []string) string {
	var b strings.Builder
	for i := 0; i < len(parts); {
		j := i
		for j < len(parts) && parts[j] == parts[i] {
			j++
		}
		if i > 0 {
			b.WriteString("+")
		}
		b.WriteString(parts[i])
		if j-i > 1 {
			fmt.Fprintf(&b, "×%d", j-i)
		}
		i = j
	}
	return b.String()
}
