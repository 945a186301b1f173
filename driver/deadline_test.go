package driver

import (
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
// ignores cancels, a rejection, a result that breaks the accounting. Its
// waits are on a sim's fake clock.
type scripted struct {
	enginev1.UnimplementedEngineServer
	sim *sim
	// name is the backend name it reports; "scripted" when empty.
	name string
	// behave runs one Execute after Started was sent; a result it does
	// not send is a stream that ends without one.
	behave  func(a *act) error
	noStart error // returned before Started when set

	mu      sync.Mutex
	cancels map[string]*gate
}

// act is one Execute of a scripted engine.
type act struct {
	s      *scripted
	req    *enginev1.ExecuteRequest
	ctx    context.Context
	stream grpc.ServerStreamingServer[enginev1.ExecuteEvent]
	sent   bool
}

// at waits until the request's start time plus d on the fake clock.
func (a *act) at(d time.Duration) error {
	return a.s.sim.until(a.ctx, a.req.GetStartTime().AsTime().Add(d))
}

// never waits until the driver gives up on the stream.
func (a *act) never() error { return a.s.sim.wait(a.ctx, newCancelGate()) }

// untilCancelled waits for a Cancel of the execution.
func (a *act) untilCancelled() error {
	return a.s.sim.wait(a.ctx, a.s.cancelGate(a.req.GetExecutionId(), true))
}

// send sends the execution's Result.
func (a *act) send(r *enginev1.Result) error {
	a.sent = true
	a.s.sim.emit()
	return a.stream.Send(&enginev1.ExecuteEvent{Event: &enginev1.ExecuteEvent_Result{Result: r}})
}

// whole sends the Result of a whole execution of n requests.
func (a *act) whole(n uint64, elapsed time.Duration, cancelled bool) error {
	return a.send(wholeResult(a.req, a.s.backendName(), n, elapsed, cancelled))
}

func (s *scripted) backendName() string {
	if s.name == "" {
		return "scripted"
	}
	return s.name
}

// cancelGate is the gate a Cancel of id opens; make creates it.
func (s *scripted) cancelGate(id string, make bool) *gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancels == nil {
		s.cancels = map[string]*gate{}
	}
	g, ok := s.cancels[id]
	if !ok && make {
		g = newCancelGate()
		s.cancels[id] = g
	}
	return g
}

func (s *scripted) Execute(req *enginev1.ExecuteRequest, stream grpc.ServerStreamingServer[enginev1.ExecuteEvent]) error {
	s.sim.enter()
	defer s.sim.leave()
	s.sim.emit()
	if s.noStart != nil {
		return s.noStart
	}
	s.cancelGate(req.GetExecutionId(), true)
	if err := stream.Send(&enginev1.ExecuteEvent{Event: &enginev1.ExecuteEvent_Started{Started: &enginev1.Started{
		ExecutionId: req.GetExecutionId(), BackendName: s.backendName(), StartTime: req.GetStartTime()}}}); err != nil {
		return err
	}
	a := &act{s: s, req: req, ctx: stream.Context(), stream: stream}
	err := s.behave(a)
	if !a.sent && stream.Context().Err() == nil {
		// The end of the stream is the driver's event.
		s.sim.emit()
	}
	return err
}

