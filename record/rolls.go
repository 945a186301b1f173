package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The rolls and faults of a run are lines of text: the churn driver prints
// a ROLLED or FAILED line per step (its stdout, saved as churn.log), and
// soak local writes the same ROLLED and FAILED lines to rolls.log and a
// FAULT line per injected fault to faults.log. ParseRolls reads all three
// alike, so the gate sets a run's failures against its rolls and faults
// without knowing which program wrote them.
//
//	ROLLED <ref> at=<t> took=<s>s [key=value ...]
//	FAILED <ref> at=<t> took=<s>s [key=value ...]: <why>
//	FAULT <kind> <subject> at=<t> end=<t> [key=value ...]
//
// <ref> is what rolled: <ns>/<kind>/<name> from the churn driver, the
// target's name from soak local. at is when the roll (or the failed step)
// began, took how long it ran until it was done, in seconds (the churn
// driver writes whole seconds). Times are RFC 3339: the churn driver's to
// the second, soak local's to the millisecond, both in UTC. Fields are
// only ever added after the existing ones, never renamed; a reader keeps
// the ones it does not know. Those with a meaning here:
//
//	end=<t>                  when the roll was done (default: at + took)
//	term=<t>                 when the old replica got SIGTERM (soak local)
//	held_conns=<n>           connections the old replica held at SIGTERM
//	held_inflight=<n>        requests it was answering at SIGTERM
//	answered_after_term=<n>  requests it answered after SIGTERM
//
// The three held_ fields come together or not at all. A FAULT line's at
// and end bound the fault: from when it was injected to when it was over
// (the same time for an instant fault such as an engine kill).
//
// Every other line (the churn driver's CHURN, SHRUNK, RESTORED, WARN,
// PLAN and PREFLIGHT lines, a log line, a comment, a blank line) is
// skipped: a churn.log is read whole as it was saved.

// The file names soak local writes in a run directory.
const (
	RollsFileName  = "rolls.log"
	FaultsFileName = "faults.log"
)

// Size caps of ParseRolls: a churn.log of a day-long soak is some
// kilobytes, so a file or a line far larger is not one and is refused
// rather than read into memory.
const (
	MaxRollsBytes    = 16 << 20
	MaxRollLineBytes = 64 << 10
)

// RollTimeLayout is how soak local writes a time: RFC 3339 in UTC to the
// millisecond. A time with a finer part is written to the nanosecond.
const RollTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// The first word of each line ParseRolls reads.
const (
	WordRolled = "ROLLED"
	WordFailed = "FAILED"
	WordFault  = "FAULT"
)

// The keys of the fields with a meaning of their own (see above).
const (
	KeyAt                = "at"
	KeyTook              = "took"
	KeyEnd               = "end"
	KeyTerm              = "term"
	KeyHeldConns         = "held_conns"
	KeyHeldInflight      = "held_inflight"
	KeyAnsweredAfterTerm = "answered_after_term"
)

// maxTook bounds a roll's took: a rollout is awaited for minutes, and a
// week keeps every end a four-digit year can write.
const maxTook = 7 * 24 * time.Hour

// Field is one key=value of a line that has no field of its own in Roll
// or Fault, such as the churn driver's node= or soak local's spec=.
type Field struct {
	Key, Value string
}

// Held is what the old replica of a roll held when its SIGTERM landed.
type Held struct {
	// Conns is the connections open to it.
	Conns int64
	// Inflight is the requests it was answering.
	Inflight int64
	// AnsweredAfterTerm is the requests it answered after SIGTERM.
	AnsweredAfterTerm int64
}

// Roll is one ROLLED or FAILED line.
type Roll struct {
	// Ref is what rolled: <ns>/<kind>/<name> or a soak local target.
	Ref string
	// Begin is when it began (at=).
	Begin time.Time
	// Took is how long it ran (took=).
	Took time.Duration
	// End is when it was done: end=, or Begin + Took without one.
	End time.Time
	// Term is when the old replica got SIGTERM (term=); zero without one.
	Term time.Time
	// Failed marks a FAILED line, and Why is what it says after ": ".
	Failed bool
	Why    string
	// Held is nil when the line does not say what the old replica held.
	Held *Held
	// Fields are the line's other key=value fields, in line order.
	Fields []Field
	// Line is the line's number, from 1 (0 for a Roll not read).
	Line int
}

