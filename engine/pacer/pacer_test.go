package pacer

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestNewPlanned(t *testing.T) {
	tests := []struct {
		name     string
		rate     uint32
		duration time.Duration
		ramp     time.Duration
		planned  uint64
		err      string
	}{
		{name: "one per second", rate: 1, duration: time.Second, planned: 1},
		{name: "soak share", rate: 9, duration: 60 * time.Second, planned: 540},
		{name: "twenty for two seconds", rate: 20, duration: 2 * time.Second, planned: 40},
		{name: "sub-second whole", rate: 10, duration: 300 * time.Millisecond, planned: 3},
		{name: "ramp then hold", rate: 20, duration: 2 * time.Second, ramp: time.Second, planned: 30},
		{name: "ramp only", rate: 20, duration: time.Second, ramp: time.Second, planned: 10},
		{name: "huge rate", rate: math.MaxUint32, duration: time.Second, planned: math.MaxUint32},
		{name: "huge rate long", rate: math.MaxUint32, duration: 8 * time.Hour, planned: math.MaxUint32 * 8 * 3600},
		{name: "tiny duration huge rate", rate: 1_000_000_000, duration: time.Nanosecond, planned: 1},
		{name: "zero rate", rate: 0, duration: time.Second, err: "rate must be at least 1"},
		{name: "zero duration", rate: 1, duration: 0, err: "duration 0s must be positive"},
		{name: "negative duration", rate: 1, duration: -time.Second, err: "must be positive"},
		{name: "ramp too long", rate: 2, duration: time.Second, ramp: 2 * time.Second, err: "longer than duration"},
		{name: "negative ramp", rate: 2, duration: time.Second, ramp: -time.Second, err: "must not be negative"},
		{name: "fraction constant", rate: 3, duration: 500 * time.Millisecond, err: "1.5 requests, not a whole number"},
		{name: "fraction tiny", rate: 1, duration: time.Nanosecond, err: "not a whole number"},
		{name: "fraction ramp", rate: 3, duration: 2 * time.Second, ramp: time.Second, err: "ramp of 1s to 3/s plans 1.5 requests"},
		{name: "fraction hold after ramp", rate: 2, duration: 1250 * time.Millisecond, ramp: time.Second, err: "2/s for 250ms plans 0.5 requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.rate, tt.duration, tt.ramp)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("New() error = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			if got := p.Planned(); got != tt.planned {
				t.Errorf("Planned() = %d, want %d", got, tt.planned)
			}
		})
	}
}

