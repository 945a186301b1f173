package record

// Share arithmetic: the one calculator that splits a rate over weighted
// targets, for the plan renderer (a per-node rate over a targets file, in
// multiples of the concurrency) and the plan compiler (a scenario's rate
// over its targets, in multiples of backends × workers, or of workers when
// the rate is per backend).
//
// Target i's share of a rate R over weights w is R × w_i / Σw. Every share
// is whole and a multiple of the unit U exactly when U × Σw divides R × w_i
// for every i, that is when it divides R × gcd(w). As Σw / gcd(w) and
// w_i / gcd(w) have no common factor left, that holds exactly when R is a
// multiple of
//
//	step = U × Σw / gcd(w)
//
// so the rates that split are the multiples of step, and the nearest ones
// around a rate that does not are the multiples of step on either side of
// it. Nothing is rounded (principle 3 of the architecture): a rate that
// does not split is refused with those two. The arithmetic is done in big
// integers, so no weight, unit or sum can overflow into a wrong answer.

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// ErrShareInput is wrapped by the error of a split that cannot be asked
// for: no weights, a weight of 0, a unit of 0 or a rate of 0.
var ErrShareInput = errors.New("not a rate to split")

// Split is a rate and the shares it splits into, in the order of the
// weights.
type Split struct {
	Rate   uint64
	Shares []uint64
}

// ShareError refuses a rate whose shares are not all whole multiples of the
// unit. It says which share fails first and carries the step every rate
// that splits is a multiple of, and the nearest such rates below and above.
type ShareError struct {
	Rate    uint64
	Weights []uint64
	Unit    uint64
	// First is the index of the first weight whose share fails; Whole says
	// that share is a whole number (so it fails as not a multiple of Unit).
	First int
	Whole bool
	// Step is Unit × Σweights / gcd(weights): the rates that split are its
	// multiples. It is 0 when it exceeds 64 bits, and then no rate does.
	Step uint64
	// Below and Above are the nearest rates below and above Rate that
	// split, with their shares; nil when there is none (no multiple of Step
	// between 0 and Rate, or none above Rate within 64 bits).
	Below, Above *Split
}

func (e *ShareError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rate %d over weights %s does not split into whole multiples of %d: share %d is %s",
		e.Rate, joinUints(e.Weights, ":"), e.Unit, e.First, e.Exact()[e.First].RatString())
	switch {
	case e.Below != nil && e.Above != nil:
		fmt.Fprintf(&b, "; nearest rates that split: %d or %d", e.Below.Rate, e.Above.Rate)
	case e.Below != nil:
		fmt.Fprintf(&b, "; nearest rate that splits: %d", e.Below.Rate)
	case e.Above != nil:
		fmt.Fprintf(&b, "; smallest rate that splits: %d", e.Above.Rate)
	default:
		b.WriteString("; no rate within 64 bits splits")
	}
	return b.String()
}

// Exact returns each share of Rate as the exact fraction Rate × w_i / Σw,
// for messages that show what the shares would have been.
func (e *ShareError) Exact() []*big.Rat {
	sum := sumBig(e.Weights)
	out := make([]*big.Rat, len(e.Weights))
	for i, w := range e.Weights {
		num := new(big.Int).Mul(new(big.Int).SetUint64(e.Rate), new(big.Int).SetUint64(w))
		out[i] = new(big.Rat).SetFrac(num, sum)
	}
	return out
}

// Shares splits rate over weights: share i is rate × weights[i] / Σweights.
// Every share must be whole and a multiple of unit; otherwise the split is
// refused with a *ShareError naming the nearest rates that split. A split
// that cannot be asked for (no weights, a zero weight, unit or rate) is an
// error wrapping ErrShareInput.
func Shares(rate uint64, weights []uint64, unit uint64) ([]uint64, error) {
	switch {
	case len(weights) == 0:
		return nil, fmt.Errorf("%w: no weights", ErrShareInput)
	case unit == 0:
		return nil, fmt.Errorf("%w: a unit of 0", ErrShareInput)
	case rate == 0:
		return nil, fmt.Errorf("%w: a rate of 0", ErrShareInput)
	}
	for i, w := range weights {
		if w == 0 {
			return nil, fmt.Errorf("%w: weight %d is 0", ErrShareInput, i)
		}
	}
	step := shareStep(weights, unit)
	r := new(big.Int).SetUint64(rate)
	if new(big.Int).Rem(r, step).Sign() == 0 {
		return sharesOf(r, weights), nil
	}
	e := &ShareError{Rate: rate, Weights: append([]uint64(nil), weights...), Unit: unit}
	e.First, e.Whole = firstFailing(r, weights, unit)
	if step.IsUint64() {
		e.Step = step.Uint64()
	}
	lo := new(big.Int).Quo(r, step)
	lo.Mul(lo, step)
	hi := new(big.Int).Add(lo, step)
	if lo.Sign() > 0 {
		e.Below = &Split{Rate: lo.Uint64(), Shares: sharesOf(lo, weights)}
	}
	if hi.IsUint64() {
		e.Above = &Split{Rate: hi.Uint64(), Shares: sharesOf(hi, weights)}
	}
	return nil, e
}

// shareStep is unit × Σweights / gcd(weights), the rate every exact split
// is a multiple of.
func shareStep(weights []uint64, unit uint64) *big.Int {
	g := new(big.Int)
	for _, w := range weights {
		g.GCD(nil, nil, g, new(big.Int).SetUint64(w))
	}
	step := new(big.Int).Quo(sumBig(weights), g)
	return step.Mul(step, new(big.Int).SetUint64(unit))
}

// sharesOf divides r by weight; r is a multiple of the step, so every
// share is whole, and none exceeds r, so each fits where r does.
func sharesOf(r *big.Int, weights []uint64) []uint64 {
	sum := sumBig(weights)
	out := make([]uint64, len(weights))
	for i, w := range weights {
		q := new(big.Int).Mul(r, new(big.Int).SetUint64(w))
		out[i] = q.Quo(q, sum).Uint64()
	}
	return out
}

// firstFailing finds the first share of r that is not a whole multiple of
// unit, and whether it is whole.
func firstFailing(r *big.Int, weights []uint64, unit uint64) (int, bool) {
	sum := sumBig(weights)
	u := new(big.Int).SetUint64(unit)
	for i, w := range weights {
		num := new(big.Int).Mul(r, new(big.Int).SetUint64(w))
		share, rem := new(big.Int).QuoRem(num, sum, new(big.Int))
		if rem.Sign() != 0 {
			return i, false
		}
		if new(big.Int).Rem(share, u).Sign() != 0 {
			return i, true
		}
	}
	// Unreachable when r is not a multiple of the step.
	return 0, true
}

func sumBig(xs []uint64) *big.Int {
	s := new(big.Int)
	for _, x := range xs {
		s.Add(s, new(big.Int).SetUint64(x))
	}
	return s
}

func joinUints(xs []uint64, sep string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(parts, sep)
}
