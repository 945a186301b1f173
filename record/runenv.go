package record

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// A run directory's run.env describes the run on the cluster: the kickoff
// (`soak run`) writes it when it starts the driver's Job, and sortie-save,
// `soak teardown` and a person at a shell read it. Its lines are KEY=VALUE,
// read by one set of rules (ReadEnv) and written so that those rules give
// every value back exactly (FormatEnv).

// EnvFileName is the name of the file in a run directory.
const EnvFileName = "run.env"

// MaxEnvSize is the largest run.env ReadEnv accepts, 1 MiB: the kickoff
// writes about 1 KiB, and a file a thousand times that is not a run
// description, so it is refused rather than read into memory.
const MaxEnvSize = 1 << 20

// envKey is a key as a shell takes a variable name.
var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Env is what a run.env says: each key's last value and the line that set
// it. The zero Env holds no key.
type Env struct {
	values map[string]string
	lines  map[string]int
}

// Get returns the value of key, or "" when run.env does not set it.
func (e Env) Get(key string) string { return e.values[key] }

// Lookup returns the value of key and whether run.env sets it (an empty
// value is set).
func (e Env) Lookup(key string) (string, bool) {
	v, ok := e.values[key]
	return v, ok
}

// Line returns the line number (from 1) that set key, or 0.
func (e Env) Line(key string) int { return e.lines[key] }

// Keys returns every key that is set, sorted.
func (e Env) Keys() []string {
	keys := make([]string, 0, len(e.values))
	for k := range e.values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// EnvError is a line of a run.env that the rules do not read.
type EnvError struct {
	// Line is the line's number, from 1.
	Line int
	// Reason says what is wrong with it.
	Reason string
}

func (e *EnvError) Error() string { return fmt.Sprintf("%s:%d: %s", EnvFileName, e.Line, e.Reason) }

// ReadEnv reads a run.env, at most MaxEnvSize bytes of it. The rules:
//
//   - white space around a line is ignored; a blank line, or one whose
//     first character is #, is skipped;
//   - an "export " prefix (export and white space) is dropped, as a shell
//     would;
//   - KEY is what stands before the first =, without the white space around
//     it, and must be a shell name ([A-Za-z_][A-Za-z0-9_]*);
//   - VALUE is the rest, without the white space around it. A VALUE whose
//     first character is ' or " must end with the same quote, and is what
//     lies between the two, taken literally; any other VALUE is taken as it
//     stands, # and inner spaces included. There are no escapes, no
//     expansions and no inline comments;
//   - a key given twice keeps its last value, as a shell would.
//
// Every line that breaks them is an *EnvError with its line number, joined
// into the error; the lines that do not are still in the Env, so a caller
// can say everything that is wrong at once. A file larger than MaxEnvSize
// is an error and yields nothing.
func ReadEnv(r io.Reader) (Env, error) {
	b, tooBig, err := readCapped(r, MaxEnvSize)
	if err != nil {
		return Env{}, fmt.Errorf("read %s: %w", EnvFileName, err)
	}
	if tooBig {
		return Env{}, fmt.Errorf("read %s: larger than %d bytes: not a run description", EnvFileName, MaxEnvSize)
	}
	env := Env{values: map[string]string{}, lines: map[string]int{}}
	var errs []error
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		key, value, ok, err := parseEnvLine(line)
		if err != nil {
			errs = append(errs, &EnvError{Line: n, Reason: err.Error()})
			continue
		}
		if ok {
			env.values[key] = value
			env.lines[key] = n
		}
	}
	return env, errors.Join(errs...)
}

// ReadEnvFile reads the run.env at path (see ReadEnv). A missing file is
// an error that matches os.ErrNotExist; a bad line says run.env:<line>.
func ReadEnvFile(path string) (Env, error) {
	f, err := os.Open(path)
	if err != nil {
		return Env{}, err
	}
	defer f.Close()
	return ReadEnv(f)
}

// parseEnvLine reads one line; ok is false for a blank or comment line.
func parseEnvLine(line string) (key, value string, ok bool, err error) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", "", false, nil
	}
	if rest, cut := strings.CutPrefix(line, "export"); cut && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
		line = strings.TrimSpace(rest)
	}
	k, v, found := strings.Cut(line, "=")
	k = strings.TrimSpace(k)
	if !found || !envKey.MatchString(k) {
		return "", "", false, fmt.Errorf("want KEY=VALUE, got %q", clipEnv(line, 60))
	}
	v = strings.TrimSpace(v)
	if v != "" && (v[0] == '\'' || v[0] == '"') {
		if len(v) < 2 || v[len(v)-1] != v[0] {
			return "", "", false, fmt.Errorf("%s: the value opens a %c quote and does not end with it (no escapes, no text after the closing quote)", k, v[0])
		}
		v = v[1 : len(v)-1]
	}
	return k, v, true, nil
}

func clipEnv(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// EnvPair is one KEY=VALUE line of a run.env.
type EnvPair struct {
	Key, Value string
}

// bareEnvValue is a value written without quotes: nothing a reader or a
// shell would read differently.
var bareEnvValue = regexp.MustCompile(`^[A-Za-z0-9_./:@%+,=-]*$`)

// FormatEnv renders a run.env: comment, if any, as # lines, then one line
// per pair in order. A value outside [A-Za-z0-9_./:@%+,=-] is quoted: in
// single quotes, or in double quotes when it holds a single quote, so that
// ReadEnv gives it back exactly (a shell sourcing the file reads it the
// same unless a double-quoted value holds $, ` or \). A key that is not a
// shell name, or a value with a newline, which no line can hold, is an
// error.
func FormatEnv(comment string, pairs []EnvPair) ([]byte, error) {
	var b bytes.Buffer
	if comment != "" {
		for _, l := range strings.Split(strings.TrimRight(comment, "\n"), "\n") {
			b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
		}
	}
	var errs []error
	for _, p := range pairs {
		line, err := formatEnvPair(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.WriteString(line)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func formatEnvPair(p EnvPair) (string, error) {
	if !envKey.MatchString(p.Key) {
		return "", fmt.Errorf("%s: key %q is not a shell name", EnvFileName, p.Key)
	}
	v := p.Value
	switch {
	case strings.Contains(v, "\n"):
		return "", fmt.Errorf("%s: %s: a value cannot hold a newline", EnvFileName, p.Key)
	case bareEnvValue.MatchString(v):
	case !strings.Contains(v, "'"):
		v = "'" + v + "'"
	default:
		// The reader takes everything between the first and the last
		// character, so a double quote inside is fine too.
		v = `"` + v + `"`
	}
	return p.Key + "=" + v + "\n", nil
}

// WriteEnv writes a run.env at path atomically (see WriteFile).
func WriteEnv(path, comment string, pairs []EnvPair) error {
	b, err := FormatEnv(comment, pairs)
	if err != nil {
		return err
	}
	return WriteFile(path, b, 0o644)
}

// AppendEnv adds pairs at the end of the run.env at path, which must
// exist, and writes it again atomically: a reader sees the file before or
// after, never a torn last line. A key already set is overridden, since
// the last value wins.
func AppendEnv(path string, pairs ...EnvPair) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	old, err := io.ReadAll(io.LimitReader(f, MaxEnvSize+1))
	f.Close()
	if err != nil {
		return fmt.Errorf("append to %s: %w", path, err)
	}
	add, err := FormatEnv("", pairs)
	if err != nil {
		return err
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	b := append(old, add...)
	if len(b) > MaxEnvSize {
		return fmt.Errorf("append to %s: it would be larger than %d bytes", path, MaxEnvSize)
	}
	return WriteFile(path, b, 0o644)
}
