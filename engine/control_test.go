package engine

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

func okServer(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// waitRunning polls Info until n executions run.
func waitRunning(t *testing.T, te *testEngine, n int) *enginev1.InfoResponse {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := te.client.Info(context.Background(), &enginev1.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(info.GetRunning()) == n {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("running %v, want %d executions", info.GetRunning(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startStream starts an Execute whose events are collected in the
// background.
func startStream(t *testing.T, te *testEngine, r *enginev1.ExecuteRequest) <-chan run {
	t.Helper()
	ch := make(chan run, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	go func() {
		defer cancel()
		ch <- collect(te.client.Execute(ctx, r))
	}()
	return ch
}

func TestExactCounts(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	t.Run("two workers", func(t *testing.T) {
		t.Parallel()
		r := req("workers", srv.URL, 10, 2*time.Second)
		r.Workers = 2
		res := te.execute(t, r).mustResult(t)
		wantCounters(t, res, map[string]uint64{record.HTTP2xx: 40})
		if res.GetPlanned() != 40 {
			t.Errorf("planned %d, want 40", res.GetPlanned())
		}
	})
	t.Run("ramp then hold", func(t *testing.T) {
		t.Parallel()
		r := req("ramp", srv.URL, 20, 2*time.Second)
		r.Ramp = durationpb.New(time.Second)
		res := te.execute(t, r).mustResult(t)
		wantCounters(t, res, map[string]uint64{record.HTTP2xx: 30})
		if res.GetPlanned() != 30 {
			t.Errorf("planned %d, want 10 + 20", res.GetPlanned())
		}
	})
}

func TestStartTimeIsExact(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	a, b := startEngine(t, Options{BackendName: "a"}), startEngine(t, Options{BackendName: "b"})
	start := time.Now().Add(300 * time.Millisecond).Truncate(time.Microsecond).Add(123)
	var runs []<-chan run
	for _, te := range []*testEngine{a, b} {
		r := req("shared-start", srv.URL, 10, 300*time.Millisecond)
		r.StartTime = timestamppb.New(start)
		runs = append(runs, startStream(t, te, r))
	}
	for i, ch := range runs {
		got := <-ch
		res := got.mustResult(t)
		if !got.started.GetStartTime().AsTime().Equal(start) {
			t.Errorf("engine %d: Started.start_time %v, want %v", i, got.started.GetStartTime().AsTime(), start)
		}
		if !res.GetStartedAt().AsTime().Equal(start) {
			t.Errorf("engine %d: started_at %v, want %v", i, res.GetStartedAt().AsTime(), start)
		}
		wantCounters(t, res, map[string]uint64{record.HTTP2xx: 3})
	}
}

func TestCapRefusal(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{MaxConcurrentExecutions: 2, BackendName: "node-a"})
	first := startStream(t, te, req("long-1", srv.URL, 10, 20*time.Second))
	waitRunning(t, te, 1)
	second := startStream(t, te, req("long-2", srv.URL, 10, 20*time.Second))
	info := waitRunning(t, te, 2)
	if info.GetMaxConcurrentExecutions() != 2 || info.GetBackendName() != "node-a" {
		t.Errorf("Info = %v", info)
	}
	got := te.execute(t, req("third", srv.URL, 10, time.Second))
	if status.Code(got.err) != codes.ResourceExhausted {
		t.Fatalf("third Execute: %v, want RESOURCE_EXHAUSTED", got.err)
	}
	msg := status.Convert(got.err).Message()
	for _, want := range []string{"cap of 2 concurrent executions", "--max-concurrent-executions", "running: test/long-1, test/long-2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	for _, id := range []string{"long-1", "long-2"} {
		if r, err := te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: id}); err != nil || !r.GetFound() {
			t.Errorf("Cancel(%s) = %v, %v", id, r, err)
		}
	}
	for _, ch := range []<-chan run{first, second} {
		res := (<-ch).mustResult(t)
		if !res.GetCancelled() {
			t.Errorf("%s not cancelled", res.GetExecutionId())
		}
	}
	waitRunning(t, te, 0)
}

func TestCancelReturnsCounters(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	const planned = 20 * 60
	r := req("to-cancel", srv.URL, 20, time.Minute)
	r.ProgressInterval = durationpb.New(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := te.client.Execute(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	// Read until a snapshot counts an answer: the execution has sent and
	// reported something before the cancel, however slow the machine.
	var got run
	for answered := false; !answered; {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("before the cancel: %v", err)
		}
		switch e := ev.Event.(type) {
		case *enginev1.ExecuteEvent_Started:
			got.started = e.Started
		case *enginev1.ExecuteEvent_Progress:
			if err := e.Progress.DecodeCounters(); err != nil {
				t.Fatal(err)
			}
			got.progress = append(got.progress, e.Progress)
			answered = e.Progress.GetCounters()[record.HTTP2xx] > 0
		case *enginev1.ExecuteEvent_Result:
			t.Fatalf("Result before the cancel: %v", e.Result)
		}
	}
	if r, err := te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: "to-cancel"}); err != nil || !r.GetFound() {
		t.Fatalf("Cancel = %v, %v", r, err)
	}
	got = collectFrom(stream, got)
	res := got.mustResult(t)
	if !res.GetCancelled() || res.GetPlanned() != planned {
		t.Errorf("cancelled %v planned %d, want true and the full plan %d", res.GetCancelled(), res.GetPlanned(), planned)
	}
	// The cancel came long before the minute was over.
	sent := res.GetCounters()[record.HTTP2xx]
	if sent == 0 || sent >= planned || sent+res.GetUnsent() != planned {
		t.Errorf("2xx %d + unsent %d, want some sent and the rest unsent", sent, res.GetUnsent())
	}
	// Progress snapshots are cumulative and summaries only.
	var prev uint64
	for _, p := range got.progress {
		n := p.GetCounters()[record.HTTP2xx]
		if n < prev || p.GetLatencyCount() != n {
			t.Errorf("progress %v after %d", p, prev)
		}
		if n > 0 && (p.GetLatencyMeanNs() <= 0 || p.GetLatencyMaxNs() <= 0) {
			t.Errorf("progress latency summary %v", p)
		}
		prev = n
	}
	if r, err := te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: "to-cancel"}); err != nil || r.GetFound() {
		t.Errorf("second Cancel = %v, %v, want not found", r, err)
	}
}

func TestCancelBeforeStart(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	r := req("future", srv.URL, 10, time.Second)
	r.StartTime = timestamppb.New(time.Now().Add(30 * time.Second))
	ch := startStream(t, te, r)
	waitRunning(t, te, 1)
	if _, err := te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: "future"}); err != nil {
		t.Fatal(err)
	}
	res := (<-ch).mustResult(t)
	if res.GetUnsent() != 10 || record.Sum(res.GetCounters()) != 0 || res.GetElapsed().AsDuration() != 0 {
		t.Errorf("result %v, want all 10 unsent, no outcome, no elapsed", res)
	}
}

