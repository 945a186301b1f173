package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// testEngine is an engine served on 127.0.0.1:0 with a client.
type testEngine struct {
	e      *Engine
	client enginev1.EngineClient
	addr   string
	// stopChecked: the test checked Stop's error itself.
	stopChecked atomic.Bool
}

func startEngine(t testing.TB, opts Options) *testEngine {
	t.Helper()
	e, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	te := &testEngine{e: e, client: enginev1.NewEngineClient(cc), addr: lis.Addr().String()}
	t.Cleanup(func() {
		_ = cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil && !te.stopChecked.Load() {
			t.Errorf("Stop: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return te
}

// run is the outcome of one Execute stream.
type run struct {
	started  *enginev1.Started
	progress []*enginev1.Progress
	result   *enginev1.Result
	err      error // the stream's error, if it ended without a Result
}

// execute runs req to its end.
func (te *testEngine) execute(t testing.TB, req *enginev1.ExecuteRequest) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return collect(te.client.Execute(ctx, req))
}

func collect(stream grpc.ServerStreamingClient[enginev1.ExecuteEvent], err error) run {
	if err != nil {
		return run{err: err}
	}
	return collectFrom(stream, run{})
}

// collectFrom reads the rest of stream into r, which holds what was read
// of it before.
func collectFrom(stream grpc.ServerStreamingClient[enginev1.ExecuteEvent], r run) run {
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			if r.result == nil {
				r.err = errors.New("stream ended without a Result")
			}
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		switch e := ev.Event.(type) {
		case *enginev1.ExecuteEvent_Started:
			if r.started != nil || r.result != nil {
				r.err = errors.New("Started out of order")
				return r
			}
			r.started = e.Started
		case *enginev1.ExecuteEvent_Progress:
			if r.started == nil || r.result != nil {
				r.err = errors.New("Progress out of order")
				return r
			}
			if err := e.Progress.DecodeCounters(); err != nil {
				r.err = err
				return r
			}
			r.progress = append(r.progress, e.Progress)
		case *enginev1.ExecuteEvent_Result:
			if r.started == nil || r.result != nil {
				r.err = errors.New("Result out of order")
				return r
			}
			r.result = e.Result
		}
	}
}

// mustResult fails unless the run ended with a Result, and checks the
// accounting every Result must satisfy.
func (r run) mustResult(t testing.TB) *enginev1.Result {
	t.Helper()
	if r.err != nil {
		t.Fatalf("Execute: %v", r.err)
	}
	checkAccounting(t, r.result)
	return r.result
}

// checkAccounting asserts conservation, with the record's own check (the
// one the driver and the gate apply): every planned request has exactly
// one outcome class or was left unsent by a cancel; and the detail
// counters partition their class.
func checkAccounting(t testing.TB, res *enginev1.Result) {
	t.Helper()
	c := res.GetCounters()
	if res.GetPlanned() == 0 {
		// Conserves checks only results that carry planned.
		t.Errorf("result without planned: %v", res)
	}
	br := record.BackendResult{BackendName: res.GetBackendName(), Planned: res.GetPlanned(), Unsent: res.GetUnsent(), Counters: c}
	if err := br.Conserves(); err != nil {
		t.Errorf("conservation: %v; counters %v", err, c)
	}
	if res.GetCancelled() != (res.GetUnsent() > 0) {
		t.Errorf("cancelled = %v with %d unsent", res.GetCancelled(), res.GetUnsent())
	}
	resets := c[record.StreamResets]
	if phases := c[record.ResetsBeforeHeaders] + c[record.ResetsIncompleteBody]; phases != resets {
		t.Errorf("resets %d != phases %d; counters %v", resets, phases, c)
	}
	var reasons uint64
	for _, r := range []string{record.ReasonConnectionTermination, record.ReasonRemoteReset, record.ReasonProtocolError, record.ReasonLocalReset, record.ReasonOverflow} {
		reasons += c[record.StreamResetsPrefix+r]
	}
	if reasons != resets {
		t.Errorf("resets %d != reasons %d; counters %v", resets, reasons, c)
	}
	if cf := c[record.PoolFailureLocal] + c[record.PoolFailureRemote]; cf != c[record.PoolConnectionFailure] {
		t.Errorf("connection failures %d != local + remote %d", c[record.PoolConnectionFailure], cf)
	}
	stats := statsByID(res)
	lat := stats[record.Latency2xx]
	if lat == nil {
		t.Errorf("no %s statistic", record.Latency2xx)
	} else if lat.GetCount() != c[record.HTTP2xx] {
		t.Errorf("%s count %d != http_2xx %d", record.Latency2xx, lat.GetCount(), c[record.HTTP2xx])
	}
	var responses uint64
	for _, k := range []string{record.HTTP1xx, record.HTTP2xx, record.HTTP3xx, record.HTTP4xx, record.HTTP5xx} {
		responses += c[k]
	}
	if record.IsGRPC(c) {
		// A failed call answered 2xx is in no HTTP class: the answered
		// calls are those with a status but a reset or a timeout.
		responses = 0
		for k, v := range c {
			if strings.HasPrefix(k, record.GRPCStatusPrefix) {
				responses += v
			}
		}
		responses -= c[record.StreamResets] + c[record.RequestTimeout]
	}
	if r2r := stats[record.RequestToResponse]; r2r == nil || r2r.GetCount() != responses {
		t.Errorf("%s = %v, want count %d", record.RequestToResponse, r2r, responses)
	}
	for _, st := range res.GetStatistics() {
		if st.GetUnit() != "ns" {
			t.Errorf("%s unit %q", st.GetId(), st.GetUnit())
		}
		if st.GetCount() > 0 && !(st.GetMin() <= st.GetP50() && st.GetP50() <= st.GetP90() && st.GetP90() <= st.GetP99() && st.GetP99() <= st.GetP999() && st.GetP999() <= st.GetMax()) {
			t.Errorf("%s percentiles out of order: %v", st.GetId(), st)
		}
	}
}

func statsByID(res *enginev1.Result) map[string]*enginev1.Statistic {
	m := map[string]*enginev1.Statistic{}
	for _, s := range res.GetStatistics() {
		m[s.GetId()] = s
	}
	return m
}

// want compares the outcome-relevant counters of res with want exactly;
// a counter absent from want must be zero (late sends aside, which depend
// on the machine).
func wantCounters(t testing.TB, res *enginev1.Result, want map[string]uint64) {
	t.Helper()
	got := map[string]uint64{}
	for k, v := range res.GetCounters() {
		if k != record.LateSends {
			got[k] = v
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s = %d (all: %v)", k, v, got)
		}
	}
}

// req is a constant-rate request for url.
func req(id, url string, rate uint32, duration time.Duration) *enginev1.ExecuteRequest {
	return &enginev1.ExecuteRequest{
		ExecutionId: id,
		Label:       "test/" + id,
		Url:         url,
		Rate:        rate,
		Duration:    durationpb.New(duration),
		OpenLoop:    true,
	}
}

// seen is closed the first time a server sees a request: a test that
// needs load in flight waits for it instead of sleeping for a while.
type seen struct {
	once sync.Once
	ch   chan struct{}
}

func newSeen() *seen { return &seen{ch: make(chan struct{})} }

// mark notes a request; the server calls it.
func (s *seen) mark() { s.once.Do(func() { close(s.ch) }) }

// wait blocks until the server saw a request. The bound only ends a hang.
func (s *seen) wait(t testing.TB) {
	t.Helper()
	select {
	case <-s.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the server saw no request in 30 s")
	}
}

// rawServer accepts connections on its listener (TCP on 127.0.0.1:0
// unless given) and hands each to handle. It counts connections.
type rawServer struct {
	lis   net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func newRawServer(t testing.TB, handle func(c net.Conn, n int64)) *rawServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveRaw(t, lis, handle)
}

// serveRaw serves lis as newRawServer does; the test's end closes it and
// waits for every handler.
func serveRaw(t testing.TB, lis net.Listener, handle func(c net.Conn, n int64)) *rawServer {
	s := &rawServer{lis: lis}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			n := s.conns.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				handle(c, n)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url() string { return "http://" + s.addr() + "/" }

func (s *rawServer) addr() string { return s.lis.Addr().String() }

// answerOnce is a rawServer handler that reads one request, writes resp
// and closes the connection.
func answerOnce(resp string) func(c net.Conn, _ int64) {
	return func(c net.Conn, _ int64) {
		if readRequest(bufio.NewReader(c)) != nil {
			return
		}
		_, _ = io.WriteString(c, resp)
	}
}

// readRequest reads one request head (the engine's GET has no body).
func readRequest(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

// takeDecoded takes from tl past cur as a stream does, into a message of
// its own, and decodes the buckets' counters as a driver does.
func takeDecoded(t testing.TB, tl *timeline, cur *cursor, limit int) ([]*enginev1.Bucket, []*enginev1.FailureSample, bool) {
	t.Helper()
	m := newProgressStream()
	more := tl.take(cur, limit, m)
	if err := m.p.DecodeCounters(); err != nil {
		t.Fatal(err)
	}
	return m.p.GetBuckets(), m.p.GetFailureSamples(), more
}
