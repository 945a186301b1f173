package driver

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/template"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sortie-soak/sortie/engine"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/runca"
	"github.com/sortie-soak/sortie/record"
)

// testOptions are DefaultOptions shrunk to test scale: deadlines of a few
// seconds instead of minutes.
func testOptions() Options {
	o := DefaultOptions()
	o.ResolveInterval = 20 * time.Millisecond
	o.ResolveTimeout = 200 * time.Millisecond
	o.StartLead = 400 * time.Millisecond
	o.Drain = time.Second
	o.Grace = 2 * time.Second
	o.AnswerWindow = 2 * time.Second
	o.CancelWait = 2 * time.Second
	o.InterruptWait = 5 * time.Second
	o.InfoTimeout = 2 * time.Second
	// Every test engine serves the test run's mTLS, as a real run's do.
	o.EngineTLS = testTLS().client
	return o
}

// runTLS is the test run's TLS material: its directory (runca's files)
// and both ends' configurations.
type runTLS struct {
	dir            string
	server, client *tls.Config
}

var (
	testTLSOnce sync.Once
	testTLSRun  runTLS
)

// testTLS makes (once) the per-run CA every test engine and driver of
// this package uses; TestMain removes its directory.
func testTLS() runTLS {
	testTLSOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sortie-driver-test-tls-")
		if err != nil {
			panic(err)
		}
		b, err := runca.New(runca.Options{Run: "driver-test", Now: time.Now()})
		if err != nil {
			panic(err)
		}
		if err := b.Write(dir); err != nil {
			panic(err)
		}
		r := runTLS{dir: dir}
		f := func(n string) string { return filepath.Join(dir, n) }
		if r.server, err = runca.ServerConfig(f(runca.EngineCertFile), f(runca.EngineKeyFile), f(runca.CAFile)); err != nil {
			panic(err)
		}
		if r.client, err = runca.ClientConfig(f(runca.DriverCertFile), f(runca.DriverKeyFile), f(runca.CAFile)); err != nil {
			panic(err)
		}
		testTLSRun = r
	})
	return testTLSRun
}

// engineTLSArgs are sortie-engine's flags for the test run's mTLS, with
// targets on loopback allowed.
func engineTLSArgs() []string {
	d := testTLS().dir
	return []string{"--tls-cert", filepath.Join(d, runca.EngineCertFile), "--tls-key", filepath.Join(d, runca.EngineKeyFile),
		"--client-ca", filepath.Join(d, runca.CAFile), "--allow-targets", "127.0.0.1"}
}

// driverTLSArgs are sortie run's flags for the test run's mTLS.
func driverTLSArgs() []string {
	d := testTLS().dir
	return []string{"--client-cert", filepath.Join(d, runca.DriverCertFile), "--client-key", filepath.Join(d, runca.DriverKeyFile),
		"--engine-ca", filepath.Join(d, runca.CAFile)}
}

// runArgs are sortie's arguments for `run` args... over the test run's
// mTLS.
func runArgs(args ...string) []string {
	return append(append([]string{"run"}, driverTLSArgs()...), args...)
}

// testServer is a gRPC server with the test engines' mTLS.
func testServer() *grpc.Server {
	return grpc.NewServer(grpc.Creds(credentials.NewTLS(testTLS().server)))
}

// target is a real HTTP server on loopback that counts what it serves.
type target struct {
	URL    string
	served atomic.Int64
	delay  atomic.Int64 // nanoseconds to wait before answering
}

func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := time.Duration(tg.delay.Load()); d > 0 {
			time.Sleep(d)
		}
		tg.served.Add(1)
		w.Write([]byte("ok\n"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	tg.URL = "http://" + ln.Addr().String() + "/"
	return tg
}

// startEngine runs an engine in this process on 127.0.0.1:0.
func startEngine(t *testing.T, name string, maxConcurrent int) string {
	t.Helper()
	return startEngineWith(t, engine.Options{BackendName: name, MaxConcurrentExecutions: maxConcurrent, Version: "test"})
}

// startEngineWith runs an engine of options o in this process on
// 127.0.0.1:0 and returns its address.
func startEngineWith(t *testing.T, o engine.Options) string {
	t.Helper()
	if o.TLS == nil {
		o.TLS = testTLS().server
	}
	e, err := engine.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go e.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
	})
	return ln.Addr().String()
}

// planData fills a plan template.
type planData struct {
	Backends []string
	URL      string
	// Duration is a plan's executor duration, for the plans that take it.
	Duration string
	// TLSURL is a second, https, target, for the plans that take one.
	TLSURL string
}

