package record

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShares(t *testing.T) {
	const max = math.MaxUint64
	split := func(rate uint64, shares ...uint64) *Split { return &Split{Rate: rate, Shares: shares} }
	tests := []struct {
		name    string
		rate    uint64
		weights []uint64
		unit    uint64
		want    []uint64
		// On a refusal:
		first        int
		whole        bool
		step         uint64
		below, above *Split
	}{
		{name: "soak shape", rate: 60, weights: []uint64{3, 3, 3, 3, 3, 3, 1, 1}, unit: 1, want: []uint64{9, 9, 9, 9, 9, 9, 3, 3}},
		{name: "one weight", rate: 13, weights: []uint64{7}, unit: 1, want: []uint64{13}},
		{name: "unit divides every share", rate: 120, weights: []uint64{3, 1}, unit: 3, want: []uint64{90, 30}},
		{name: "thirds of 100", rate: 100, weights: []uint64{1, 1, 1}, unit: 1,
			first: 0, whole: false, step: 3, below: split(99, 33, 33, 33), above: split(102, 34, 34, 34)},
		{name: "whole but not a multiple of the unit", rate: 60, weights: []uint64{3, 1}, unit: 2,
			first: 0, whole: true, step: 8, below: split(56, 42, 14), above: split(64, 48, 16)},
		{name: "a later share fails first", rate: 6, weights: []uint64{2, 1}, unit: 4,
			first: 1, whole: true, step: 12, above: split(12, 8, 4)},
		{name: "below the step has no lower split", rate: 2, weights: []uint64{1, 1, 1}, unit: 1,
			first: 0, whole: false, step: 3, above: split(3, 1, 1, 1)},
		{name: "common factor of the weights", rate: 30, weights: []uint64{6, 4, 2}, unit: 1,
			want: []uint64{15, 10, 5}},
		{name: "prime weights", rate: 100, weights: []uint64{7, 11, 13}, unit: 3,
			first: 0, whole: false, step: 93, below: split(93, 21, 33, 39), above: split(186, 42, 66, 78)},
		{name: "prime unit", rate: 62, weights: []uint64{1, 1}, unit: 31,
			want: []uint64{31, 31}},
		{name: "prime unit refused", rate: 61, weights: []uint64{1, 1}, unit: 31,
			first: 0, whole: false, step: 62, above: split(62, 31, 31)},
		{name: "huge weights", rate: 4, weights: []uint64{max, max}, unit: 1, want: []uint64{2, 2}},
		{name: "huge weights refused", rate: 3, weights: []uint64{max, max}, unit: 1,
			first: 0, whole: false, step: 2, below: split(2, 1, 1), above: split(4, 2, 2)},
		{name: "huge rate", rate: max, weights: []uint64{2, 1}, unit: 1, want: []uint64{max / 3 * 2, max / 3}},
		{name: "huge rate refused", rate: max - 1, weights: []uint64{2, 1}, unit: 1,
			first: 0, whole: false, step: 3, below: split(max-3, (max-3)/3*2, (max-3)/3), above: split(max, max/3*2, max/3)},
		{name: "no split above within 64 bits", rate: 1<<63 + 1, weights: []uint64{1}, unit: 1 << 63,
			first: 0, whole: true, step: 1 << 63, below: split(1<<63, 1<<63)},
		{name: "huge unit", rate: 5, weights: []uint64{1}, unit: max,
			first: 0, whole: true, step: max, above: split(max, max)},
		{name: "step beyond 64 bits", rate: 5, weights: []uint64{1, 1}, unit: max,
			first: 0, whole: false, step: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Shares(tc.rate, tc.weights, tc.unit)
			if tc.want != nil {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("shares (-want +got):\n%s", diff)
				}
				return
			}
			var se *ShareError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (shares %v), want a *ShareError", err, got)
			}
			if got != nil {
				t.Errorf("shares %v with the error", got)
			}
			want := &ShareError{Rate: tc.rate, Weights: tc.weights, Unit: tc.unit, First: tc.first, Whole: tc.whole,
				Step: tc.step, Below: tc.below, Above: tc.above}
			if diff := cmp.Diff(want, se); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSharesInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rate    uint64
		weights []uint64
		unit    uint64
	}{
		{"no weights", 60, nil, 1},
		{"zero weight", 60, []uint64{1, 0}, 1},
		{"only zero weights", 60, []uint64{0, 0}, 1},
		{"zero unit", 60, []uint64{1}, 0},
		{"zero rate", 0, []uint64{1}, 1},
	} {
		_, err := Shares(tc.rate, tc.weights, tc.unit)
		var se *ShareError
		if !errors.Is(err, ErrShareInput) || errors.As(err, &se) {
			t.Errorf("%s: error %v, want ErrShareInput and no *ShareError", tc.name, err)
		}
	}
}

