package driver

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// scripted is a gRPC engine on loopback that behaves as told, for the
// cases a real engine does not produce on demand: an answer inside the
// answer window, a stream that ends without a result, an engine that
// ignores cancels, a rejection.
type scripted struct {
	enginev1.UnimplementedEngineServer
	// behave runs one Execute after Started was sent (unless it returns
	// before sending it itself; see noStart).
	behave  func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error
	noStart error // returned before Started when set

	mu        sync.Mutex
	cancelled map[string]chan struct{}
}

func (s *scripted) cancelCh(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancelled == nil {
		s.cancelled = map[string]chan struct{}{}
	}
	ch, ok := s.cancelled[id]
	if !ok {
		ch = make(chan struct{})
		s.cancelled[id] = ch
	}
	return ch
}

func (s *scripted) Execute(req *enginev1.ExecuteRequest, stream grpc.ServerStreamingServer[enginev1.ExecuteEvent]) error {
	if s.noStart != nil {
		return s.noStart
	}
	s.cancelCh(req.GetExecutionId())
	if err := stream.Send(&enginev1.ExecuteEvent{Event: &enginev1.ExecuteEvent_Started{Started: &enginev1.Started{
		ExecutionId: req.GetExecutionId(), BackendName: "scripted", StartTime: req.GetStartTime()}}}); err != nil {
		return err
	}
	send := func(r *enginev1.Result) error {
		return stream.Send(&enginev1.ExecuteEvent{Event: &enginev1.ExecuteEvent_Result{Result: r}})
	}
	return s.behave(s, req, send, stream.Context())
}

func (s *scripted) Cancel(_ context.Context, req *enginev1.CancelRequest) (*enginev1.CancelResponse, error) {
	s.mu.Lock()
	ch, ok := s.cancelled[req.GetExecutionId()]
	if ok {
		delete(s.cancelled, req.GetExecutionId())
	}
	s.mu.Unlock()
	if ok {
		close(ch)
	}
	return &enginev1.CancelResponse{Found: ok}, nil
}

func (s *scripted) Info(context.Context, *enginev1.InfoRequest) (*enginev1.InfoResponse, error) {
	return &enginev1.InfoResponse{MaxConcurrentExecutions: 3}, nil
}

func serveScripted(t *testing.T, s *scripted) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	enginev1.RegisterEngineServer(srv, s)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// result builds the Result of a whole execution of n requests.
func wholeResult(req *enginev1.ExecuteRequest, n uint64, elapsed time.Duration, cancelled bool) *enginev1.Result {
	return &enginev1.Result{
		ExecutionId: req.GetExecutionId(), BackendName: "scripted",
		Counters:  map[string]uint64{record.HTTP2xx: n},
		StartedAt: req.GetStartTime(), Elapsed: durationpb.New(elapsed), Cancelled: cancelled, Planned: n,
	}
}

