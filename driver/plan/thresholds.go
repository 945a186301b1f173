package plan

import "github.com/sortie-soak/sortie/driver/threshold"

// ThresholdsFor returns the thresholds judged on the executions of target
// t: the scenario's (its own, the defaults' or the plan's), less those that
// a threshold of t replaces, followed by t's own in the order written.
//
// A target threshold replaces every scenario threshold on the same value
// (the same kind and counter, or statistic and field) that bounds it from a
// side the target's bounds too: < and <= bound it from above, > and >=
// from below, == from both, and != only replaces !=. So for that target
//
//	rate:benchmark.http_2xx >= 17.82      replaces rate:benchmark.http_2xx >= 5.94
//	latency_2xx.p99 < 500ms               replaces latency_2xx.p99 <= 200ms
//	counter:benchmark.stream_resets <= 3  replaces counter:benchmark.stream_resets == 0
//
// and every other scenario threshold still applies. A target can raise or
// relax a bound for itself, but never drop one without writing its own.
func (s *Scenario) ThresholdsFor(t Target) []threshold.Threshold {
	if len(t.Thresholds) == 0 {
		return s.Thresholds
	}
	var out []threshold.Threshold
	for _, st := range s.Thresholds {
		if !replacedBy(st, t.Thresholds) {
			out = append(out, st)
		}
	}
	return append(out, t.Thresholds...)
}

// replacedBy reports whether one of own bounds the value st bounds from a
// side st bounds it.
func replacedBy(st threshold.Threshold, own []threshold.Threshold) bool {
	for _, o := range own {
		if o.Kind == st.Kind && o.Name == st.Name && o.Field == st.Field && sides(o.Op)&sides(st.Op) != 0 {
			return true
		}
	}
	return false
}

// The sides an operator bounds a value from.
const (
	above = 1 << iota
	below
	notEqual
)

func sides(op threshold.Op) int {
	switch op {
	case threshold.Lt, threshold.Le:
		return above
	case threshold.Gt, threshold.Ge:
		return below
	case threshold.Eq:
		return above | below
	}
	return notEqual
}
