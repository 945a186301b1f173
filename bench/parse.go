package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// peerReport is what the bench takes from a peer's own report of one run.
type peerReport struct {
	// Sent counts the requests the peer says it made (for fortio, without
	// its warm-up requests, which its report leaves out).
	Sent uint64
	// OK counts the 2xx answers.
	OK uint64
	// Errors counts every other outcome: other status codes, socket
	// errors.
	Errors uint64
	// Rate is the rate the peer says it achieved, in requests per second.
	Rate float64
	// Elapsed is how long the peer says it ran.
	Elapsed time.Duration
	// P50 and P99 are the peer's own percentiles, from the actual send
	// (zero if it reported none).
	P50, P99 time.Duration
	// Note carries something worth showing, such as the first error.
	Note string
}

// fortioResult is the part of fortio's -json output the bench reads.
type fortioResult struct {
	RunType           string
	ActualQPS         float64
	ActualDuration    int64 // ns
	NumThreads        int
	DurationHistogram *struct {
		Count       uint64
		Percentiles []struct {
			Percentile float64
			Value      float64 // seconds
		}
	}
	RetCodes map[string]uint64
}

// parseFortio reads fortio's JSON result (fortio load -json FILE).
func parseFortio(b []byte) (peerReport, error) {
	var f fortioResult
	if err := json.Unmarshal(b, &f); err != nil {
		return peerReport{}, fmt.Errorf("fortio json: %w", err)
	}
	if f.DurationHistogram == nil {
		return peerReport{}, errors.New("fortio json: no DurationHistogram")
	}
	if f.RunType != "" && f.RunType != "HTTP" {
		return peerReport{}, fmt.Errorf("fortio json: run type %q, want HTTP", f.RunType)
	}
	r := peerReport{
		Sent:    f.DurationHistogram.Count,
		Rate:    f.ActualQPS,
		Elapsed: time.Duration(f.ActualDuration),
	}
	// RetCodes holds HTTP codes, and -1 for requests that failed below
	// HTTP (fortio's socket errors).
	var codes uint64
	for code, n := range f.RetCodes {
		codes += n
		if c, err := strconv.Atoi(code); err == nil && c >= 200 && c < 300 {
			r.OK += n
		}
	}
	if codes != r.Sent {
		return peerReport{}, fmt.Errorf("fortio json: %d return codes for %d requests", codes, r.Sent)
	}
	r.Errors = r.Sent - r.OK
	for _, p := range f.DurationHistogram.Percentiles {
		switch p.Percentile {
		case 50:
			r.P50 = seconds(p.Value)
		case 99:
			r.P99 = seconds(p.Value)
		}
	}
	if r.Errors > 0 {
		r.Note = "codes " + codeList(f.RetCodes)
	}
	return r, nil
}

// seconds converts a float number of seconds, rounding to the ns.
func seconds(s float64) time.Duration {
	if math.IsNaN(s) || s < 0 || s > 1e9 {
		return 0
	}
	return time.Duration(math.Round(s * 1e9))
}

// codeList prints a code map in a stable order: "200:10 503:2".
func codeList(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d", k, m[k])
	}
	return b.String()
}

// vegetaResult is the part of `vegeta report -type json` the bench reads.
type vegetaResult struct {
	Latencies *struct {
		P50 int64 `json:"50th"` // ns
		P99 int64 `json:"99th"` // ns
	} `json:"latencies"`
	Requests    uint64            `json:"requests"`
	Rate        float64           `json:"rate"`
	Duration    int64             `json:"duration"` // ns, first to last send
	StatusCodes map[string]uint64 `json:"status_codes"`
	Errors      []string          `json:"errors"`
}