// sleepUntil waits until the request's start time plus d.
func sleepUntil(req *enginev1.ExecuteRequest, d time.Duration, ctx context.Context) error {
	select {
	case <-time.After(time.Until(req.GetStartTime().AsTime().Add(d))):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

const (
	scriptDuration = 300 * time.Millisecond
	scriptTimeout  = 100 * time.Millisecond
)

func scriptOptions() Options {
	o := testOptions()
	o.StartLead = 100 * time.Millisecond
	o.Drain = 0
	o.Grace = 0
	o.AnswerWindow = time.Second
	o.CancelWait = time.Second
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return o
}

// runScripted runs one execution on the scripted backends.
func runScripted(t *testing.T, o Options, ctx context.Context, backends ...string) (record.Execution, string) {
	t.Helper()
	ex := &execRun{label: "s/t", rate: 10, perBackend: true, duration: scriptDuration, timeout: scriptTimeout,
		requests: map[string]*enginev1.ExecuteRequest{}, planned: map[string]uint64{}}
	for _, b := range backends {
		ex.requests[b] = &enginev1.ExecuteRequest{Label: "s/t", Url: "http://127.0.0.1:9/", Rate: 10,
			Duration: durationpb.New(scriptDuration), Timeout: durationpb.New(scriptTimeout)}
		ex.planned[b] = 3
	}
	sc := &scenarioRun{name: "s", pool: "p", backends: backends, stages: []*stageRun{{execs: []*execRun{ex}}}}
	var lines bytes.Buffer
	r := &runner{opts: o, log: o.Logger, lines: &lineWriter{w: &lines}, runID: "test"}
	defer r.close()
	rep, err := r.run(ctx, []*scenarioRun{sc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Executions[0], lines.String()
}

func onTime(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
	if err := sleepUntil(req, scriptDuration, ctx); err != nil {
		return err
	}
	return send(wholeResult(req, 3, scriptDuration, false))
}

func TestDeadlineCases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       *scripted
		pass    bool
		errHas  string // in the scripted backend's error; "" for none
		result  bool   // the scripted backend's result is kept
		minWait time.Duration
	}{
		{name: "on time", s: &scripted{behave: onTime}, pass: true, result: true},
		{
			// Past the deadline (start + 400ms) but inside the answer
			// window: taken, and with a normal elapsed time not a failure.
			name: "inside the answer window",
			s: &scripted{behave: func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
				if err := sleepUntil(req, scriptDuration+scriptTimeout+500*time.Millisecond, ctx); err != nil {
					return err
				}
				return send(wholeResult(req, 3, scriptDuration, false))
			}},
			pass: true, result: true,
		},
		{
			// Silent until cancelled, then answers with what it had.
			name: "answers the cancel",
			s: &scripted{behave: func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
				select {
				case <-s.cancelCh(req.GetExecutionId()):
				case <-ctx.Done():
					return ctx.Err()
				}
				return send(wholeResult(req, 2, scriptDuration+scriptTimeout+time.Second, true))
			}},
			errHas: "missed its deadline", result: true, minWait: scriptDuration + scriptTimeout + time.Second,
		},
		{
			name: "silent",
			s: &scripted{behave: func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			}},
			errHas: "silent: no answer within 2s of its deadline", minWait: scriptDuration + scriptTimeout + 2*time.Second,
		},
		{
			name: "stalled",
			s: &scripted{behave: func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
				if err := sleepUntil(req, scriptDuration, ctx); err != nil {
					return err
				}
				return send(wholeResult(req, 3, 10*time.Second, false))
			}},
			errHas: "it stalled: its result took 10s, past the planned 300ms + timeout 100ms + drain 0s", result: true,
		},
		{
			name: "ends without a result",
			s: &scripted{behave: func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
				return nil
			}},
			errHas: "lost: the engine ended the stream without a result",
		},
		{
			name: "breaks mid-stream",
			s: &scripted{behave: func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
				return status.Error(codes.Internal, "boom")
			}},
			errHas: "lost: rpc error: code = Internal desc = boom",
		},
		{name: "rejected", s: &scripted{noStart: status.Error(codes.InvalidArgument, "url: bad")}, errHas: "rejected: the engine refused the request: rpc error: code = InvalidArgument desc = url: bad"},
		{
			name: "cancelled by the engine",
			s: &scripted{behave: func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
				return send(wholeResult(req, 1, 50*time.Millisecond, true))
			}},
			errHas: "the engine cancelled the execution before its planned end", result: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			good := serveScripted(t, &scripted{behave: onTime})
			odd := serveScripted(t, tc.s)
			start := time.Now()
			e, lines := runScripted(t, scriptOptions(), context.Background(), good, odd)
			t.Logf("lines:\n%s", lines)
			if e.Pass != tc.pass {
				t.Errorf("pass = %v, want %v (failures %q)", e.Pass, tc.pass, e.FailureReasons)
			}
			if br, ok := backendOf(t, e, good); !ok || br.Counters[record.HTTP2xx] != 3 || br.BackendName != "scripted" {
				t.Errorf("the good backend's result %+v", br)
			}
			if _, ok := backendErrorOf(e, good); ok {
				t.Errorf("the good backend has an error")
			}
			be, ok := backendErrorOf(e, odd)
			switch {
			case tc.errHas == "" && ok:
				t.Errorf("backend error %q, want none", be.Error)
			case tc.errHas != "" && (!ok || !strings.Contains(be.Error, tc.errHas)):
				t.Errorf("backend error %q, want one with %q", be.Error, tc.errHas)
			}
			if _, ok := backendOf(t, e, odd); ok != tc.result {
				t.Errorf("result kept = %v, want %v", ok, tc.result)
			}
			if el := time.Since(start); el < tc.minWait {
				t.Errorf("gave up after %v, before the %v the waits allow", el, tc.minWait)
			}
		})
	}
}