// Name is the last part of Ref: the workload's or target's name.
func (r Roll) Name() string { return r.Ref[strings.LastIndexByte(r.Ref, '/')+1:] }

// Touched reports whether the old replica held a connection or a request
// when its SIGTERM landed. A roll that touched nothing proves nothing
// about draining; one that does not say is not known to have touched.
func (r Roll) Touched() bool {
	return r.Held != nil && (r.Held.Conns > 0 || r.Held.Inflight > 0)
}

// Field returns the value of one of Fields.
func (r Roll) Field(key string) (string, bool) { return lookup(r.Fields, key) }

// String writes the line ParseRolls reads back as r (but for Line): at,
// took and end first, then term and the held_ fields, then Fields.
func (r Roll) String() string {
	var b strings.Builder
	word := WordRolled
	if r.Failed {
		word = WordFailed
	}
	fmt.Fprintf(&b, "%s %s at=%s took=%s end=%s", word, r.Ref, FormatRollTime(r.Begin), formatSecs(r.Took), FormatRollTime(r.End))
	if !r.Term.IsZero() {
		fmt.Fprintf(&b, " term=%s", FormatRollTime(r.Term))
	}
	if h := r.Held; h != nil {
		fmt.Fprintf(&b, " held_conns=%d held_inflight=%d answered_after_term=%d", h.Conns, h.Inflight, h.AnsweredAfterTerm)
	}
	writeFields(&b, r.Fields)
	if r.Failed {
		b.WriteString(": " + r.Why)
	}
	return b.String()
}

// Fault is one FAULT line.
type Fault struct {
	// Kind is the fault's kind, such as target-down or engine-kill.
	Kind string
	// Subject is what it struck: a target, a node, or "driver".
	Subject string
	// Begin and End bound it (at= and end=).
	Begin, End time.Time
	// Fields are the line's other key=value fields, in line order.
	Fields []Field
	// Line is the line's number, from 1 (0 for a Fault not read).
	Line int
}

// Field returns the value of one of Fields.
func (f Fault) Field(key string) (string, bool) { return lookup(f.Fields, key) }

// String writes the line ParseRolls reads back as f (but for Line).
func (f Fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s at=%s end=%s", WordFault, f.Kind, f.Subject, FormatRollTime(f.Begin), FormatRollTime(f.End))
	writeFields(&b, f.Fields)
	return b.String()
}

// RollLog is what ParseRolls read: the rolls and the faults, each in file
// order.
type RollLog struct {
	Rolls  []Roll
	Faults []Fault
}

// RollLineError is a ROLLED, FAILED or FAULT line ParseRolls cannot read.
type RollLineError struct {
	// Path names the file (set by ReadRollsFile; "" otherwise).
	Path string
	// Line is the line's number, from 1.
	Line int
	// Reason says what is wrong with it.
	Reason string
}

func (e *RollLineError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
	}
	return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Reason)
}

// ParseRolls reads the ROLLED, FAILED and FAULT lines of r, at most
// MaxRollsBytes of it, and skips every other line. A line of those words
// it cannot read is a *RollLineError, joined into the error, while the
// lines it can read are still returned, so a caller can say everything
// wrong at once. A larger input is an error and yields nothing.
func ParseRolls(r io.Reader) (RollLog, error) { return parseRolls(r, "") }

// ReadRollsFile reads the file at path with ParseRolls; a bad line says
// <path>:<line>. A missing file is an error that matches os.ErrNotExist.
func ReadRollsFile(path string) (RollLog, error) {
	return ReadRollsFileContext(context.Background(), path)
}

// ReadRollsFileContext is ReadRollsFile whose read ends when ctx ends
// (see OpenInput).
func ReadRollsFileContext(ctx context.Context, path string) (RollLog, error) {
	f, err := OpenInput(ctx, path)
	if err != nil {
		return RollLog{}, err
	}
	defer f.Close()
	return parseRolls(f, path)
}

