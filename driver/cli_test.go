package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
)

const validPlan = `version: v1
pools:
  - {name: nodes, services: ["127.0.0.1:1", "127.0.0.1:2"]}
scenarios:
  - name: mesh
    pool: nodes
    executor: {type: constant-rate, rate: 4, duration: 1s, per_backend: true}
    target: "http://127.0.0.1:9/"
`

const unknownFieldPlan = `version: v1
pools:
  - {name: nodes, services: ["127.0.0.1:1"]}
scenarios:
  - name: mesh
    pool: nodes
    executor: {type: constant-rate, rate: 4, duration: 1s, per_backend: true}
    target: "http://127.0.0.1:9/"
    colour: blue
`

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCLIExitCodes(t *testing.T) {
	valid := writeFile(t, "valid.yaml", validPlan)
	invalid := writeFile(t, "invalid.yaml", unknownFieldPlan)
	grpcPlan := writeFile(t, "grpc.yaml", strings.Replace(validPlan, `    target: "http://127.0.0.1:9/"`, `    target: "http://127.0.0.1:9/"
    grpc: {mode: bidi-stream, streams: 4}`, 1))
	wsPlan := writeFile(t, "ws.yaml", strings.Replace(validPlan, `    target: "http://127.0.0.1:9/"`, `    target: "http://127.0.0.1:9/"
    websocket: {binary: true}`, 1))
	tmpStream, tmpReport := filepath.Join(t.TempDir(), "s.jsonl"), filepath.Join(t.TempDir(), "r.json")
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		errHas     string // in the returned error
		stderrHas  string
		stdoutHas  string
		stdoutNone bool
	}{
		{name: "no command", args: nil, code: 2, errHas: "no command", stderrHas: "Usage: sortie <command>"},
		{name: "unknown command", args: []string{"launch"}, code: 2, errHas: `unknown command "launch"`},
		{name: "help", args: []string{"--help"}, code: 0, stderrHas: "Exit codes"},
		{name: "run help", args: []string{"run", "--help"}, code: 0, stderrHas: "progress <label> <backend> <elapsed> 2xx=N", stdoutNone: true},
		{name: "run help lists flags", args: []string{"run", "-h"}, code: 0, stderrHas: "-results-stream FILE"},
		{name: "run without plan", args: []string{"run"}, code: 2, errHas: "run needs a PLAN"},
		{name: "run two plans", args: []string{"run", valid, valid}, code: 2, errHas: "one PLAN"},
		{name: "run unknown flag", args: []string{"run", valid, "--frobnicate"}, code: 2, errHas: "frobnicate"},
		{name: "run bad duration", args: []string{"run", "--progress", "soon", valid}, code: 2, errHas: "progress"},
		{name: "run help documents the status", args: []string{"run", "--help"}, code: 0, stderrHas: "status <label> sent=N answered=N 2xx=N failures=<class>=N,...|none backends=R/B elapsed=<d>/<planned>"},
		{name: "run bad status", args: []string{"run", valid, "--status", "fancy"}, code: 2, errHas: `--status "fancy": want auto, tty, lines or off`},
		{name: "run zero status interval", args: []string{"run", valid, "--status-interval", "0s"}, code: 2, errHas: "--status-interval must be positive"},
		{name: "run help documents the live record", args: []string{"run", "--help"}, code: 0, stderrHas: "-live-record FILE"},
		{name: "run live record is the stream", args: []string{"run", valid, "--results-stream", tmpStream, "--live-record", tmpStream}, code: 2, errHas: "live record " + tmpStream + " is the results stream"},
		{name: "run live record is the report", args: []string{"run", valid, "-o", tmpReport, "--live-record", tmpReport}, code: 2, errHas: "live record " + tmpReport + " is the report"},
		{name: "run negative progress", args: []string{"run", valid, "--progress=-1s"}, code: 2, errHas: "--progress must not be negative"},
		{name: "run bad option", args: []string{"run", valid, "--cancel-wait", "0s"}, code: 2, errHas: "cancel wait must be positive"},
		{name: "run wait too long", args: []string{"run", valid, "--deadline-grace", "2562047h"}, code: 2, errHas: "deadline grace must be at most 24h"},
		{name: "run every problem at once", args: []string{"run", "--cancel-wait", "0s", "--progress=-1s"}, code: 2, errHas: "run needs a PLAN\n--progress must not be negative"},
		{name: "run missing plan", args: []string{"run", filepath.Join(t.TempDir(), "nope.yaml")}, code: 2, errHas: "nope.yaml"},
		{name: "run invalid plan", args: []string{"run", invalid}, code: 2, errHas: "invalid.yaml:9:5"},
		{name: "run report not writable", args: []string{"run", valid, "-o", filepath.Join(t.TempDir(), "no", "such", "dir", "r.json")}, code: 2, errHas: "cannot be written"},
		{name: "run stream not writable", args: []string{"run", valid, "--results-stream", filepath.Join(t.TempDir(), "no", "s.jsonl")}, code: 2, errHas: "results stream"},
		{name: "run stream is a directory", args: []string{"run", valid, "--results-stream", t.TempDir()}, code: 2, errHas: "is a directory"},
		{name: "run live record not writable", args: []string{"run", valid, "--live-record", filepath.Join(t.TempDir(), "no", "l.jsonl")}, code: 2, errHas: "live record"},
		{name: "run report is a device", args: []string{"run", valid, "-o", "/dev/null"}, code: 2, errHas: "/dev/null cannot be written: it is not a regular file"},
		{name: "run every output at once", args: []string{"run", valid, "-o", "/dev/null", "--results-stream", t.TempDir()}, code: 2, errHas: "report /dev/null cannot be written: it is not a regular file (a device)\nresults stream"},
		{name: "run refuses grpc", args: []string{"run", grpcPlan}, code: 2, errHas: "grpc.yaml:9:11: scenario mesh: the grpc block (mode bidi-stream) is valid, but this engine drives gRPC unary only"},
		{name: "validate grpc", args: []string{"validate", grpcPlan}, code: 0, stdoutHas: "grpc: bidi-stream, 4 streams per backend"},
		{name: "validate websocket", args: []string{"validate", wsPlan}, code: 0, stdoutHas: "websocket: 20 streams per backend"},
		{name: "validate", args: []string{"validate", valid}, code: 0, stdoutHas: "mesh"},
		{name: "validate warns of no thresholds", args: []string{"validate", valid}, code: 0, stderrHas: "warning: no threshold judges 1 execution(s) (mesh)"},
		{name: "validate /dev/zero", args: []string{"validate", "/dev/zero"}, code: 2, errHas: "plan /dev/zero is larger than 8 MiB"},
		{name: "validate userinfo", args: []string{"validate", writeFile(t, "u.yaml", strings.Replace(validPlan, "http://", "http://u:p@", 1))}, code: 2, errHas: "carries user information"},
		{name: "validate invalid", args: []string{"validate", invalid}, code: 2, errHas: "invalid.yaml:9:5"},
		{name: "validate help", args: []string{"validate", "--help"}, code: 0, stderrHas: "Usage: sortie validate PLAN"},
		{name: "validate no plan", args: []string{"validate"}, code: 2, errHas: "one PLAN"},
		{name: "compile", args: []string{"compile", valid}, code: 0, stdoutHas: `"execution`},
		{name: "compile invalid", args: []string{"compile", invalid}, code: 2, errHas: "colour"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := RunOptions(context.Background(), testOptions(), tc.args, &stdout, &stderr)
			if got := cli.Code(err); got != tc.code {
				t.Fatalf("exit %d (err %v), want %d\nstderr:\n%s", got, err, tc.code, stderr.String())
			}
			if tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)) {
				t.Errorf("error %v lacks %q", err, tc.errHas)
			}
			if !strings.Contains(stderr.String(), tc.stderrHas) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderrHas, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdoutHas) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdoutHas, stdout.String())
			}
			if tc.stdoutNone && stdout.Len() > 0 {
				t.Errorf("stdout not empty:\n%s", stdout.String())
			}
		})
	}
}

func TestCompileOutputIsJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := RunOptions(context.Background(), testOptions(), []string{"compile", writeFile(t, "p.yaml", validPlan)}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil {
		t.Errorf("compile output is not JSON: %v\n%s", err, stdout.String())
	}
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		pos          []string
		output       string
		json         bool
		stream       string
		progress     time.Duration
		grace, cwait time.Duration
		// status and statusInterval are "auto" and 10s when unset.
		status         string
		statusInterval time.Duration
	}{
		{args: []string{"p.yaml"}, pos: []string{"p.yaml"}, progress: 30 * time.Second, grace: 2 * time.Minute, cwait: DefaultCancelWait},
		{args: []string{"p.yaml", "-o", "r.json", "--json"}, pos: []string{"p.yaml"}, output: "r.json", json: true, progress: 30 * time.Second, grace: 2 * time.Minute, cwait: DefaultCancelWait},
		{args: []string{"--output=r.json", "p.yaml", "--results-stream", "s.jsonl", "--progress", "5s"}, pos: []string{"p.yaml"}, output: "r.json", stream: "s.jsonl", progress: 5 * time.Second, grace: 2 * time.Minute, cwait: DefaultCancelWait},
		{args: []string{"--deadline-grace", "10s", "--cancel-wait=3s", "p.yaml", "--progress=0"}, pos: []string{"p.yaml"}, grace: 10 * time.Second, cwait: 3 * time.Second},
		{args: []string{"a", "b"}, pos: []string{"a", "b"}, progress: 30 * time.Second, grace: 2 * time.Minute, cwait: DefaultCancelWait},
		{args: []string{"--status", "lines", "p.yaml", "--status-interval=3s"}, pos: []string{"p.yaml"}, progress: 30 * time.Second, grace: 2 * time.Minute, cwait: DefaultCancelWait,
			status: "lines", statusInterval: 3 * time.Second},
	} {
		if tc.status == "" {
			tc.status, tc.statusInterval = "auto", 10*time.Second
		}
		o := DefaultOptions()
		var f runFlags
		var stderr bytes.Buffer
		pos, err := parseInterspersed(newRunFlagSet(&o, &f, &stderr), tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if d := cmp.Diff(tc.pos, pos); d != "" {
			t.Errorf("%v: positional (-want +got):\n%s", tc.args, d)
		}
		if f.output != tc.output || f.json != tc.json || f.stream != tc.stream || f.progress != tc.progress || o.Grace != tc.grace || o.CancelWait != tc.cwait ||
			f.status != tc.status || f.statusInterval != tc.statusInterval {
			t.Errorf("%v: flags %+v grace %v cancel-wait %v", tc.args, f, o.Grace, o.CancelWait)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := testOptions().Validate(); err != nil {
		t.Errorf("test options: %v", err)
	}
	var zero Options
	err := zero.Validate()
	for _, want := range []string{"resolve interval", "cancel wait", "interrupt wait", "info timeout", "clock slack", "status tick must be at least 10ms", "status redraw"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("zero options: error %v lacks %q", err, want)
		}
	}
}

// fakeResolver answers from a list of answers, one per lookup; the last
// one repeats.
type fakeResolver struct {
	answers [][]net.IPAddr
	err     error
	calls   atomic.Int32
}

func (f *fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	n := int(f.calls.Add(1)) - 1
	if f.err != nil {
		return nil, f.err
	}
	if n >= len(f.answers) {
		n = len(f.answers) - 1
	}
	return f.answers[n], nil
}

func ips(ss ...string) []net.IPAddr {
	var out []net.IPAddr
	for _, s := range ss {
		out = append(out, net.IPAddr{IP: net.ParseIP(s)})
	}
	return out
}

func TestResolveDNS(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers [][]net.IPAddr
		err     error
		want    []string
		calls   int32
		errHas  string
	}{
		{name: "sorted and de-duplicated", answers: [][]net.IPAddr{ips("10.0.0.10", "10.0.0.9", "::1", "10.0.0.9", "::ffff:10.0.0.10")},
			want: []string{"10.0.0.9:8443", "10.0.0.10:8443", "[::1]:8443"}, calls: 1},
		{name: "empty then answered", answers: [][]net.IPAddr{nil, nil, ips("10.0.0.1")}, want: []string{"10.0.0.1:8443"}, calls: 3},
		// Every 20ms for 200ms: the lookups at 0, 20ms, ..., 200ms.
		{name: "never answered", answers: [][]net.IPAddr{nil}, errHas: "never resolved: 11 lookups over 200ms, the last one: no A or AAAA records", calls: 11},
		{name: "lookup fails", err: errors.New("no such host"), errHas: "11 lookups over 200ms, the last one: no such host", calls: 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			f := &fakeResolver{answers: tc.answers, err: tc.err}
			o.Resolver = f
			clk := clock.NewFake(time.Unix(0, 0))
			o.Clock = clk
			var got []string
			done := make(chan error, 1)
			go func() {
				var err error
				got, err = resolveDNS(context.Background(), o, "engines.example:8443")
				done <- err
			}()
			err, ended := clk.Drive(o.ResolveInterval, 100, done)
			if !ended {
				t.Fatal("resolveDNS did not give up")
			}
			if n := f.calls.Load(); n != tc.calls {
				t.Errorf("%d lookups, want %d", n, tc.calls)
			}
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err %v, want one with %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

const dnsPlan = `version: v1
pools:
  - {name: nodes, dns: "engines.test:{{index .Backends 0}}"}
scenarios:
  - name: mesh
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 4, duration: 1s, per_backend: true, open_loop: true}
    target: "{{.URL}}"
    thresholds: ["counter:benchmark.http_2xx == {{index .Backends 1}}"]
`

func TestIntegrationDNSPool(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load")
	}
	tg := newTarget(t)
	addr := startEngine(t, "", 0)
	_, port, _ := net.SplitHostPort(addr)
	for _, tc := range []struct {
		name    string
		answers [][]net.IPAddr
		want2xx string
		code    int
		stderr  string
	}{
		// Twice the same engine in the answer: one backend.
		{name: "resolved after retries", answers: [][]net.IPAddr{nil, ips("127.0.0.1", "127.0.0.1")}, want2xx: "4", code: 0, stderr: "  PASS mesh (scenario mesh, "},
		{name: "threshold fails", answers: [][]net.IPAddr{ips("127.0.0.1")}, want2xx: "5", code: 1, stderr: "  FAIL mesh (scenario mesh, "},
		{name: "never resolves", answers: [][]net.IPAddr{nil}, want2xx: "4", code: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tg.served.Load()
			o := testOptions()
			o.Resolver = &fakeResolver{answers: tc.answers}
			planPath := writePlan(t, dnsPlan, planData{Backends: []string{port, tc.want2xx}, URL: tg.URL})
			res := runDriver(t, context.Background(), o, planPath)
			if res.code != tc.code {
				t.Fatalf("exit %d, want %d", res.code, tc.code)
			}
			if !strings.Contains(res.stderr, tc.stderr) {
				t.Errorf("stderr lacks %q", tc.stderr)
			}
			if tc.code == 2 {
				if res.report != nil || strings.Contains(res.stderr, "running") || tg.served.Load() != before {
					t.Errorf("load or a report before the pool resolved")
				}
				if !strings.Contains(res.err.Error(), "never resolved") {
					t.Errorf("error %v", res.err)
				}
				return
			}
			e := res.execution(t, "mesh")
			if e.DNS != "engines.test:"+port || len(e.Backends) != 1 || e.Backends[0] != "127.0.0.1:"+port {
				t.Errorf("dns %q backends %v", e.DNS, e.Backends)
			}
			if !strings.Contains(res.stdout, "engines.test:"+port+" resolved to 127.0.0.1:"+port) {
				t.Errorf("summary lacks the resolution:\n%s", res.stdout)
			}
		})
	}
}

// TestReportAndStreamSameFile: a report written over the results stream
// would destroy it when it is renamed into place, so a run that names one
// file for both, by any name, is refused before anything else; so is a
// report path that is a directory. The stream is left as it was.
func TestReportAndStreamSameFile(t *testing.T) {
	valid := writeFile(t, "valid.yaml", validPlan)
	const kept = `{"label":"earlier/run"}` + "\n"
	for _, tc := range []struct {
		name string
		// paths returns the -o and --results-stream arguments, and the
		// stream file whose content must survive ("" for none).
		paths  func(t *testing.T, dir string) (report, stream, survivor string)
		errHas string
	}{
		{name: "one path", errHas: "is the results stream", paths: func(t *testing.T, dir string) (string, string, string) {
			p := filepath.Join(dir, "run.json")
			return p, p, p
		}},
		{name: "one path, neither exists", errHas: "is the results stream", paths: func(t *testing.T, dir string) (string, string, string) {
			p := filepath.Join(dir, "new.json")
			return p, p, ""
		}},
		{name: "spelled two ways", errHas: "is the results stream", paths: func(t *testing.T, dir string) (string, string, string) {
			t.Chdir(dir)
			p := filepath.Join(dir, "run.json")
			return "./run.json", p, p
		}},
		{name: "stream through a symlink", errHas: "is the results stream", paths: linked(os.Symlink, false)},
		{name: "report through a symlink", errHas: "is the results stream", paths: linked(os.Symlink, true)},
		{name: "hard link", errHas: "is the results stream", paths: linked(os.Link, false)},
		{name: "through a symlinked directory, neither exists", errHas: "is the results stream", paths: func(t *testing.T, dir string) (string, string, string) {
			d := filepath.Join(dir, "d")
			must(t, os.Mkdir(d, 0o755))
			must(t, os.Symlink(d, filepath.Join(dir, "alias")))
			return filepath.Join(dir, "alias", "r.json"), filepath.Join(d, "r.json"), ""
		}},
		{name: "stream through a dangling symlink to the report", errHas: "is the results stream", paths: func(t *testing.T, dir string) (string, string, string) {
			p := filepath.Join(dir, "new.json")
			l := filepath.Join(dir, "link.jsonl")
			must(t, os.Symlink("new.json", l))
			return p, l, ""
		}},
		{name: "report is a directory", errHas: "is a directory", paths: func(t *testing.T, dir string) (string, string, string) {
			d := filepath.Join(dir, "out")
			must(t, os.Mkdir(d, 0o755))
			return d, filepath.Join(dir, "s.jsonl"), ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "run.json"), []byte(kept), 0o644))
			report, stream, survivor := tc.paths(t, dir)
			var stdout, stderr bytes.Buffer
			err := RunOptions(context.Background(), testOptions(), []string{"run", valid, "-o", report, "--results-stream", stream}, &stdout, &stderr)
			if got := cli.Code(err); got != 2 || err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("exit %d, err %v; want 2 and %q", got, err, tc.errHas)
			}
			if strings.Contains(stderr.String(), "running") {
				t.Errorf("load was started:\n%s", stderr.String())
			}
			if survivor != "" {
				if b, err := os.ReadFile(survivor); err != nil || string(b) != kept {
					t.Errorf("the stream holds %q (%v), want %q as it was", b, err, kept)
				}
			}
		})
	}
	// Two files side by side are fine: the run goes on to its (lost)
	// backends.
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := RunOptions(context.Background(), testOptions(), []string{"run", valid, "-o", filepath.Join(dir, "r.json"), "--results-stream", filepath.Join(dir, "r.jsonl")}, &stdout, &stderr)
	if got := cli.Code(err); got != 1 {
		t.Errorf("two files: exit %d (%v), want 1 from the unreachable backends", got, err)
	}
}

// linked makes a second name for the stream run.json with link; the
// report gets it when onReport, else the stream does.
func linked(link func(oldname, newname string) error, onReport bool) func(t *testing.T, dir string) (string, string, string) {
	return func(t *testing.T, dir string) (string, string, string) {
		p, l := filepath.Join(dir, "run.json"), filepath.Join(dir, "other-name")
		must(t, link(p, l))
		if onReport {
			return l, p, p
		}
		return p, l, p
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
