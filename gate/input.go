package gate

import (
	"bufio"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/sortie-soak/sortie/record"
)

// Share is one line of the renderer's share table.
type Share struct {
	// Name is the target's name (the execution label without its scenario).
	Name string
	// RPS is the target's planned rate per backend, as written.
	RPS string
	rps *big.Rat
	// URL is the target's URL (not judged).
	URL string
	// Line is the table line it was read from.
	Line int
}

// ReadShares reads a share table: one target per line, "name rps [url]"
// separated by tabs or spaces. Blank lines and lines starting with # are
// ignored; a malformed line, a negative rate or a name listed twice is an
// error naming its line.
func ReadShares(r io.Reader) ([]Share, error) {
	var out []Share
	seen := map[string]int{}
	err := eachLine(r, func(n int, f []string) error {
		if len(f) < 2 {
			return fmt.Errorf("line %d: want \"name rps url\", got %d field(s)", n, len(f))
		}
		rps, err := record.ParseDecimal(f[1])
		if err != nil {
			return fmt.Errorf("line %d: rps: %w", n, err)
		}
		if rps.Sign() < 0 {
			return fmt.Errorf("line %d: rps %s is negative", n, f[1])
		}
		if prev, ok := seen[f[0]]; ok {
			return fmt.Errorf("line %d: target %s is already listed on line %d", n, f[0], prev)
		}
		seen[f[0]] = n
		s := Share{Name: f[0], RPS: f[1], rps: rps, Line: n}
		if len(f) > 2 {
			s.URL = f[2]
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// Engine is one line of the engine list: an engine's address and the node
// it runs on.
type Engine struct {
	Addr string
	Node string
}

// matches says the engine list's entry names the engine at addr: exactly
// when the entry has a port, by host when it has none.
func (en Engine) matches(addr string) bool {
	if en.Addr == addr {
		return true
	}
	return hostOf(en.Addr) == en.Addr && hostOf(addr) == en.Addr
}

// ReadEngines reads an engine list: "address node [pod]" per line,
// separated by tabs or spaces. An address with a port names that engine
// only; one without names every engine on that host. Blank lines and lines
// starting with # are ignored; an address listed twice is an error.
func ReadEngines(r io.Reader) ([]Engine, error) {
	var out []Engine
	seen := map[string]int{}
	err := eachLine(r, func(n int, f []string) error {
		if len(f) < 2 {
			return fmt.Errorf("line %d: want \"address node [pod]\", got %d field(s)", n, len(f))
		}
		h := f[0]
		if prev, ok := seen[h]; ok {
			return fmt.Errorf("line %d: engine %s is already listed on line %d", n, f[0], prev)
		}
		seen[h] = n
		out = append(out, Engine{Addr: f[0], Node: f[1]})
		return nil
	})
	return out, err
}

// eachLine calls fn with the fields of every line that is not blank or a
// comment.
func eachLine(r io.Reader, fn func(n int, fields []string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, strings.Fields(line)); err != nil {
			return err
		}
	}
	return sc.Err()
}

// hostOf strips the port from an address: "10.1.2.3:8443" -> "10.1.2.3",
// "[::1]:8443" -> "::1". An address without a port is returned as it is.
// (The net package would do this; the gate imports no network code.)
func hostOf(addr string) string {
	if strings.HasPrefix(addr, "[") {
		if i := strings.IndexByte(addr, ']'); i > 0 {
			return addr[1:i]
		}
		return addr
	}
	if strings.Count(addr, ":") == 1 {
		return addr[:strings.IndexByte(addr, ':')]
	}
	return addr
}

// LogSummary is what the driver's log says about executions it skipped.
type LogSummary struct {
	// Skipped are the labels of its SKIP lines, each once, in order.
	Skipped []string
	// SkipLines counts the SKIP lines (the driver prints each skipped
	// execution in its narration and again in its summary).
	SkipLines int
	// Summary is its last "N/M executions passed[, K not run]" line.
	Summary string
	// NotRun is K of that line (0 when the line says none).
	NotRun int
}

var (
	logSkip    = regexp.MustCompile(`^\s*SKIP\s+(\S+)`)
	logSummary = regexp.MustCompile(`^(?:PASS|FAIL)\s+\d+/\d+ executions passed(?:, (\d+) not run)?\s*$`)
)

// ReadLog reads the driver's log for its SKIP lines and summary line.
func ReadLog(r io.Reader) (*LogSummary, error) {
	ls := &LogSummary{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := logSkip.FindStringSubmatch(line); m != nil {
			ls.SkipLines++
			if !seen[m[1]] {
				seen[m[1]] = true
				ls.Skipped = append(ls.Skipped, m[1])
			}
			continue
		}
		if m := logSummary.FindStringSubmatch(line); m != nil {
			ls.Summary = strings.TrimSpace(line)
			ls.NotRun = 0
			if m[1] != "" {
				k, err := strconv.Atoi(m[1])
				if err != nil {
					return nil, fmt.Errorf("summary line %q: %w", line, err)
				}
				ls.NotRun = k
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ls, nil
}
