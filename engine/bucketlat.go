package engine

import "math/bits"

// A bucket's latency summary comes from bucketLat, a log-linear histogram
// small enough to keep one per open bucket and cheap enough to fill on the
// hot path: values below 64 ns have a code each, and every power of two
// above is split in 64 equal steps. A percentile is reported as the
// highest value of the step that holds it, capped at the exact maximum, so
// it is never below the exact percentile and at most 1/64 (1.6 %) above
// it. The result's HdrHistograms stay the precise record; a bucket's
// summary is for finding when something happened.
const (
	latSubBits = 6
	latSub     = 1 << latSubBits
	// latCodes covers 0 to histMax (under 2^42 ns): the linear codes,
	// then 64 per power of two from 2^6 to 2^41.
	latCodes = (42 - latSubBits + 1) * latSub
)

// latCode is the step of v, 0 <= v <= histMax.
func latCode(v int64) int {
	if v < latSub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - 1 - latSubBits
	return (shift+1)<<latSubBits + int(v>>shift) - latSub
}

// latUpper is the highest value of step code.
func latUpper(code int) int64 {
	if code < latSub {
		return int64(code)
	}
	shift := code>>latSubBits - 1
	mant := int64(code&(latSub-1) + latSub)
	return (mant+1)<<shift - 1
}

// bucketLat is the latency of one bucket's 2xx responses while the bucket
// is open. lo and hi bound the steps in use, so a percentile and a reset
// walk only those.
type bucketLat struct {
	counts [latCodes]uint32
	n      uint32
	max    int64
	lo, hi int
}

// record adds v, clamped to 0..histMax as the result's histograms do.
func (h *bucketLat) record(v int64) {
	v = min(max(v, 0), histMax)
	c := latCode(v)
	h.counts[c]++
	if h.n == 0 {
		h.lo, h.hi = c, c
	} else {
		h.lo, h.hi = min(h.lo, c), max(h.hi, c)
	}
	h.n++
	h.max = max(h.max, v)
}

// merge adds o to h.
func (h *bucketLat) merge(o *bucketLat) {
	if o == nil || o.n == 0 {
		return
	}
	for c := o.lo; c <= o.hi; c++ {
		h.counts[c] += o.counts[c]
	}
	if h.n == 0 {
		h.lo, h.hi = o.lo, o.hi
	} else {
		h.lo, h.hi = min(h.lo, o.lo), max(h.hi, o.hi)
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile is the step of the value of rank ceil(pct/100 x n), the exact
// percentile's step; -1 when h is empty.
func (h *bucketLat) quantile(pct uint64) int {
	if h.n == 0 {
		return -1
	}
	rank := max((uint64(h.n)*pct+99)/100, 1)
	var seen uint64
	for c := h.lo; c <= h.hi; c++ {
		seen += uint64(h.counts[c])
		if seen >= rank {
			return c
		}
	}
	return h.hi
}

// reset empties h for another bucket.
func (h *bucketLat) reset() {
	if h.n > 0 {
		clear(h.counts[h.lo : h.hi+1])
	}
	h.n, h.max, h.lo, h.hi = 0, 0, 0, 0
}

// latValue is what a bucket reports for a percentile in step code: the
// step's highest value, never above the exact maximum.
func latValue(code int, maxV int64) int64 {
	if code < 0 {
		return 0
	}
	return min(latUpper(code), maxV)
}