func parseRolls(r io.Reader, path string) (RollLog, error) {
	what := "rolls"
	if path != "" {
		what = path
	}
	b, tooBig, err := readCapped(r, MaxRollsBytes)
	if err != nil {
		return RollLog{}, fmt.Errorf("read %s: %w", what, err)
	}
	if tooBig {
		return RollLog{}, fmt.Errorf("read %s: larger than %d bytes: not a log of rolls", what, MaxRollsBytes)
	}
	var log RollLog
	var errs []error
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		if len(line) > MaxRollLineBytes {
			if word, _, _ := strings.Cut(strings.TrimSpace(line[:64]), " "); isRollWord(word) {
				errs = append(errs, &RollLineError{Path: path, Line: n, Reason: fmt.Sprintf("longer than %d bytes", MaxRollLineBytes)})
			}
			continue
		}
		if err := log.parseLine(strings.TrimSpace(line), n); err != nil {
			errs = append(errs, &RollLineError{Path: path, Line: n, Reason: err.Error()})
		}
	}
	return log, errors.Join(errs...)
}

func isRollWord(w string) bool { return w == WordRolled || w == WordFailed || w == WordFault }

// parseLine adds the roll or fault of one trimmed line; other lines are
// skipped.
func (log *RollLog) parseLine(line string, n int) error {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case WordRolled, WordFailed:
		r, err := parseRoll(word == WordFailed, rest)
		if err != nil {
			return fmt.Errorf("%s line: %w", word, err)
		}
		r.Line = n
		log.Rolls = append(log.Rolls, r)
	case WordFault:
		f, err := parseFault(rest)
		if err != nil {
			return fmt.Errorf("%s line: %w", word, err)
		}
		f.Line = n
		log.Faults = append(log.Faults, f)
	}
	return nil
}

// parseRoll reads what follows ROLLED or FAILED.
func parseRoll(failed bool, rest string) (Roll, error) {
	r := Roll{Failed: failed}
	if failed {
		// The why is free text after the first ": "; the fields before
		// it hold no space, so none of them holds ": ".
		head, why, ok := strings.Cut(rest, ": ")
		if !ok {
			head = strings.TrimSuffix(rest, ":")
		}
		rest, r.Why = head, strings.TrimSpace(why)
	}
	words := strings.Fields(rest)
	if len(words) == 0 || strings.Contains(words[0], "=") {
		return Roll{}, errors.New("want <ref> after the word")
	}
	r.Ref = words[0]
	fields, err := parseFields(words[1:])
	if err != nil {
		return Roll{}, err
	}
	var at, took, end, term string
	var held [3]string
	for _, f := range fields {
		switch f.Key {
		case KeyAt:
			at = f.Value
		case KeyTook:
			took = f.Value
		case KeyEnd:
			end = f.Value
		case KeyTerm:
			term = f.Value
		case KeyHeldConns:
			held[0] = f.Value
		case KeyHeldInflight:
			held[1] = f.Value
		case KeyAnsweredAfterTerm:
			held[2] = f.Value
		default:
			r.Fields = append(r.Fields, f)
		}
	}
	if at == "" || took == "" {
		return Roll{}, errors.New("want at=<time> and took=<seconds>s")
	}
	if r.Begin, err = parseRollTime(KeyAt, at); err != nil {
		return Roll{}, err
	}
	if r.Took, err = parseSecs(took); err != nil {
		return Roll{}, err
	}
	r.End = r.Begin.Add(r.Took)
	if end != "" {
		if r.End, err = parseRollTime(KeyEnd, end); err != nil {
			return Roll{}, err
		}
	}
	if r.End.Before(r.Begin) || r.End.Year() > 9999 {
		return Roll{}, fmt.Errorf("end %s is before at %s or past year 9999", FormatRollTime(r.End), at)
	}
	if term != "" {
		if r.Term, err = parseRollTime(KeyTerm, term); err != nil {
			return Roll{}, err
		}
	}
	if r.Held, err = parseHeld(held); err != nil {
		return Roll{}, err
	}
	return r, nil
}

// parseHeld reads the three held_ values; all empty is nil.
func parseHeld(v [3]string) (*Held, error) {
	if v == [3]string{} {
		return nil, nil
	}
	keys := [3]string{KeyHeldConns, KeyHeldInflight, KeyAnsweredAfterTerm}
	var n [3]int64
	for i := range v {
		if v[i] == "" {
			return nil, fmt.Errorf("%s, %s and %s come together: %s is missing", keys[0], keys[1], keys[2], keys[i])
		}
		x, err := strconv.ParseInt(v[i], 10, 64)
		if err != nil || x < 0 || v[i][0] == '+' {
			return nil, fmt.Errorf("%s=%q: want a count, 0 or more", keys[i], v[i])
		}
		n[i] = x
	}
	return &Held{Conns: n[0], Inflight: n[1], AnsweredAfterTerm: n[2]}, nil
}