func (s *scripted) Cancel(_ context.Context, req *enginev1.CancelRequest) (*enginev1.CancelResponse, error) {
	g := s.cancelGate(req.GetExecutionId(), false)
	s.sim.cancelled(g)
	return &enginev1.CancelResponse{Found: g != nil}, nil
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
	srv := testServer()
	enginev1.RegisterEngineServer(srv, s)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// wholeResult builds the Result of a whole execution of n requests.
func wholeResult(req *enginev1.ExecuteRequest, name string, n uint64, elapsed time.Duration, cancelled bool) *enginev1.Result {
	return &enginev1.Result{
		ExecutionId: req.GetExecutionId(), BackendName: name,
		Counters:  map[string]uint64{record.HTTP2xx: n},
		StartedAt: req.GetStartTime(), Elapsed: durationpb.New(elapsed), Cancelled: cancelled, Planned: n,
	}
}

const (
	scriptDuration = 300 * time.Millisecond
	scriptTimeout  = 100 * time.Millisecond
)

// scriptOptions put a scripted execution's phases, on the fake clock, at
// dispatch + 100ms (start), + 500ms (deadline), + 1.5s (cancel) and
// + 2.5s (silent).
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

// scriptedRun is one execution of 3 requests per backend (planned).
func scriptedRun(backends ...string) []*scenarioRun {
	ex := &execRun{label: "s/t", rate: 10, perBackend: true, duration: scriptDuration, timeout: scriptTimeout,
		requests: map[string]*enginev1.ExecuteRequest{}, planned: map[string]uint64{}}
	for _, b := range backends {
		ex.requests[b] = &enginev1.ExecuteRequest{Label: "s/t", Url: "http://127.0.0.1:9/", Rate: 10,
			Duration: durationpb.New(scriptDuration), Timeout: durationpb.New(scriptTimeout)}
		ex.planned[b] = 3
	}
	return []*scenarioRun{{name: "s", pool: "p", backends: backends, stages: []*stageRun{{execs: []*execRun{ex}}}}}
}

// runScripted runs one execution on the scripted backends, on the sim's
// clock.
func runScripted(t *testing.T, s *sim, o Options, ctx context.Context, backends ...string) (record.Execution, string) {
	t.Helper()
	rep, lines := s.run(t, ctx, o, scriptedRun(backends...))
	return rep.Executions[0], lines
}

func onTime(a *act) error {
	if err := a.at(scriptDuration); err != nil {
		return err
	}
	return a.whole(3, scriptDuration, false)
}

func TestDeadlineCases(t *testing.T) {
	for _, tc := range []struct {
		name   string
		s      *scripted
		pass   bool
		kind   record.Kind // of the scripted backend's error; "" for none
		errHas string      // in its words
		result bool        // the scripted backend's result is kept
		// elapsed is when, after dispatch on the fake clock, the last
		// backend answered or was given up on.
		elapsed time.Duration
	}{
		{name: "on time", s: &scripted{behave: onTime}, pass: true, result: true, elapsed: 400 * time.Millisecond},
		{
			// Past the deadline (dispatch + 500ms) but inside the answer
			// window: taken, and with a normal elapsed time not a failure.
			name: "inside the answer window",
			s: &scripted{behave: func(a *act) error {
				if err := a.at(scriptDuration + scriptTimeout + 500*time.Millisecond); err != nil {
					return err
				}
				return a.whole(3, scriptDuration, false)
			}},
			pass: true, result: true, elapsed: time.Second,
		},
		{
			// Silent until cancelled at the end of the answer window, then
			// answers with what it had.
			name: "answers the cancel",
			s: &scripted{behave: func(a *act) error {
				if err := a.untilCancelled(); err != nil {
					return err
				}
				return a.whole(2, scriptDuration+scriptTimeout+time.Second, true)
			}},
			kind: record.KindLate, errHas: "it missed its deadline (2026-01-02T03:04:05.500Z) and was cancelled", result: true,
			elapsed: 1500 * time.Millisecond,
		},
		{
			// Ignores the cancel too: given up on after the cancel wait.
			name: "silent",
			s:    &scripted{behave: func(a *act) error { return a.never() }},
			kind: record.KindSilent, errHas: "silent: no answer within 2s of its deadline (2026-01-02T03:04:05.500Z)",
			elapsed: 2500 * time.Millisecond,
		},
		{
			name: "stalled",
			s: &scripted{behave: func(a *act) error {
				if err := a.at(scriptDuration); err != nil {
					return err
				}
				return a.whole(3, 10*time.Second, false)
			}},
			kind: record.KindStalled, errHas: "it stalled: its result took 10s, past the planned 300ms + timeout 100ms + drain 0s", result: true,
			elapsed: 400 * time.Millisecond,
		},
		{
			name: "ends without a result",
			s:    &scripted{behave: func(a *act) error { return nil }},
			kind: record.KindLost, errHas: "lost: the engine ended the stream without a result",
			elapsed: 400 * time.Millisecond,
		},
		{
			name: "breaks mid-stream",
			s:    &scripted{behave: func(a *act) error { return status.Error(codes.Internal, "boom") }},
			kind: record.KindLost, errHas: "lost: rpc error: code = Internal desc = boom",
			elapsed: 400 * time.Millisecond,
		},
		{
			// An engine's counters that do not decode are not read as
			// zeros: the backend is lost, saying why.
			name: "malformed counters",
			s: &scripted{behave: func(a *act) error {
				return a.stream.Send(&enginev1.ExecuteEvent{Event: &enginev1.ExecuteEvent_Progress{Progress: &enginev1.Progress{
					CounterNames: []string{record.HTTP2xx}, CounterIds: []uint32{0, 5}, CounterValues: []uint64{3, 1}}}})
			}},
			kind: record.KindLost, errHas: "lost: a Progress from the engine: progress counters: counter_ids[1] is 5, the table has 1 names",
			elapsed: 400 * time.Millisecond,
		},
		{
			name: "rejected", s: &scripted{noStart: status.Error(codes.InvalidArgument, "url: bad")},
			kind: record.KindRejected, errHas: "rejected: the engine refused the request: rpc error: code = InvalidArgument desc = url: bad",
			elapsed: 400 * time.Millisecond,
		},
		{
			name: "cancelled by the engine",
			s:    &scripted{behave: func(a *act) error { return a.whole(1, 50*time.Millisecond, true) }},
			kind: record.KindCancelled, errHas: "the engine cancelled the execution before its planned end", result: true,
			elapsed: 400 * time.Millisecond,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSim()
			tc.s.sim = s
			good := serveScripted(t, &scripted{sim: s, behave: onTime})
			odd := serveScripted(t, tc.s)
			e, lines := runScripted(t, s, scriptOptions(), context.Background(), good, odd)
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
			case tc.kind == "" && ok:
				t.Errorf("backend error %+v, want none", be)
			case tc.kind != "" && (!ok || be.Kind != tc.kind || !strings.Contains(be.Error, tc.errHas)):
				t.Errorf("backend error %+v, want kind %q with %q", be, tc.kind, tc.errHas)
			}
			if ok && record.KindOf(record.BackendError{Error: be.Error}) != be.Kind {
				t.Errorf("the words %q do not begin with the kind %q, for readers that predate it", be.Error, be.Kind)
			}
			if _, ok := backendOf(t, e, odd); ok != tc.result {
				t.Errorf("result kept = %v, want %v", ok, tc.result)
			}
			if got := time.Duration(e.ElapsedMs) * time.Millisecond; got != tc.elapsed {
				t.Errorf("elapsed %v on the fake clock, want %v", got, tc.elapsed)
			}
		})
	}
}

