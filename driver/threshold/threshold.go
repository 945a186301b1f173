// Package threshold parses and judges the threshold expressions of a sortie
// plan.
//
// Three forms exist, as in the plans of the sortie + Nighthawk stack:
//
//	counter:benchmark.http_5xx == 0     a counter summed over the pool
//	rate:benchmark.http_2xx >= 5.94     that sum per second of the longest
//	                                    backend's elapsed time
//	latency_2xx.p99 < 200ms             a statistic field on every backend
//
// Operators are ==, !=, <, <=, > and >=. A statistic id without a dot gets
// the benchmark_http_client. prefix (latency_2xx means
// benchmark_http_client.latency_2xx); an id with a dot is taken as written.
// Statistic fields are mean, pstdev, min, max, p50, p90, p99, p99.9 and count.
// The value of a duration field is a duration (200ms, 1.5s, 250us) or a plain
// number of nanoseconds; count takes a plain number.
//
// Counter and rate thresholds are judged on the pool's totals: a counter the
// engines never reported reads 0, because an engine omits zero counters.
// Statistic thresholds are judged per backend: a statistic that is missing,
// or holds no samples, fails, because a latency bound that held on nothing
// proves nothing.
package threshold

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// Kind says what a threshold reads.
type Kind int

const (
	// Counter compares the pool's total of a counter.
	Counter Kind = iota + 1
	// Rate compares the pool's total of a counter per second of elapsed time.
	Rate
	// Statistic compares a field of a statistic on each backend.
	Statistic
)

// String returns the kind as a plan spells it.
func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Rate:
		return "rate"
	case Statistic:
		return "statistic"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Op is a comparison operator.
type Op int

// The comparison operators.
const (
	Eq Op = iota + 1 // ==
	Ne               // !=
	Lt               // <
	Le               // <=
	Gt               // >
	Ge               // >=
)