func TestStopWhileRunning(t *testing.T) {
	t.Parallel()
	inFlight := newSeen()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.mark()
		time.Sleep(300 * time.Millisecond)
	}))
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	ch := startStream(t, te, req("stopped", srv.URL, 20, 20*time.Second))
	// Stop while a request is in flight (the server holds it 300 ms).
	inFlight.wait(t)
	stopped := make(chan error, 1)
	go func() { stopped <- te.e.Stop(context.Background()) }()
	got := <-ch
	res := got.mustResult(t)
	if !res.GetCancelled() {
		t.Error("not cancelled")
	}
	// Requests in flight when Stop came got their drain and answered.
	c := res.GetCounters()
	if c[record.HTTP2xx] == 0 || c[record.InflightLost] != 0 || c[record.StreamResets] != 0 {
		t.Errorf("counters %v, want answers and nothing lost", c)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	after := te.execute(t, req("after-stop", srv.URL, 10, time.Second))
	if status.Code(after.err) != codes.Unavailable {
		t.Errorf("Execute after Stop: %v, want UNAVAILABLE", after.err)
	}
	if err := te.e.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestStopRefusesNewWhileDraining(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := newExecution(&spec{id: "x", label: "x"}, e.ctx)
	if err := e.register(x); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	sp, err := parseSpec(req("y", srv.URL, 1, time.Second), time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	y := newExecution(sp, e.ctx)
	if err := e.register(y); status.Code(err) != codes.Unavailable {
		t.Errorf("register while stopping: %v, want UNAVAILABLE", err)
	}
}

func TestStopDeadlineAbortsInFlight(t *testing.T) {
	t.Parallel()
	inFlight := newSeen()
	srv := newRawServer(t, func(c net.Conn, _ int64) {
		if readRequest(bufio.NewReader(c)) == nil {
			inFlight.mark()
		}
		_, _ = io.Copy(io.Discard, c)
	})
	te := startEngine(t, Options{})
	ch := startStream(t, te, req("aborted", srv.url(), 20, 20*time.Second))
	// Stop once a request is in flight; it is never answered.
	inFlight.wait(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	te.stopChecked.Store(true)
	if err := te.e.Stop(ctx); err == nil {
		t.Error("Stop past its deadline returned nil")
	}
	res := (<-ch).mustResult(t)
	c := res.GetCounters()
	if c[record.StreamResetsPrefix+record.ReasonLocalReset] == 0 || c[record.StreamResets] != c[record.StreamResetsPrefix+record.ReasonLocalReset] {
		t.Errorf("counters %v, want every in-flight request a local reset", c)
	}
}

func TestDuplicateID(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	ch := startStream(t, te, req("dup", srv.URL, 10, 20*time.Second))
	waitRunning(t, te, 1)
	got := te.execute(t, req("dup", srv.URL, 10, time.Second))
	if status.Code(got.err) != codes.AlreadyExists {
		t.Errorf("duplicate Execute: %v, want ALREADY_EXISTS", got.err)
	}
	_, _ = te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: "dup"})
	(<-ch).mustResult(t)
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	te := startEngine(t, Options{})
	named := startEngine(t, Options{BackendName: "node-a"})
	good := func() *enginev1.ExecuteRequest { return req("bad", "http://127.0.0.1:1/", 10, time.Second) }
	tests := []struct {
		name   string
		mutate func(r *enginev1.ExecuteRequest)
		code   codes.Code
		want   string
		engine *testEngine
	}{
		{"no id", func(r *enginev1.ExecuteRequest) { r.ExecutionId = "" }, codes.InvalidArgument, "execution_id", nil},
		{"bad scheme", func(r *enginev1.ExecuteRequest) { r.Url = "ftp://127.0.0.1/" }, codes.InvalidArgument, `url: scheme "ftp"`, nil},
		{"bad url", func(r *enginev1.ExecuteRequest) { r.Url = "http://[::1" }, codes.InvalidArgument, "url:", nil},
		{"no host", func(r *enginev1.ExecuteRequest) { r.Url = "http:///x" }, codes.InvalidArgument, "has no host", nil},
		{"rate 0", func(r *enginev1.ExecuteRequest) { r.Rate = 0 }, codes.InvalidArgument, "rate: must be at least 1", nil},
		{"no duration", func(r *enginev1.ExecuteRequest) { r.Duration = nil }, codes.InvalidArgument, "duration: must be positive", nil},
		{"negative duration", func(r *enginev1.ExecuteRequest) { r.Duration = durationpb.New(-time.Second) }, codes.InvalidArgument, "duration:", nil},
		{"not whole", func(r *enginev1.ExecuteRequest) { r.Rate = 3; r.Duration = durationpb.New(500 * time.Millisecond) }, codes.InvalidArgument, "1.5 requests, not a whole number", nil},
		{"ramp not whole", func(r *enginev1.ExecuteRequest) {
			r.Rate = 3
			r.Duration = durationpb.New(2 * time.Second)
			r.Ramp = durationpb.New(time.Second)
		}, codes.InvalidArgument, "ramp of 1s to 3/s plans 1.5 requests", nil},
		{"ramp too long", func(r *enginev1.ExecuteRequest) { r.Ramp = durationpb.New(2 * time.Second) }, codes.InvalidArgument, "ramp:", nil},
		{"start too early", func(r *enginev1.ExecuteRequest) { r.StartTime = timestamppb.New(time.Now().Add(-11 * time.Second)) }, codes.InvalidArgument, "start_time:", nil},
		{"bad header", func(r *enginev1.ExecuteRequest) {
			r.Headers = []*enginev1.Header{{Name: "X-Ok", Value: "a"}, {Name: "Bad Name", Value: "b"}}
		}, codes.InvalidArgument, "headers[1]", nil},
		{"header injection", func(r *enginev1.ExecuteRequest) { r.Headers = []*enginev1.Header{{Name: "X", Value: "a\r\nEvil: 1"}} }, codes.InvalidArgument, "headers[0]", nil},
		{"content length header", func(r *enginev1.ExecuteRequest) { r.Headers = []*enginev1.Header{{Name: "Content-Length", Value: "3"}} }, codes.InvalidArgument, "set by the engine", nil},
		{"bad method", func(r *enginev1.ExecuteRequest) { r.Method = "GE T" }, codes.InvalidArgument, "method:", nil},
		{"bad ca", func(r *enginev1.ExecuteRequest) {
			r.Url = "https://127.0.0.1:1/"
			r.Tls = &enginev1.TLS{CaPem: []byte("nope")}
		}, codes.InvalidArgument, "tls.ca_pem", nil},
		{"progress too often", func(r *enginev1.ExecuteRequest) { r.ProgressInterval = durationpb.New(time.Millisecond) }, codes.InvalidArgument, "progress_interval", nil},
		{"statsd host name", func(r *enginev1.ExecuteRequest) {
			r.Stats = &enginev1.Stats{Address: "statsd.example:8125", Scenario: "s", Target: "t", Backend: "b"}
		}, codes.InvalidArgument, "stats.address", nil},
		{"statsd without backend", func(r *enginev1.ExecuteRequest) {
			r.Stats = &enginev1.Stats{Address: "127.0.0.1:8125", Scenario: "s", Target: "t"}
		}, codes.FailedPrecondition, "--backend-name", nil},
		{"bucket too narrow", func(r *enginev1.ExecuteRequest) { r.BucketWidth = durationpb.New(50 * time.Millisecond) }, codes.InvalidArgument, "bucket_width: 50ms is not between 100ms and 1h0m0s", nil},
		{"bucket too wide", func(r *enginev1.ExecuteRequest) { r.BucketWidth = durationpb.New(2 * time.Hour) }, codes.InvalidArgument, "bucket_width: 2h0m0s is not between", nil},
		{"bucket not whole ms", func(r *enginev1.ExecuteRequest) { r.BucketWidth = durationpb.New(1500 * time.Microsecond) }, codes.InvalidArgument, "bucket_width: 1.5ms is not a whole number of milliseconds", nil},
		{"negative bucket", func(r *enginev1.ExecuteRequest) { r.BucketWidth = durationpb.New(-time.Second) }, codes.InvalidArgument, "bucket_width: -1s must not be negative", nil},
		{"too many buckets", func(r *enginev1.ExecuteRequest) {
			r.Duration = durationpb.New(3 * time.Hour)
			r.BucketWidth = durationpb.New(100 * time.Millisecond)
		}, codes.InvalidArgument, "bucket_width: 100ms makes 108000 buckets of a 3h0m0s schedule, more than 100000", nil},
		{"bucket over 2^32 requests", func(r *enginev1.ExecuteRequest) {
			r.Rate = 1 << 31
			r.Workers = 2
			r.BucketWidth = durationpb.New(time.Second)
		}, codes.InvalidArgument, "more than 2^32", nil},
		{"sample budget too big", func(r *enginev1.ExecuteRequest) { r.SampleBudget = 100_001 }, codes.InvalidArgument, "sample_budget: 100001 is more than 100000", nil},
		{"every problem at once", func(r *enginev1.ExecuteRequest) {
			r.Url = "gopher://x/"
			r.Rate = 0
			r.Timeout = durationpb.New(-time.Second)
		}, codes.InvalidArgument, "url: scheme \"gopher\"", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.mutate(r)
			e := te
			if tt.engine != nil {
				e = tt.engine
			}
			got := e.execute(t, r)
			if status.Code(got.err) != tt.code || !strings.Contains(status.Convert(got.err).Message(), tt.want) {
				t.Errorf("Execute: %v, want %v containing %q", got.err, tt.code, tt.want)
			}
			if got.started != nil {
				t.Error("a refused execution sent Started")
			}
		})
	}
	// The same stats request is fine on an engine with a name.
	r := good()
	r.Rate, r.Duration = 1, durationpb.New(time.Second)
	r.Stats = &enginev1.Stats{Address: "127.0.0.1:9", Scenario: "s", Target: "t"}
	named.execute(t, r).mustResult(t)
	// All problems are listed together.
	got := te.execute(t, func() *enginev1.ExecuteRequest {
		r := good()
		r.Url, r.Rate, r.Timeout = "gopher://x/", 0, durationpb.New(-time.Second)
		return r
	}())
	msg := status.Convert(got.err).Message()
	for _, want := range []string{"url:", "rate:", "timeout:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// A driver that goes away leaves its execution running: no stream is
// needed for the load to go on to its planned end (the driver may come
// back with Attach).
func TestClientGoneRunsOn(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := te.client.Execute(ctx, req("orphan", srv.URL, 10, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // Started
		t.Fatal(err)
	}
	waitRunning(t, te, 1)
	cancel()
	waitRunning(t, te, 0)
	got := collect(te.client.Attach(context.Background(), &enginev1.AttachRequest{ExecutionId: "orphan"}))
	res := got.mustResult(t)
	if res.GetCancelled() || res.GetCounters()[record.HTTP2xx] != res.GetPlanned() {
		t.Errorf("orphan: cancelled %v, %d 2xx of %d planned; want it whole", res.GetCancelled(), res.GetCounters()[record.HTTP2xx], res.GetPlanned())
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	te := startEngine(t, Options{BackendName: "node-b", Version: "v9.9.9", MaxConcurrentExecutions: 3})
	info, err := te.client.Info(context.Background(), &enginev1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetVersion() != "v9.9.9" || info.GetBackendName() != "node-b" || info.GetMaxConcurrentExecutions() != 3 || len(info.GetRunning()) != 0 {
		t.Errorf("Info = %v", info)
	}
	// The host and build, each against a source of its own.
	if info.GetCpus() != uint32(runtime.NumCPU()) || info.GetGomaxprocs() != uint32(runtime.GOMAXPROCS(0)) || info.GetGoVersion() != runtime.Version() {
		t.Errorf("Info host: cpus %d gomaxprocs %d go %q, want %d %d %q", info.GetCpus(), info.GetGomaxprocs(), info.GetGoVersion(),
			runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	}
	if release, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		if want := strings.TrimSpace(string(release)); info.GetKernel() != want {
			t.Errorf("Info kernel %q, want %q (/proc/sys/kernel/osrelease)", info.GetKernel(), want)
		}
	} else if runtime.GOOS == "linux" {
		t.Fatal(err)
	}
}

func TestRequestBytes(t *testing.T) {
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r:
		default:
		}
	}))
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	r := req("bytes", srv.URL+"/path?q=1", 1, time.Second)
	r.Method = "POST"
	r.Body = []byte("payload")
	r.Headers = []*enginev1.Header{{Name: "Host", Value: "svc-1.mesh"}, {Name: "User-Agent", Value: "sortie-soak"}, {Name: "X-Trace", Value: "abc"}}
	te.execute(t, r).mustResult(t)
	hr := <-got
	if hr.Method != "POST" || hr.Host != "svc-1.mesh" || hr.UserAgent() != "sortie-soak" || hr.Header.Get("X-Trace") != "abc" ||
		hr.URL.RequestURI() != "/path?q=1" || hr.ContentLength != 7 {
		t.Errorf("request %s %s host %q ua %q trace %q length %d", hr.Method, hr.URL, hr.Host, hr.UserAgent(), hr.Header.Get("X-Trace"), hr.ContentLength)
	}
}