// TestDeadlineClockJump: the deadline loop wakes an hour later than it
// asked, past every phase, while a backend's answer is on its way: the
// lost hour is the driver's (it did not run), the deadlines move by it,
// and the answer is taken without a cancel.
func TestDeadlineClockJump(t *testing.T) {
	s := newSim()
	st := &scripted{sim: s, behave: func(a *act) error {
		// Due after the deadline, inside the answer window; the clock
		// jumps past it first.
		if err := a.at(scriptDuration + scriptTimeout + 400*time.Millisecond); err != nil {
			return err
		}
		return a.whole(3, scriptDuration, false)
	}}
	addr := serveScripted(t, st)
	wait := s.start(t, context.Background(), scriptOptions(), scriptedRun(addr))
	if !s.settle() {
		t.Fatal("the run ended before its deadline")
	}
	s.mu.Lock()
	deadline := s.loop.next
	s.mu.Unlock()
	if want := simStart.Add(500 * time.Millisecond); !deadline.Equal(want) {
		t.Fatalf("the loop waits until %v, want the deadline %v", deadline, want)
	}
	// The loop wakes an hour after its deadline, past its cancel and its
	// silent time; then the answer comes.
	s.jump(deadline.Sub(s.clk.Now()) + time.Hour)
	s.drive(t)
	rep, _ := wait()
	e := rep.Executions[0]
	if !e.Pass || len(e.BackendErrors) != 0 || len(e.Results) != 1 {
		t.Errorf("after a clock jump: pass=%v errors=%v results=%d", e.Pass, e.BackendErrors, len(e.Results))
	}
	if s.cancels != 0 {
		t.Errorf("%d cancels sent after the driver's own lost hour", s.cancels)
	}
}

// TestInterruptBeforeStart: a run interrupted before it starts runs
// nothing and says so.
func TestInterruptBeforeStart(t *testing.T) {
	s := newSim()
	addr := serveScripted(t, &scripted{sim: s, behave: onTime})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e, lines := runScripted(t, s, scriptOptions(), ctx, addr)
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
	s := newSim()
	good := serveScripted(t, &scripted{sim: s, behave: onTime})
	s.expect(1) // the dead backend's stream fails once
	e, _ := runScripted(t, s, scriptOptions(), context.Background(), good, dead)
	if e.Pass || len(e.Results) != 1 || e.Results[0].Backend != good {
		t.Errorf("pass=%v results=%+v", e.Pass, e.Results)
	}
	if be, ok := backendErrorOf(e, dead); !ok || be.Kind != record.KindLost || !strings.HasPrefix(be.Error, "lost: ") || !strings.Contains(be.Error, "Unavailable") {
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
		{enginev1.CapRefusal(4, "engine is at its cap of 4 concurrent executions (--max-concurrent-executions)"), true, false},
		// The same words without the engine's detail: not the cap (an
		// engine out of descriptors, say), so a rejection.
		{status.Error(codes.ResourceExhausted, "engine is at its cap of 4 concurrent executions (--max-concurrent-executions)"), false, true},
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