// Quoted lists the backends as a YAML flow sequence.
func (d planData) Quoted() string {
	q := make([]string, len(d.Backends))
	for i, b := range d.Backends {
		q[i] = fmt.Sprintf("%q", b)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// writePlan renders a plan template into a temporary file.
func writePlan(t *testing.T, tmpl string, d planData) string {
	t.Helper()
	var b bytes.Buffer
	if err := template.Must(template.New("plan").Parse(tmpl)).Execute(&b, d); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// result is one driver run.
type result struct {
	code           int
	err            error
	stdout, stderr string
	report         *record.Report
	// madeBy is the report's made_by, which the record reader does not
	// keep (grading never needs it).
	madeBy    *record.MadeBy
	stream    []record.Execution
	streamBad int
	// live is the live record the run wrote by default, next to the
	// stream; livePath its path.
	live     *record.Live
	livePath string
	// liveRecord is the report's live_record.
	liveRecord string
}

// runDriver runs `sortie run PLAN -o ... --results-stream ...` in this
// process and reads back what it wrote.
func runDriver(t *testing.T, ctx context.Context, o Options, planPath string, extra ...string) result {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "report.json")
	stream := filepath.Join(dir, "stream.jsonl")
	args := append([]string{"run", planPath, "-o", out, "--results-stream", stream, "--progress", "500ms"}, extra...)
	var stdout, stderr bytes.Buffer
	err := RunOptions(ctx, o, args, &stdout, &stderr)
	res := result{code: cli.Code(err), err: err, stdout: stdout.String(), stderr: stderr.String()}
	t.Logf("sortie %s: exit %d, err %v\nstderr:\n%s", strings.Join(args, " "), res.code, err, res.stderr)
	if src, rerr := record.ReadReportFile(out); rerr == nil {
		res.report = src.Report()
		var whole record.Report
		if b, err := os.ReadFile(out); err == nil && json.Unmarshal(b, &whole) == nil {
			res.madeBy, res.liveRecord = whole.MadeBy, whole.LiveRecord
		}
	}
	if src, serr := record.ReadStreamFile(stream); serr == nil {
		res.stream, res.streamBad = record.Plain(src.All), len(src.Skipped)
	}
	res.livePath = filepath.Join(dir, "stream.live.jsonl")
	if f, err := os.Open(res.livePath); err == nil {
		res.live, _ = record.ReadLive(f)
		f.Close()
	}
	return res
}

// checkTimelines checks that the live record holds, for every whole
// result of the report, a timeline that sums to it class by class, and
// samples that match its buckets; and that the live record is whole (no
// skipped line) and begins with the run's head.
func checkTimelines(t *testing.T, res result) {
	t.Helper()
	if res.live == nil {
		t.Fatalf("no live record at %s", res.livePath)
	}
	if len(res.live.Skipped) != 0 || len(res.live.Heads) != 1 || res.live.Heads[0].MadeBy == nil {
		t.Errorf("live record: skipped lines %v, heads %+v", res.live.Skipped, res.live.Heads)
	}
	if res.liveRecord != res.livePath {
		t.Errorf("report's live_record %q, want %q", res.liveRecord, res.livePath)
	}
	buckets := record.BucketsBySeries(res.live.Buckets)
	samples := map[record.SeriesKey][]record.SampleLine{}
	for _, s := range res.live.Samples {
		k := record.SeriesKey{Label: s.Label, Backend: s.Backend}
		samples[k] = append(samples[k], s)
	}
	for _, e := range res.report.Executions {
		for _, br := range e.Results {
			k := record.SeriesKey{Label: e.Label, Backend: br.Backend}
			if len(buckets[k]) == 0 {
				t.Errorf("%s on %s: no bucket in the live record", e.Label, br.Backend)
				continue
			}
			if err := record.CheckTimeline(buckets[k], br); err != nil {
				t.Errorf("%v", err)
			}
			if err := record.CheckSamples(buckets[k], samples[k]); err != nil {
				t.Errorf("%v", err)
			}
		}
	}
}

// execution finds an execution of the report by label.
func (r result) execution(t *testing.T, label string) record.Execution {
	t.Helper()
	if r.report == nil {
		t.Fatalf("no report")
	}
	for _, e := range r.report.Executions {
		if e.Label == label {
			return e
		}
	}
	t.Fatalf("no execution %q in the report", label)
	return record.Execution{}
}

// backendResult finds one backend's result in an execution.
func backendOf(t *testing.T, e record.Execution, backend string) (record.BackendResult, bool) {
	t.Helper()
	for _, br := range e.Results {
		if br.Backend == backend {
			return br, true
		}
	}
	return record.BackendResult{}, false
}

func backendErrorOf(e record.Execution, backend string) (record.BackendError, bool) {
	for _, be := range e.BackendErrors {
		if be.Backend == backend {
			return be, true
		}
	}
	return record.BackendError{}, false
}

func labelsOf(execs []record.Execution) []string {
	var s []string
	for _, e := range execs {
		s = append(s, e.Label)
	}
	return s
}

// exactResult is the result of execution label on engine, checked to
// conserve planned exactly and to carry want's counters.
func exactResult(t *testing.T, res result, label, engine string, planned uint64, want map[string]uint64) record.BackendResult {
	t.Helper()
	e := res.execution(t, label)
	br, ok := backendOf(t, e, engine)
	if !ok {
		t.Fatalf("%s: no result", label)
	}
	if err := br.Conserves(); err != nil || br.Planned != planned || record.Sum(br.Counters) != planned {
		t.Errorf("%s: planned %d, outcomes %d, conservation %v", label, br.Planned, record.Sum(br.Counters), err)
	}
	for k, v := range want {
		if br.Counters[k] != v {
			t.Errorf("%s: %s = %d, want %d (all %v)", label, k, br.Counters[k], v, br.Counters)
		}
	}
	return br
}
