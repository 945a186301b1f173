package cli

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrDuration is wrapped by every refusal of ParseDuration.
var ErrDuration = errors.New("not a duration")

// maxDurationInput bounds the text ParseDuration reads: no duration a
// flag needs is longer, and a flag value of megabytes is refused at once.
const maxDurationInput = 64

// ParseDuration reads a flag's duration: a bare integer is a number of
// seconds (the bash harness's flags took seconds: "--interval 120",
// "--stall-budget 3"), anything else is a Go duration ("2m", "1h30m",
// "500ms"). Signs are allowed as Go allows them; the flag's owner decides
// which values make sense.
func ParseDuration(s string) (time.Duration, error) {
	if len(s) > maxDurationInput {
		return 0, fmt.Errorf("%w: %d characters, at most %d", ErrDuration, len(s), maxDurationInput)
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("%w: empty; want seconds (120) or a duration (2m)", ErrDuration)
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, fmt.Errorf("%w: %q seconds is out of range", ErrDuration, t)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%w: %q; want seconds (120) or a duration (2m, 1h30m, 500ms)", ErrDuration, s)
	}
	return d, nil
}

// Duration is a flag.Value over a time.Duration that ParseDuration fills:
// a bare integer is seconds. Every flag whose bash counterpart took seconds
// uses it, so a command line written for the bash harness keeps working.
type Duration time.Duration

var _ flag.Value = (*Duration)(nil)

// Set parses s with ParseDuration.
func (d *Duration) Set(s string) error {
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// String prints the duration as Go does ("2m0s"), which Set reads back.
func (d *Duration) String() string {
	if d == nil {
		return "0s"
	}
	return time.Duration(*d).String()
}

// DurationVar defines a flag on fs that reads a bare integer as seconds and
// anything else as a Go duration, with value as its default.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*Duration)(p), name, usage)
}