// parseFault reads what follows FAULT.
func parseFault(rest string) (Fault, error) {
	words := strings.Fields(rest)
	if len(words) < 2 || strings.Contains(words[0], "=") || strings.Contains(words[1], "=") {
		return Fault{}, errors.New("want <kind> <subject> after the word")
	}
	f := Fault{Kind: words[0], Subject: words[1]}
	for _, c := range f.Kind {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return Fault{}, fmt.Errorf("kind %q: want [a-z0-9-]", f.Kind)
		}
	}
	fields, err := parseFields(words[2:])
	if err != nil {
		return Fault{}, err
	}
	var at, end string
	for _, fl := range fields {
		switch fl.Key {
		case KeyAt:
			at = fl.Value
		case KeyEnd:
			end = fl.Value
		default:
			f.Fields = append(f.Fields, fl)
		}
	}
	if at == "" || end == "" {
		return Fault{}, errors.New("want at=<time> and end=<time>")
	}
	if f.Begin, err = parseRollTime(KeyAt, at); err != nil {
		return Fault{}, err
	}
	if f.End, err = parseRollTime(KeyEnd, end); err != nil {
		return Fault{}, err
	}
	if f.End.Before(f.Begin) {
		return Fault{}, fmt.Errorf("end %s is before at %s", end, at)
	}
	return f, nil
}

// parseFields reads key=value words: a key of [a-z][a-z0-9_]*, a value of
// at least one character, no key twice.
func parseFields(words []string) ([]Field, error) {
	fields := make([]Field, 0, len(words))
	seen := map[string]bool{}
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || v == "" || !validKey(k) {
			return nil, fmt.Errorf("%q: want key=value, the key of [a-z0-9_]", w)
		}
		if seen[k] {
			return nil, fmt.Errorf("%s= given twice", k)
		}
		seen[k] = true
		fields = append(fields, Field{Key: k, Value: v})
	}
	return fields, nil
}

func validKey(k string) bool {
	if k == "" || k[0] < 'a' || k[0] > 'z' {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func parseRollTime(key, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if y := t.UTC().Year(); err != nil || y < 0 || y > 9999 {
		return time.Time{}, fmt.Errorf("%s=%q: want an RFC 3339 time such as 2026-10-05T03:21:00Z", key, v)
	}
	return t, nil
}

// parseSecs reads <seconds>s: digits, an optional fraction, then s.
func parseSecs(v string) (time.Duration, error) {
	num, ok := strings.CutSuffix(v, "s")
	whole, frac, hasFrac := strings.Cut(num, ".")
	ok = ok && whole != "" && digits(whole) && (!hasFrac || frac != "" && digits(frac))
	if !ok {
		return 0, fmt.Errorf("took=%q: want seconds such as 42s", v)
	}
	d, err := time.ParseDuration(v)
	if err != nil || d > maxTook {
		return 0, fmt.Errorf("took=%q: want at most %s", v, formatSecs(maxTook))
	}
	return d, nil
}

func digits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// formatSecs writes d as parseSecs reads it, exactly: 42s, 1.5s.
func formatSecs(d time.Duration) string {
	s := strconv.FormatInt(int64(d/time.Second), 10)
	if frac := d % time.Second; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%09d", int64(frac)), "0")
	}
	return s + "s"
}

// FormatRollTime writes t as soak local's lines do: RollTimeLayout, or to
// the nanosecond when t has a finer part, so a line reads back exactly.
func FormatRollTime(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond()%int(time.Millisecond) != 0 {
		return t.Format("2006-01-02T15:04:05.000000000Z07:00")
	}
	return t.Format(RollTimeLayout)
}

func writeFields(b *strings.Builder, fields []Field) {
	for _, f := range fields {
		fmt.Fprintf(b, " %s=%s", f.Key, f.Value)
	}
}

func lookup(fields []Field, key string) (string, bool) {
	for _, f := range fields {
		if f.Key == key {
			return f.Value, true
		}
	}
	return "", false
}
