package oneshot

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// FinalWord starts the one line the client prints when it is done, which
// the churn driver reads back through the pod's log:
//
//	SORTIE_NEWSA_FINAL step=<step> node=<node> <dst>:ok=N,non2xx=N,connerr=N,codes=C ...
//
// one <dst> word per target, in the order given. codes names what was not
// a 2xx, "<code>x<count>" joined by "+" in byte order ("503x12+err_connectx3"),
// or "-" when every request was a 2xx.
const FinalWord = "SORTIE_NEWSA_FINAL"

// Connection error classes, the codes of a request that got no HTTP
// status at all.
const (
	ErrDNS     = "err_dns"     // the name did not resolve
	ErrConnect = "err_connect" // the connection was refused or unreachable
	ErrTimeout = "err_timeout" // no answer within the request's timeout
	ErrReset   = "err_reset"   // the connection was closed under the request
	ErrOther   = "err_other"   // anything else
)

// maxTallyLine bounds a line ParseFinal reads: a few destinations of a few
// counters each are well under it.
const maxTallyLine = 16 << 10

// Dest is the tally of one target.
type Dest struct {
	// Name is the target's name.
	Name string
	// OK counts the 2xx answers.
	OK int64
	// Non2xx counts the answers of any other status.
	Non2xx int64
	// ConnErr counts the requests that got no status at all.
	ConnErr int64
	// Codes counts each status other than 2xx, and each err_ class.
	Codes map[string]int64
}

// Clean reports whether every request of d was answered with a 2xx, and
// there was at least one.
func (d Dest) Clean() bool { return d.OK > 0 && d.Non2xx == 0 && d.ConnErr == 0 }

// Final is the client's last line.
type Final struct {
	Step, Node string
	Dests      []Dest
}

// Clean reports whether every destination is clean.
func (f Final) Clean() bool {
	for _, d := range f.Dests {
		if !d.Clean() {
			return false
		}
	}
	return len(f.Dests) > 0
}

// Tally renders the destinations, space-separated, as the final line holds
// them.
func (f Final) Tally() string {
	words := make([]string, len(f.Dests))
	for i, d := range f.Dests {
		words[i] = d.String()
	}
	return strings.Join(words, " ")
}

// String renders the whole final line (without its newline).
func (f Final) String() string {
	return fmt.Sprintf("%s step=%s node=%s %s", FinalWord, f.Step, f.Node, f.Tally())
}

// String renders d as <name>:ok=N,non2xx=N,connerr=N,codes=C.
func (d Dest) String() string {
	return fmt.Sprintf("%s:ok=%d,non2xx=%d,connerr=%d,codes=%s", d.Name, d.OK, d.Non2xx, d.ConnErr, formatCodes(d.Codes))
}

func formatCodes(codes map[string]int64) string {
	if len(codes) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%sx%d", k, codes[k])
	}
	return strings.Join(parts, "+")
}

// ParseFinal reads a final line (without its newline). Every count must be
// a whole number, codes must add up to non2xx + connerr, and a destination
// may appear once.
func ParseFinal(line string) (Final, error) {
	if len(line) > maxTallyLine {
		return Final{}, fmt.Errorf("final line longer than %d bytes", maxTallyLine)
	}
	words := strings.Fields(line)
	if len(words) < 4 || words[0] != FinalWord {
		return Final{}, fmt.Errorf("want %q step=<step> node=<node> <dst>:... words", FinalWord)
	}
	var f Final
	var ok bool
	if f.Step, ok = strings.CutPrefix(words[1], "step="); !ok || f.Step == "" {
		return Final{}, fmt.Errorf("%q: want step=<step>", words[1])
	}
	if f.Node, ok = strings.CutPrefix(words[2], "node="); !ok || f.Node == "" {
		return Final{}, fmt.Errorf("%q: want node=<node>", words[2])
	}
	seen := map[string]bool{}
	for _, w := range words[3:] {
		d, err := parseDest(w)
		if err != nil {
			return Final{}, fmt.Errorf("%q: %w", w, err)
		}
		if seen[d.Name] {
			return Final{}, fmt.Errorf("destination %s given twice", d.Name)
		}
		seen[d.Name] = true
		f.Dests = append(f.Dests, d)
	}
	return f, nil
}

// parseDest reads <name>:ok=N,non2xx=N,connerr=N,codes=C.
func parseDest(w string) (Dest, error) {
	i := strings.LastIndex(w, ":ok=")
	if i <= 0 {
		return Dest{}, errors.New("want <name>:ok=N,non2xx=N,connerr=N,codes=C")
	}
	d := Dest{Name: w[:i]}
	parts := strings.Split(w[i+1:], ",")
	if len(parts) != 4 {
		return Dest{}, errors.New("want ok=, non2xx=, connerr= and codes=, in that order")
	}
	counts := [3]*int64{&d.OK, &d.Non2xx, &d.ConnErr}
	for j, key := range []string{"ok", "non2xx", "connerr"} {
		v, found := strings.CutPrefix(parts[j], key+"=")
		if !found {
			return Dest{}, fmt.Errorf("want %s= at place %d", key, j+1)
		}
		n, err := count(v)
		if err != nil {
			return Dest{}, fmt.Errorf("%s=%q: %w", key, v, err)
		}
		*counts[j] = n
	}
	codes, found := strings.CutPrefix(parts[3], "codes=")
	if !found {
		return Dest{}, errors.New("want codes= last")
	}
	var err error
	if d.Codes, err = parseCodes(codes); err != nil {
		return Dest{}, err
	}
	var sum int64
	for _, n := range d.Codes {
		sum += n
	}
	if sum != d.Non2xx+d.ConnErr {
		return Dest{}, fmt.Errorf("codes add up to %d, want non2xx + connerr = %d", sum, d.Non2xx+d.ConnErr)
	}
	return d, nil
}

func parseCodes(s string) (map[string]int64, error) {
	if s == "-" {
		return nil, nil
	}
	out := map[string]int64{}
	for _, p := range strings.Split(s, "+") {
		i := strings.LastIndexByte(p, 'x')
		if i <= 0 {
			return nil, fmt.Errorf("code %q: want <code>x<count>", p)
		}
		n, err := count(p[i+1:])
		if err != nil || n == 0 {
			return nil, fmt.Errorf("code %q: want a count of 1 or more", p)
		}
		if _, dup := out[p[:i]]; dup {
			return nil, fmt.Errorf("code %s given twice", p[:i])
		}
		out[p[:i]] = n
	}
	return out, nil
}

// count reads a whole number, 0 or more, without a sign.
func count(s string) (int64, error) {
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, errors.New("want a whole number")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("want a whole number")
	}
	return n, nil
}

// FindFinal returns the last final line of a pod's log, parsed; found is
// false when the log holds none yet.
func FindFinal(log string) (f Final, found bool, err error) {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, FinalWord+" ") {
			f, err = ParseFinal(l)
			return f, true, err
		}
	}
	return Final{}, false, nil
}