func TestOffsetConstant(t *testing.T) {
	tests := []struct {
		rate uint32
		i    uint64
		want time.Duration
	}{
		{rate: 1, i: 0, want: 0},
		{rate: 1, i: 1, want: time.Second},
		{rate: 9, i: 1, want: 111_111_111},
		{rate: 9, i: 9, want: time.Second},
		{rate: 3, i: 2, want: 666_666_666},
		{rate: 50_000, i: 1, want: 20 * time.Microsecond},
		{rate: 50_000, i: 749_999, want: 14_999_980 * time.Microsecond},
		{rate: math.MaxUint32, i: 1, want: 0},
		{rate: math.MaxUint32, i: math.MaxUint32, want: time.Second},
		// 8 h at the largest rate: i*1e9 overflows 64 bits, the 128-bit
		// product does not.
		{rate: math.MaxUint32, i: math.MaxUint32 * 8 * 3600, want: 8 * time.Hour},
		{rate: 1, i: 9_223_372_036, want: 9_223_372_036 * time.Second},
		{rate: 1, i: 1 << 40, want: time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		p, err := New(tt.rate, time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Offset(tt.i); got != tt.want {
			t.Errorf("rate %d: Offset(%d) = %d, want %d", tt.rate, tt.i, got, tt.want)
		}
	}
}

func TestOffsetRamp(t *testing.T) {
	// 0 -> 20/s over 1 s, then 20/s for 1 s: 10 + 20 requests.
	p, err := New(20, 2*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		i    uint64
		want time.Duration
	}{
		{i: 0, want: 0},
		// sqrt(2*1*i/20) s
		{i: 1, want: time.Duration(math.Sqrt(0.1) * 1e9)},
		{i: 5, want: time.Duration(math.Sqrt(0.5) * 1e9)},
		{i: 9, want: time.Duration(math.Sqrt(0.9) * 1e9)},
		{i: 10, want: time.Second},
		{i: 11, want: time.Second + 50*time.Millisecond},
		{i: 29, want: time.Second + 950*time.Millisecond},
	}
	for _, tt := range tests {
		got := p.Offset(tt.i)
		if d := got - tt.want; d < -1 || d > 1 {
			t.Errorf("Offset(%d) = %d, want %d (±1ns)", tt.i, got, tt.want)
		}
	}
	if got, want := p.Last(), time.Second+950*time.Millisecond; got != want {
		t.Errorf("Last() = %v, want %v", got, want)
	}
}

func TestOffsetMonotonic(t *testing.T) {
	for _, c := range []struct {
		rate           uint32
		duration, ramp time.Duration
	}{
		{rate: 9, duration: time.Minute},
		{rate: 1000, duration: 10 * time.Second, ramp: 4 * time.Second},
		{rate: 7, duration: 8 * time.Hour, ramp: 2 * time.Hour},
		{rate: math.MaxUint32, duration: time.Hour, ramp: time.Hour},
	} {
		p, err := New(c.rate, c.duration, c.ramp)
		if err != nil {
			t.Fatal(err)
		}
		n := p.Planned()
		step := n/100_000 + 1
		prev := time.Duration(-1)
		for i := uint64(0); i < n; i += step {
			o := p.Offset(i)
			if o < prev {
				t.Fatalf("rate %d ramp %v: Offset(%d) = %v < previous %v", c.rate, c.ramp, i, o, prev)
			}
			if o > c.duration {
				t.Fatalf("rate %d: Offset(%d) = %v past duration %v", c.rate, i, o, c.duration)
			}
			prev = o
		}
		if last := p.Last(); last >= c.duration {
			t.Errorf("rate %d: Last() = %v, not before duration %v", c.rate, last, c.duration)
		}
	}
}

func BenchmarkOffset(b *testing.B) {
	p, _ := New(50_000, time.Hour, 10*time.Minute)
	var s time.Duration
	for i := 0; i < b.N; i++ {
		s += p.Offset(uint64(i))
	}
	_ = s
}

func TestBefore(t *testing.T) {
	mustNew := func(rate uint32, d, ramp time.Duration) Pacer {
		t.Helper()
		p, err := New(rate, d, ramp)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		p    Pacer
		t    time.Duration
		want uint64
	}{
		{"before the first", mustNew(9, time.Minute, 0), 0, 0},
		{"at the first", mustNew(9, time.Minute, 0), 1, 1},
		{"first second", mustNew(9, time.Minute, 0), time.Second, 9},
		{"just past a due time", mustNew(9, time.Minute, 0), time.Second + 1, 10},
		{"a due time is not before itself", mustNew(4, time.Second, 0), 250 * time.Millisecond, 1},
		{"past the last", mustNew(9, time.Minute, 0), time.Hour, 540},
		{"negative", mustNew(9, time.Minute, 0), -time.Second, 0},
		// Ramp 0 -> 20/s over 1 s: 10 requests due in it, at sqrt(i/10) s.
		{"ramp half", mustNew(20, 2*time.Second, time.Second), 500 * time.Millisecond, 3},
		{"ramp end", mustNew(20, 2*time.Second, time.Second), time.Second, 10},
		{"after the ramp", mustNew(20, 2*time.Second, time.Second), 1500 * time.Millisecond, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Before(tt.t); got != tt.want {
				t.Errorf("Before(%v) = %d, want %d", tt.t, got, tt.want)
			}
		})
	}
}

// Before agrees with Offset at every due time: the count before request
// i's due time is the first index due then.
func TestBeforeAgreesWithOffset(t *testing.T) {
	for _, p := range []struct {
		rate    uint32
		d, ramp time.Duration
	}{{7, 3 * time.Second, 0}, {20, 4 * time.Second, 2 * time.Second}, {1000, time.Second, 0}} {
		pc, err := New(p.rate, p.d, p.ramp)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(0); i < pc.Planned(); i++ {
			off := pc.Offset(i)
			first := i
			for first > 0 && pc.Offset(first-1) == off {
				first--
			}
			if got := pc.Before(off); got != first {
				t.Fatalf("rate %d ramp %v: Before(Offset(%d)=%v) = %d, want %d", p.rate, p.ramp, i, off, got, first)
			}
			if got := pc.Before(off + 1); got <= i {
				t.Fatalf("rate %d ramp %v: Before(Offset(%d)+1) = %d, want > %d", p.rate, p.ramp, i, got, i)
			}
		}
	}
}