// String returns the operator as written in an expression.
func (o Op) String() string {
	switch o {
	case Eq:
		return "=="
	case Ne:
		return "!="
	case Lt:
		return "<"
	case Le:
		return "<="
	case Gt:
		return ">"
	case Ge:
		return ">="
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Holds reports whether "a op b" is true.
func (o Op) Holds(a, b float64) bool {
	switch o {
	case Eq:
		return a == b
	case Ne:
		return a != b
	case Lt:
		return a < b
	case Le:
		return a <= b
	case Gt:
		return a > b
	case Ge:
		return a >= b
	}
	return false
}

// StatisticPrefix is prepended to a statistic id written without a dot.
const StatisticPrefix = "benchmark_http_client."

// Fields lists the statistic fields a threshold may read, in the order the
// report lists them.
var Fields = []string{"count", "mean", "pstdev", "min", "max", "p50", "p90", "p99", "p99.9"}

// Threshold is one parsed expression.
type Threshold struct {
	// Expr is the expression as written in the plan.
	Expr string
	// Kind says what the threshold reads.
	Kind Kind
	// Name is the counter name (benchmark.http_5xx) for Counter and Rate, or
	// the full statistic id (benchmark_http_client.latency_2xx) for Statistic.
	Name string
	// Field is the statistic field (p99, mean, count, ...); empty otherwise.
	Field string
	// Op is the comparison.
	Op Op
	// Value is the right-hand side; a duration is in nanoseconds.
	Value float64
	// Duration says Value was written as a duration (200ms), so the
	// statistic it is compared with must be one of durations (unit ns).
	Duration bool
}

// Pool reports whether the threshold is judged on the pool's totals (counter
// and rate thresholds) rather than on each backend (statistics).
func (t Threshold) Pool() bool { return t.Kind == Counter || t.Kind == Rate }

// String returns the expression as written.
func (t Threshold) String() string { return t.Expr }

var (
	counterName = regexp.MustCompile(`^benchmark\.[a-z0-9_]+$`)
	statName    = regexp.MustCompile(`^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$`)
	reasonName  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// knownCounters are the counters an engine reports. A threshold on any other
// name would read 0 for ever and pass on nothing, so it is refused.
var knownCounters = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range record.Outcomes {
		m[c] = true
	}
	for _, c := range []string{
		record.PoolFailureLocal, record.PoolFailureRemote,
		record.ResetsBeforeHeaders, record.ResetsIncompleteBody,
		record.LateSends,
	} {
		m[c] = true
	}
	for _, c := range append(append(append([]string(nil), record.TCPDetails...), record.UDPDetails...), record.StreamDetails...) {
		m[c] = true
	}
	// gRPC unary: grpc_error and grpc_status.0..16 and .missing.
	m[record.GRPCError], m[record.GRPCStatusMissing] = true, true
	for code := 0; code <= record.GRPCMaxStatus; code++ {
		m[record.GRPCStatusPrefix+strconv.Itoa(code)] = true
	}
	return m
}()

func knownCounter(name string) bool {
	if knownCounters[name] {
		return true
	}
	// benchmark.stream_resets_<reason>: reasons are open-ended.
	reason, ok := strings.CutPrefix(name, record.StreamResetsPrefix)
	return ok && reasonName.MatchString(reason)
}

// Parse parses one threshold expression. Its errors do not repeat the
// expression; the caller adds where it was written.
func Parse(expr string) (Threshold, error) {
	t := Threshold{Expr: expr}
	lhs, op, rhs, err := split(expr)
	if err != nil {
		return Threshold{}, err
	}
	t.Op = op
	switch {
	case strings.HasPrefix(lhs, "counter:"), strings.HasPrefix(lhs, "rate:"):
		kind, name, _ := strings.Cut(lhs, ":")
		t.Kind = Counter
		if kind == "rate" {
			t.Kind = Rate
		}
		name = strings.TrimSpace(name)
		if !counterName.MatchString(name) {
			return Threshold{}, fmt.Errorf("%s: %q is not a counter name such as benchmark.http_5xx", kind, name)
		}
		if !knownCounter(name) {
			return Threshold{}, fmt.Errorf("%s: unknown counter %s: an engine never reports it, so it would read 0 for ever", kind, name)
		}
		t.Name = name
		v, err := number(rhs)
		if err != nil {
			return Threshold{}, fmt.Errorf("%s value: %w", kind, err)
		}
		t.Value = v
	case strings.Contains(lhs, ":"):
		kind, _, _ := strings.Cut(lhs, ":")
		return Threshold{}, fmt.Errorf("unknown threshold kind %q: want counter:<name>, rate:<name> or <statistic>.<field>", kind)
	default:
		id, field, err := statistic(lhs)
		if err != nil {
			return Threshold{}, err
		}
		t.Kind, t.Name, t.Field = Statistic, id, field
		if field == "count" {
			v, err := number(rhs)
			if err != nil {
				return Threshold{}, fmt.Errorf("count takes a plain number: %w", err)
			}
			t.Value = v
			break
		}
		v, isDur, err := durationOrNumber(rhs)
		if err != nil {
			return Threshold{}, fmt.Errorf("%s.%s value: %w", id, field, err)
		}
		t.Value, t.Duration = v, isDur
	}
	return t, nil
}

// split cuts "lhs op rhs" at the first operator character.
func split(expr string) (lhs string, op Op, rhs string, err error) {
	i := strings.IndexAny(expr, "=!<>")
	if i < 0 {
		return "", 0, "", errors.New("no comparison operator: want one of == != < <= > >=")
	}
	lhs = strings.TrimSpace(expr[:i])
	rest := expr[i:]
	switch {
	case strings.HasPrefix(rest, "=="):
		op, rest = Eq, rest[2:]
	case strings.HasPrefix(rest, "!="):
		op, rest = Ne, rest[2:]
	case strings.HasPrefix(rest, "<="):
		op, rest = Le, rest[2:]
	case strings.HasPrefix(rest, ">="):
		op, rest = Ge, rest[2:]
	case strings.HasPrefix(rest, "<"):
		op, rest = Lt, rest[1:]
	case strings.HasPrefix(rest, ">"):
		op, rest = Gt, rest[1:]
	default:
		return "", 0, "", fmt.Errorf("operator %q: want one of == != < <= > >=", rest[:1])
	}
	rhs = strings.TrimSpace(rest)
	if lhs == "" {
		return "", 0, "", fmt.Errorf("nothing before %s", op)
	}
	if rhs == "" {
		return "", 0, "", fmt.Errorf("no value after %s", op)
	}
	if strings.ContainsAny(rhs, "=!<>") {
		return "", 0, "", errors.New("more than one comparison operator")
	}
	return lhs, op, rhs, nil
}

// statistic splits "<id>.<field>". A field may hold a dot (p99.9), so the
// known fields are matched as suffixes, longest first.
func statistic(lhs string) (id, field string, err error) {
	best := ""
	for _, f := range Fields {
		if strings.HasSuffix(lhs, "."+f) && len(f) > len(best) {
			best = f
		}
	}
	if best == "" {
		return "", "", fmt.Errorf("%q: want counter:<name>, rate:<name> or <statistic>.<field> with field one of %s", lhs, strings.Join(Fields, ", "))
	}
	id = strings.TrimSuffix(lhs, "."+best)
	if !statName.MatchString(id) {
		return "", "", fmt.Errorf("%q is not a statistic id such as latency_2xx or benchmark_http_client.latency_2xx", id)
	}
	if !strings.Contains(id, ".") {
		id = StatisticPrefix + id
	}
	return id, best, nil
}

// number parses a plain, finite, non-negative number.
func number(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%s is negative; counts, rates and statistics never are", s)
	}
	return v, nil
}

// durationOrNumber parses a duration such as 200ms (to nanoseconds) or a
// plain number of nanoseconds.
func durationOrNumber(s string) (float64, bool, error) {
	if v, err := number(s); err == nil {
		return v, false, nil
	} else if _, perr := strconv.ParseFloat(s, 64); perr == nil {
		return 0, false, err // a number, but a negative one
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, false, fmt.Errorf("%q is neither a duration such as 200ms nor a number of nanoseconds", s)
	}
	if d < 0 {
		return 0, false, fmt.Errorf("%s is negative; statistics never are", s)
	}
	return float64(d), true, nil
}

// EvalPool judges a counter or rate threshold on the pool's totals. A missing
// counter reads 0. elapsed is the longest backend elapsed time, the divisor
// of a rate. actual is the value judged: the counter as an integer, or the
// rate formatted as the report shows it (shortest 'g' form).
func (t Threshold) EvalPool(totals map[string]uint64, elapsed time.Duration) (pass bool, actual string) {
	n := totals[t.Name]
	switch t.Kind {
	case Counter:
		return t.Op.Holds(float64(n), t.Value), strconv.FormatUint(n, 10)
	case Rate:
		if elapsed <= 0 {
			return false, "no elapsed time to divide by"
		}
		v := float64(n) / elapsed.Seconds()
		return t.Op.Holds(v, t.Value), strconv.FormatFloat(v, 'g', -1, 64)
	}
	return false, fmt.Sprintf("%s threshold is judged per backend, not on the pool", t.Kind)
}

// EvalBackend judges a statistic threshold on one backend's statistics. A
// missing statistic fails with actual "missing statistic <id>"; so does one
// without samples (unless the field is count), and a duration compared with
// a statistic that is not one of durations. actual is the field's value in
// the statistic's unit (nanoseconds for durations), in plain decimal.
func (t Threshold) EvalBackend(stats map[string]record.Statistic) (pass bool, actual string) {
	if t.Kind != Statistic {
		return false, fmt.Sprintf("%s threshold is judged on the pool, not per backend", t.Kind)
	}
	s, ok := stats[t.Name]
	if !ok {
		return false, "missing statistic " + t.Name
	}
	if t.Field != "count" && s.Count == 0 {
		return false, "no samples in statistic " + t.Name
	}
	if t.Duration && s.Unit != "" && s.Unit != "ns" {
		return false, fmt.Sprintf("statistic %s is in unit %s, not a duration", t.Name, s.Unit)
	}
	var v float64
	switch t.Field {
	case "count":
		return t.Op.Holds(float64(s.Count), t.Value), strconv.FormatUint(s.Count, 10)
	case "mean":
		v = s.Mean
	case "pstdev":
		v = s.Pstdev
	case "min":
		v = s.Min
	case "max":
		v = s.Max
	case "p50":
		v = s.P50
	case "p90":
		v = s.P90
	case "p99":
		v = s.P99
	case "p99.9":
		v = s.P999
	default:
		return false, "unknown statistic field " + t.Field
	}
	return t.Op.Holds(v, t.Value), strconv.FormatFloat(v, 'f', -1, 64)
}