// TestDeadlineClockJump: the deadline loop wakes an hour later than it
// asked, past every phase, while a backend's answer is on its way: the
// lost hour is the driver's (it did not run), the deadlines move by it,
// and the answer is taken without a cancel.
func TestDeadlineClockJump(t *testing.T) {
	var mu sync.Mutex
	var offset time.Duration
	received := make(chan time.Time, 1)
	o := scriptOptions()
	o.Now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(offset)
	}
	var recv time.Time
	o.Pause = func() {
		if recv.IsZero() {
			select {
			case recv = <-received:
			default:
				return
			}
		}
		// From the wake at the deadline (start + 400ms) on, the
		// clock reads an hour later.
		if time.Since(recv) > o.StartLead+scriptDuration+scriptTimeout-50*time.Millisecond {
			mu.Lock()
			offset = time.Hour
			mu.Unlock()
		}
	}
	s := &scripted{behave: func(s *scripted, req *enginev1.ExecuteRequest, send func(*enginev1.Result) error, ctx context.Context) error {
		at := time.Now()
		received <- at
		// Answers after the deadline, inside the answer window.
		time.Sleep(time.Until(at.Add(o.StartLead + scriptDuration + scriptTimeout + 400*time.Millisecond)))
		return send(wholeResult(req, 3, scriptDuration, false))
	}}
	addr := serveScripted(t, s)
	e, _ := runScripted(t, o, context.Background(), addr)
	mu.Lock()
	jumped := offset != 0
	mu.Unlock()
	if !jumped {
		t.Fatal("the clock never jumped")
	}
	if !e.Pass || len(e.BackendErrors) != 0 || len(e.Results) != 1 {
		t.Errorf("after a clock jump: pass=%v errors=%v results=%d", e.Pass, e.BackendErrors, len(e.Results))
	}
}

// TestInterruptBeforeStart: a run interrupted before it starts runs
// nothing and says so.
func TestInterruptBeforeStart(t *testing.T) {
	addr := serveScripted(t, &scripted{behave: onTime})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e, lines := runScripted(t, scriptOptions(), ctx, addr)
	if !e.NotRun || e.Pass || !strings.Contains(e.Error, "interrupted") || len(e.Results) != 0 {
		t.Errorf("%+v", e)
	}
	if !strings.Contains(lines, "  SKIP s/t (scenario s): not run: the run was interrupted") {
		t.Errorf("lines:\n%s", lines)
	}
}

// TestUnreachableBackend: a backend nothing listens on is named lost at
// once; the other one is reported whole.
func TestUnreachableBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	good := serveScripted(t, &scripted{behave: onTime})
	e, _ := runScripted(t, scriptOptions(), context.Background(), good, dead)
	if e.Pass || len(e.Results) != 1 || e.Results[0].Backend != good {
		t.Errorf("pass=%v results=%+v", e.Pass, e.Results)
	}
	if be, ok := backendErrorOf(e, dead); !ok || !strings.HasPrefix(be.Error, "lost: ") || !strings.Contains(be.Error, "Unavailable") {
		t.Errorf("backend error %+v, want lost", be)
	}
	// Judged on what came back.
	if len(e.FailureReasons) != 1 {
		t.Errorf("failures %q, want only the lost backend", e.FailureReasons)
	}
}

func TestCapRefusal(t *testing.T) {
	for _, tc := range []struct {
		err       error
		refusal   bool
		rejection bool
	}{
		{status.Error(codes.ResourceExhausted, "engine is at its cap of 4 concurrent executions (--max-concurrent-executions)"), true, false},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000000 vs. 4194304)"), false, true},
		{status.Error(codes.InvalidArgument, "url: bad"), false, true},
		{status.Error(codes.Unavailable, "connection refused"), false, false},
	} {
		if got := capRefusal(tc.err); got != tc.refusal {
			t.Errorf("capRefusal(%v) = %v", tc.err, got)
		}
		if got := rejection(tc.err); got != tc.rejection {
			t.Errorf("rejection(%v) = %v", tc.err, got)
		}
	}
}