// parseVegeta reads vegeta's JSON report.
func parseVegeta(b []byte) (peerReport, error) {
	var v vegetaResult
	if err := json.Unmarshal(b, &v); err != nil {
		return peerReport{}, fmt.Errorf("vegeta json: %w", err)
	}
	if v.Latencies == nil {
		return peerReport{}, errors.New("vegeta json: no latencies")
	}
	r := peerReport{
		Sent:    v.Requests,
		Rate:    v.Rate,
		Elapsed: time.Duration(v.Duration),
		P50:     time.Duration(v.Latencies.P50),
		P99:     time.Duration(v.Latencies.P99),
	}
	// Status code 0 is vegeta's request that got no answer.
	var codes uint64
	for code, n := range v.StatusCodes {
		codes += n
		if c, err := strconv.Atoi(code); err == nil && c >= 200 && c < 300 {
			r.OK += n
		}
	}
	if codes != r.Sent {
		return peerReport{}, fmt.Errorf("vegeta json: %d status codes for %d requests", codes, r.Sent)
	}
	r.Errors = r.Sent - r.OK
	if r.Errors > 0 {
		r.Note = "codes " + codeList(v.StatusCodes)
		if len(v.Errors) > 0 {
			r.Note += "; " + v.Errors[0]
		}
	}
	return r, nil
}

// parseWrk reads wrk's text output (run with --latency for percentiles).
func parseWrk(b []byte) (peerReport, error) {
	var r peerReport
	var haveTotal bool
	var non2xx, socket uint64
	inDist := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case line == "Latency Distribution":
			inDist = true
			continue
		case inDist && len(f) == 2 && strings.HasSuffix(f[0], "%"):
			d, err := wrkDuration(f[1])
			if err != nil {
				return peerReport{}, fmt.Errorf("wrk: latency %s: %w", f[0], err)
			}
			switch f[0] {
			case "50%", "50.000%":
				r.P50 = d
			case "99%", "99.000%":
				r.P99 = d
			}
			continue
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			// "1425000 requests in 15.00s, 150.00MB read"
			n, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return peerReport{}, fmt.Errorf("wrk: requests: %w", err)
			}
			d, err := wrkDuration(strings.TrimSuffix(f[3], ","))
			if err != nil {
				return peerReport{}, fmt.Errorf("wrk: duration: %w", err)
			}
			r.Sent, r.Elapsed, haveTotal = n, d, true
		case strings.HasPrefix(line, "Socket errors:"):
			// "Socket errors: connect 0, read 3, write 0, timeout 2"
			rest := strings.TrimPrefix(line, "Socket errors:")
			for _, kv := range strings.Split(rest, ",") {
				p := strings.Fields(kv)
				if len(p) != 2 {
					return peerReport{}, fmt.Errorf("wrk: socket errors %q", line)
				}
				n, err := strconv.ParseUint(p[1], 10, 64)
				if err != nil {
					return peerReport{}, fmt.Errorf("wrk: socket errors %q: %w", line, err)
				}
				socket += n
			}
		case strings.HasPrefix(line, "Non-2xx or 3xx responses:"):
			n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "Non-2xx or 3xx responses:")), 10, 64)
			if err != nil {
				return peerReport{}, fmt.Errorf("wrk: non-2xx: %w", err)
			}
			non2xx = n
		}
		inDist = false
	}
	if !haveTotal {
		return peerReport{}, errors.New("wrk: no \"N requests in D\" line")
	}
	if non2xx > r.Sent {
		return peerReport{}, fmt.Errorf("wrk: %d non-2xx answers of %d requests", non2xx, r.Sent)
	}
	// wrk counts a request when its answer is read, so socket errors are
	// requests beside those: errors that never became a count.
	r.OK = r.Sent - non2xx
	r.Errors = non2xx + socket
	if r.Elapsed > 0 {
		r.Rate = float64(r.Sent) / r.Elapsed.Seconds()
	}
	if socket > 0 {
		r.Note = fmt.Sprintf("socket errors %d", socket)
	}
	return r, nil
}

// wrkDuration reads wrk's durations: "134.00us", "1.56ms", "2.00s",
// "1.50m", "1.00h".
func wrkDuration(s string) (time.Duration, error) {
	units := []struct {
		suffix string
		unit   float64
	}{{"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || math.IsNaN(v) || v < 0 || math.IsInf(v, 0) || v*u.unit > math.MaxInt64/2 {
			return 0, fmt.Errorf("bad duration %q", s)
		}
		return time.Duration(math.Round(v * u.unit)), nil
	}
	return 0, fmt.Errorf("bad duration %q", s)
}
