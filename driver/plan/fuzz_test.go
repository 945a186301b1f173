package plan

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the plan parser. It must never panic;
// every error it returns must carry a position; and a plan it accepts must
// compile against its placeholders (or be refused with positions too) and
// describe itself without a panic.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "plans", "*.yaml"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"version: v1",
		"[",
		"version: v1\npools: *x",
		"a: &a [*a]",
		"<<: {version: v1}",
		"version: v1\nscenarios: [{<<: [{name: a}, {name: b}], executor: {<<: 1}}]",
		"version: v1\npools: [{name: p, dns: \"x:1\"}]\nscenarios: [{name: s, pool: p, target: \"http://x/\", executor: {type: staircase, stages: [{rate: 7, duration: 3ms}]}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\", \"b:1\", \"c:1\"]}]\nscenarios: [{name: s, pool: p, targets: [{name: a, url: \"http://x/\", weight: 4294967295}, {name: b, url: \"http://x/\", weight: 4294967295}], concurrency: \"256\", executor: {type: ramping-rate, rate: 4294967295, ramp_time: 2562047h, duration: 2562047h47m16s}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\"]}]\nscenarios: [{name: s, pool: p, target: \"http://x/\", connections: 0x7fffffffffffffff, executor: {type: constant-rate, rate: 010, duration: 2562048h}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\"]}]\nscenarios: [{name: s, pool: p, target: \"http://x/\", max_pending_requests: -1_0.0, executor: {type: constant-rate, rate: 1e400, duration: 1ns}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\"]}]\nscenarios: [{name: s, pool: p, target: \"http://x/\", executor: {type: staircase, stages: [{rate: 10.0, duration: .5s}, {rate: +.5e1, duration: 1.s}]}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\"]}]\ndefaults: {grpc: {mode: bidi-stream, streams: 3}, concurrency: \"3\"}\nscenarios: [{name: s, pool: p, target: \"http://x/\", protocol: http2, websocket: {binary: true}, executor: {type: constant-rate, rate: 3, duration: 1s}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\"]}]\nscenarios: [{name: s, pool: p, target: \"https://x/\", protocol: http3, max_concurrent_streams: 4294967296, grpc: {mode: unary, drain_duration: -0s}, executor: {type: constant-rate, rate: 1, duration: 1s}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\"]}]\nscenarios: [{name: s, pool: p, target: \"http://x/\", websocket: {streams: 4294967295, max_inflight_per_stream: 1}, concurrency: \"255\", executor: {type: constant-rate, rate: 255, duration: 1s}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\"]}]\ndefaults: {tcp: {connections: 2}, udp: {timeout: 1s}}\nscenarios: [{name: s, pool: p, target: \"tcps://[::1]:1\", tcp: {expect_echo: false, drain_duration: 0s}, executor: {type: constant-rate, rate: 1, duration: 1s}}]",
		"version: v1\npools: [{name: p, services: [\"a:1\"]}]\nscenarios: [{name: s, pool: p, targets: [{name: a, url: \"udp://x:0\"}, {name: b, url: \"tcp://x:65536/\"}], body: \"\", udp: {max_inflight: 4294967296}, executor: {type: constant-rate, rate: 2, duration: 1s}}]",
	} {
		f.Add([]byte(s))
	}
	// Relative files resolve beside the seed plans.
	name := filepath.Join("testdata", "plans", "fuzz.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(name, data)
		if err != nil {
			checkPositions(t, err)
			return
		}
		c, err := p.Compile(p.Placeholders())
		if err != nil {
			checkPositions(t, err)
			return
		}
		if err := p.Undriven(); err != nil {
			checkPositions(t, err)
		}
		c.Describe(io.Discard)
		if err := c.WriteRequests(io.Discard); err != nil {
			t.Fatalf("WriteRequests: %v", err)
		}
		for _, cs := range c.Scenarios {
			for _, st := range cs.Stages {
				for _, ex := range st.Executions {
					for _, b := range cs.Backends {
						if ex.Requests[b] == nil || ex.Planned[b] == 0 || ex.Requests[b].GetRate() == 0 {
							t.Fatalf("%s on %s: request %v planned %d", ex.Label, b, ex.Requests[b], ex.Planned[b])
						}
					}
				}
			}
		}
	})
}

// checkPositions fails unless every joined error is an *Error with a
// position.
func checkPositions(t *testing.T, err error) {
	t.Helper()
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	if len(errs) == 0 {
		t.Fatalf("empty error %q", err)
	}
	for _, e := range errs {
		var pe *Error
		if !errors.As(e, &pe) || pe.Line < 1 || pe.Col < 1 || pe.Msg == "" {
			t.Fatalf("error without a position: %q", e)
		}
	}
}

// FuzzPlainInteger checks the reading of plan numbers: a value is read
// without a complaint only from plain decimal digits (a zero fraction
// allowed), and then it is exactly what was written.
func FuzzPlainInteger(f *testing.F) {
	for _, s := range []string{"10", "-3", "10.0", "2.5", "010", "0x10", "0o7", "0b1", "1_000", "+10", "1e12", "1e400", ".inf", ".5", "5.", "-0", "9223372036854775808", "-0x8000000000000000", "1e-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		i, ok, msg := plainInteger(s)
		if !ok && msg == "" {
			t.Fatalf("%q: refused without a message", s)
		}
		if ok && msg == "" {
			if !plainDecimal.MatchString(s) {
				t.Fatalf("%q read as %d without a complaint", s, i)
			}
			if got := strconv.FormatInt(i, 10); strings.TrimSuffix(strings.TrimRight(s, "0"), ".") != got && s != got && !(s[0] == '-' && i == 0) {
				t.Fatalf("%q read as %d", s, i)
			}
		}
	})
}