func TestShareErrorText(t *testing.T) {
	_, err := Shares(100, []uint64{1, 1, 1}, 1)
	want := "rate 100 over weights 1:1:1 does not split into whole multiples of 1: share 0 is 100/3; nearest rates that split: 99 or 102"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// bruteSplits says whether every share of rate is a whole multiple of
// unit, straight from the definition.
func bruteSplits(rate uint64, weights []uint64, unit uint64) bool {
	var sum uint64
	for _, w := range weights {
		sum += w
	}
	for _, w := range weights {
		if rate*w%sum != 0 || rate*w/sum%unit != 0 {
			return false
		}
	}
	return true
}

// FuzzShares compares the calculator with a brute-force search on small
// inputs: the same verdict, the same shares, the same first failing share,
// and nearest rates that split with nothing closer between them and the
// asked rate.
func FuzzShares(f *testing.F) {
	f.Add(uint16(60), uint8(1), []byte{3, 3, 3, 3, 3, 3, 1, 1})
	f.Add(uint16(100), uint8(1), []byte{1, 1, 1})
	f.Add(uint16(60), uint8(2), []byte{3, 1})
	f.Add(uint16(2), uint8(1), []byte{1, 1, 1})
	f.Add(uint16(100), uint8(3), []byte{7, 11, 13})
	f.Add(uint16(1), uint8(0), []byte{1})
	f.Add(uint16(0), uint8(1), []byte{1})
	f.Add(uint16(5), uint8(1), []byte{})
	f.Add(uint16(5), uint8(1), []byte{2, 0})
	f.Fuzz(func(t *testing.T, rate16 uint16, unit8 uint8, ws []byte) {
		if len(ws) > 8 {
			ws = ws[:8]
		}
		rate, unit := uint64(rate16), uint64(unit8)
		weights := make([]uint64, len(ws))
		bad := rate == 0 || unit == 0 || len(ws) == 0
		for i, w := range ws {
			weights[i] = uint64(w)
			bad = bad || w == 0
		}
		got, err := Shares(rate, weights, unit)
		if bad {
			if !errors.Is(err, ErrShareInput) {
				t.Fatalf("Shares(%d, %v, %d) = %v, %v; want ErrShareInput", rate, weights, unit, got, err)
			}
			return
		}
		var sum uint64
		for _, w := range weights {
			sum += w
		}
		if bruteSplits(rate, weights, unit) {
			if err != nil {
				t.Fatalf("Shares(%d, %v, %d): %v; it splits", rate, weights, unit, err)
			}
			for i, w := range weights {
				if got[i] != rate*w/sum {
					t.Fatalf("Shares(%d, %v, %d) = %v", rate, weights, unit, got)
				}
			}
			return
		}
		var se *ShareError
		if !errors.As(err, &se) {
			t.Fatalf("Shares(%d, %v, %d) = %v, %v; want a *ShareError", rate, weights, unit, got, err)
		}
		first, whole := -1, false
		for i, w := range weights {
			if rate*w%sum != 0 {
				first = i
				break
			}
			if rate*w/sum%unit != 0 {
				first, whole = i, true
				break
			}
		}
		if se.First != first || se.Whole != whole {
			t.Fatalf("Shares(%d, %v, %d): first failing %d (whole %v), want %d (%v)", rate, weights, unit, se.First, se.Whole, first, whole)
		}
		// unit × sum always splits, so the search above is bounded.
		var below, above uint64
		for r := rate - 1; r >= 1; r-- {
			if bruteSplits(r, weights, unit) {
				below = r
				break
			}
		}
		for r := rate + 1; r <= rate+unit*sum; r++ {
			if bruteSplits(r, weights, unit) {
				above = r
				break
			}
		}
		check := func(what string, s *Split, want uint64) {
			if want == 0 {
				if s != nil {
					t.Fatalf("Shares(%d, %v, %d): %s %+v, want none", rate, weights, unit, what, s)
				}
				return
			}
			if s == nil || s.Rate != want {
				t.Fatalf("Shares(%d, %v, %d): %s %+v, want rate %d", rate, weights, unit, what, s, want)
			}
			for i, w := range weights {
				if s.Shares[i] != want*w/sum {
					t.Fatalf("Shares(%d, %v, %d): %s shares %v", rate, weights, unit, what, s.Shares)
				}
			}
		}
		check("below", se.Below, below)
		check("above", se.Above, above)
		if se.Step == 0 || above%se.Step != 0 || (below > 0 && above-below != se.Step) {
			t.Fatalf("Shares(%d, %v, %d): step %d for splits %d and %d", rate, weights, unit, se.Step, below, above)
		}
	})
}
