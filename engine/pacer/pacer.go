// Package pacer says when each request of a worker is due.
//
// A Pacer is a pure function of the request index: it never reads a clock
// and never sleeps, so the schedule of request i does not depend on how long
// earlier requests took, and tables can test any rate exactly. The worker
// that owns a Pacer adds Offset(i) to its start instant and waits for that
// moment itself.
//
// Two shapes exist. Constant rate R for duration D: request i is due at
// i/R seconds, and R*D requests are planned. A linear ramp from 0 to R over
// T, then R until D: the cumulative count is N(t) = R*t^2/(2T) during the
// ramp, so request i < R*T/2 is due at sqrt(2*T*i/R), and request i after it
// at T + (i - R*T/2)/R; R*T/2 + R*(D-T) requests are planned. A count that
// the arithmetic cannot make whole is refused, never rounded.
package pacer

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Pacer is the schedule of one worker. The zero value is not usable; build
// one with New.
type Pacer struct {
	rate     uint64 // requests per second at full rate
	ramp     time.Duration
	duration time.Duration
	rampN    uint64 // requests due during the ramp, R*T/2
	planned  uint64
}

// New returns the schedule of a worker sending rate requests per second for
// duration, the first ramp of which rises linearly from 0 (ramp 0 means a
// constant rate). It refuses a zero rate, a non-positive duration, a ramp
// that is negative or longer than duration, and a planned count that is not
// a whole number.
func New(rate uint32, duration, ramp time.Duration) (Pacer, error) {
	var errs []error
	if rate == 0 {
		errs = append(errs, errors.New("rate must be at least 1 request per second"))
	}
	if duration <= 0 {
		errs = append(errs, fmt.Errorf("duration %v must be positive", duration))
	}
	if ramp < 0 {
		errs = append(errs, fmt.Errorf("ramp %v must not be negative", ramp))
	}
	if duration > 0 && ramp > duration {
		errs = append(errs, fmt.Errorf("ramp %v is longer than duration %v", ramp, duration))
	}
	if len(errs) > 0 {
		return Pacer{}, errors.Join(errs...)
	}
	p := Pacer{rate: uint64(rate), ramp: ramp, duration: duration}
	r := uint64(rate)
	// Ramp: R*T/2 requests, T in ns, so R*T_ns must divide by 2e9.
	rampN, ok := wholeDiv(r, uint64(ramp), 2e9)
	if !ok {
		return Pacer{}, fmt.Errorf("ramp of %v to %d/s plans %s requests, not a whole number", ramp, rate, ratio(r, uint64(ramp), 2e9))
	}
	hold := uint64(duration - ramp)
	holdN, ok := wholeDiv(r, hold, 1e9)
	if !ok {
		return Pacer{}, fmt.Errorf("%d/s for %v plans %s requests, not a whole number", rate, time.Duration(hold), ratio(r, hold, 1e9))
	}
	if rampN+holdN < rampN {
		return Pacer{}, fmt.Errorf("%d/s for %v plans more requests than can be counted", rate, duration)
	}
	p.rampN, p.planned = rampN, rampN+holdN
	return p, nil
}

// wholeDiv returns a*b/d when it is a whole number that fits in 64 bits.
func wholeDiv(a, b, d uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	if hi >= d {
		return 0, false
	}
	q, rem := bits.Div64(hi, lo, d)
	return q, rem == 0
}

// ratio formats a*b/d for an error message.
func ratio(a, b, d uint64) string {
	return fmt.Sprintf("%g", float64(a)*float64(b)/float64(d))
}

// Planned is the number of requests the worker sends: indexes 0 to
// Planned()-1.
func (p Pacer) Planned() uint64 { return p.planned }

// Rate is the full rate in requests per second.
func (p Pacer) Rate() uint32 { return uint32(p.rate) }

// Duration is how long requests are sent.
func (p Pacer) Duration() time.Duration { return p.duration }

// Offset is when request i is due, counted from the start. It is exact for
// a constant rate (integer arithmetic, truncated to the nanosecond) and
// within a nanosecond or so during a ramp (a square root). Offsets never
// decrease with i. An index at or past Planned is due at the same rule
// extended, which callers do not use.
func (p Pacer) Offset(i uint64) time.Duration {
	if p.rate == 0 {
		return 0
	}
	if i < p.rampN {
		// t_ns = sqrt(2 * T_ns * 1e9 * i / R); the product overflows 64 bits
		// for long ramps, so it is computed in float64 (53 bits of mantissa
		// keep it within a nanosecond up to hours).
		t := math.Sqrt(2 * float64(p.ramp) * 1e9 * float64(i) / float64(p.rate))
		d := time.Duration(t)
		if d > p.ramp {
			d = p.ramp
		}
		return d
	}
	return p.ramp + constOffset(i-p.rampN, p.rate)
}

// constOffset is i*1e9/rate ns, exact in 128-bit arithmetic.
func constOffset(i, rate uint64) time.Duration {
	hi, lo := bits.Mul64(i, 1e9)
	if hi >= rate {
		return time.Duration(math.MaxInt64)
	}
	q, _ := bits.Div64(hi, lo, rate)
	if q > math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(q)
}

// Last is when the last planned request is due; 0 when none is planned.
func (p Pacer) Last() time.Duration {
	if p.planned == 0 {
		return 0
	}
	return p.Offset(p.planned - 1)
}

// Before is how many requests are due before offset t: the least i with
// Offset(i) >= t, at most Planned. It is defined by Offset itself (a binary
// search over the index), so it agrees with the schedule exactly, ramp
// included; the timeline counts the requests due in an interval with it.
func (p Pacer) Before(t time.Duration) uint64 {
	lo, hi := uint64(0), p.planned
	for lo < hi {
		mid := lo + (hi-lo)/2
		if p.Offset(mid) < t {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
