package render

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/sortie-soak/sortie/record"
)

// MaxTargets is the engine's cap of concurrent executions: every target is
// its own execution on every engine, all running at once, so a plan with
// more targets than this would be refused at the engine mid-start.
const MaxTargets = 16

// maxWeight bounds a weight so that rate × weight never overflows.
const maxWeight = 1_000_000

// maxNameLen keeps a name usable as a DNS label and a metric element.
const maxNameLen = 63

// Target is one line of a targets file.
type Target struct {
	// Name labels the target in the plan, the report (<scenario>/<name>) and
	// metric names: [a-z0-9-], starting and ending with a letter or digit.
	Name string
	// URL is the http:// or https:// URL the engines request.
	URL string
	// Weight is the target's relative share of the rate, a positive integer.
	Weight int
	// Line is the 1-based line of the file the target came from.
	Line int
}

// LineError is a problem with one line of a targets file.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// MaxTargetsBytes bounds a targets file, 1 MiB: some ten thousand
// targets. A larger file (or /dev/zero) is refused before it is parsed.
const MaxTargetsBytes = 1 << 20

// ReadTargets reads and parses a targets file of at most MaxTargetsBytes.
func ReadTargets(path string) ([]Target, error) {
	data, err := record.ReadInput(context.Background(), path, "targets file", MaxTargetsBytes)
	var tooBig *record.TooLargeError
	if errors.As(err, &tooBig) {
		return nil, err // it names the file and the limit
	}
	if err != nil {
		return nil, fmt.Errorf("read targets: %w", err)
	}
	return ParseTargets(path, data)
}

// ParseTargets parses a targets file: one `name url weight` line per target,
// fields separated by spaces or tabs, blank lines and lines starting with #
// ignored, and anything from a field starting with # to the end of the line
// a comment. Every problem is reported, each as a *LineError naming
// filename:line, joined with errors.Join.
func ParseTargets(filename string, data []byte) ([]Target, error) {
	var (
		targets []Target
		errs    []error
		seen    = map[string]int{}
	)
	lineErr := func(n int, format string, args ...any) {
		errs = append(errs, &LineError{File: filename, Line: n, Err: fmt.Errorf(format, args...)})
	}
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		fields := strings.Fields(line)
		for j, f := range fields {
			if strings.HasPrefix(f, "#") {
				fields = fields[:j]
				break
			}
		}
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 {
			lineErr(n, "want `name url weight`, got %d fields", len(fields))
			continue
		}
		t := Target{Name: fields[0], URL: fields[1], Line: n}
		ok := true
		if err := checkName(t.Name); err != nil {
			lineErr(n, "%w", err)
			ok = false
		} else if prev, dup := seen[t.Name]; dup {
			lineErr(n, "target %q is listed twice (first on line %d)", t.Name, prev)
			ok = false
		} else {
			seen[t.Name] = n
		}
		if err := checkURL(t.URL); err != nil {
			lineErr(n, "target %q: %w", t.Name, err)
			ok = false
		}
		w, err := parseWeight(fields[2])
		if err != nil {
			lineErr(n, "target %q: %w", t.Name, err)
			ok = false
		}
		t.Weight = w
		if ok {
			targets = append(targets, t)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("%s: no targets", filename)
	}
	if len(targets) > MaxTargets {
		return nil, &LineError{File: filename, Line: targets[MaxTargets].Line, Err: fmt.Errorf(
			"%d targets, but an engine runs at most %d executions at once (one per target)", len(targets), MaxTargets)}
	}
	return targets, nil
}

// checkName accepts [a-z0-9-] names that start and end with a letter or a
// digit, so that a name is also a valid DNS label and metric element.
func checkName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("target name %q must be 1 to %d characters", name, maxNameLen)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("target name %q must be made of [a-z0-9-]", name)
		}
	}
	if name[0] == '-' || name[len(name)-1] == '-' {
		return fmt.Errorf("target name %q must start and end with a letter or digit", name)
	}
	return nil
}

// checkURL accepts absolute http and https URLs with a host, an optional
// valid port, and nothing an engine could not send as a request line.
func checkURL(raw string) error {
	for _, c := range []byte(raw) {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Errorf("url %q must be printable ASCII without quotes or backslashes", raw)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url %q: %w", raw, errors.Unwrap(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q must be http:// or https://", raw)
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("url %q has no host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("url %q must not carry user information", raw)
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return fmt.Errorf("url %q must not have a fragment", raw)
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if _, err := parsePort(p); err != nil {
			return fmt.Errorf("url %q: %w", raw, err)
		}
	}
	return nil
}

func parsePort(p string) (int, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || p[0] == '0' {
		return 0, fmt.Errorf("port %q must be 1 to 65535", p)
	}
	return n, nil
}

func parseWeight(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || s[0] == '0' || s[0] == '+' {
		return 0, fmt.Errorf("weight must be a positive integer, got %q", s)
	}
	if n > maxWeight {
		return 0, fmt.Errorf("weight %d is larger than %d", n, maxWeight)
	}
	return n, nil
}

// checkHostPort accepts host:port with a non-empty host and a valid port.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q must be host:port: %w", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	for _, c := range []byte(host) {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Errorf("%q: host must be printable ASCII without quotes or backslashes", s)
		}
	}
	if _, err := parsePort(port); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	return nil
}
