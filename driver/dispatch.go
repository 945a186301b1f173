package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sortie-soak/sortie/driver/threshold"
	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// scenarioRun is one scenario ready to run: its pool resolved, its stages
// compiled into engine requests.
type scenarioRun struct {
	name     string
	pool     string
	dns      string
	backends []string
	stages   []*stageRun
}

// stageRun is a set of executions started together on every backend.
type stageRun struct {
	name  string
	execs []*execRun
}

// execRun is one execution: one target of one stage.
type execRun struct {
	label      string
	rate       float64
	perBackend bool
	duration   time.Duration
	ramp       time.Duration
	timeout    time.Duration
	thresholds []threshold.Threshold
	// requests per backend address, execution_id and start_time unset.
	requests map[string]*enginev1.ExecuteRequest
	// planned requests per backend address.
	planned map[string]uint64
}

// callState is where one execution on one backend stands.
type callState int

const (
	pending  callState = iota
	answered           // a Result arrived
	lost               // the stream broke or ended without a Result
	refused            // the engine refused the start at its cap
	rejected           // the engine refused the request as invalid
	silent             // no answer by the end of the waits; given up on
)

// cancelReason says why the driver cancelled an execution on a backend.
type cancelReason int

const (
	notCancelled cancelReason = iota
	cancelDeadline
	cancelRefusal
	cancelInterrupt
)

// call is one execution on one backend. The fields below the line are
// owned by the stage's coordinator loop; the call's goroutine only sends
// events.
type call struct {
	ex      *execRun
	backend string
	id      string
	client  enginev1.EngineClient
	ctx     context.Context
	stop    context.CancelFunc
	// tl is the execution's timeline as the stream sent it; the call's
	// goroutine fills it, under its own lock.
	tl timeline

	state       callState
	started     bool
	backendName string
	result      *enginev1.Result
	err         error
	endedAt     time.Time
	// deadline is when the answer is due; cancelAt when the execution is
	// cancelled if it has not answered (deadline + AnswerWindow, or at
	// once for a refusal or an interrupt); silentAt when the backend is
	// given up on (set when the cancel is sent).
	deadline      time.Time
	cancelAt      time.Time
	silentAt      time.Time
	cancelSent    bool
	cancelWhy     cancelReason
	cancelOnStart bool
	// missedDeadline is set when the deadline passed without an answer.
	missedDeadline bool

	// startAt is the stage's shared start time; dns the pool's name, for
	// a dns pool.
	startAt time.Time
	dns     string
	// A call whose engine was lost while an engine of its node may come
	// back (rejoin.go): lostErr says why its stream broke last; the call
	// stays pending while the driver looks for the node's engine. segs
	// are the executions engines that came back were given, in order,
	// each the rest of the schedule from its offset on; seg is the one
	// that runs now (nil while the driver looks). On a segment, parent is
	// the call it continues and addr the address of the engine that came
	// back.
	lostErr error
	// first is the Result of an engine (the call's own, or a segment's)
	// that cancelled the execution itself (it was stopped: a pod
	// deleted, drained) while the schedule had more to send: what came
	// before the gap, whole.
	first  *enginev1.Result
	seg    *call
	segs   []*call
	parent *call
	offset time.Duration
	addr   string
	// On a segment: before is what the engine ahead of it counted of its
	// own part of the schedule, and gap the time between the two (both
	// in the run manifest before the segment was dispatched); joined
	// says its parent holds it in segs; resumed that a resuming driver
	// follows it again from the manifest.
	before          record.Counted
	gap             record.Gap
	joined, resumed bool
	// bucketsBefore and samplesBefore count the live record's lines of
	// the engines before this segment (0 on the call itself).
	bucketsBefore, samplesBefore uint32
	// rejoinAt is the driver's next look for the node's engine, and
	// rejoinEnd the due time of the schedule's last request, after which
	// nothing is left to take up; probing is set while a look is out.
	rejoinAt, rejoinEnd time.Time
	probing             bool
}

// waiting says the call's engine was lost and the driver looks for an
// engine of its node that came back.
func (c *call) waiting() bool { return c.lostErr != nil && c.seg == nil }

type eventKind int

const (
	evStarted eventKind = iota
	evResult
	evError
	// evMissed: a look for a lost call's node found no engine that came
	// back (err says why, when final is set: look no more).
	evMissed
)

type event struct {
	c      *call
	kind   eventKind
	name   string
	result *enginev1.Result
	err    error
	final  bool
}

// runner runs the scenarios of one plan.
type runner struct {
	opts  Options
	log   *slog.Logger
	lines *lineWriter
	// status shows the live status of the running targets; nil shows
	// none.
	status *statusBoard
	// live appends the timeline to the live record; nil writes none.
	live *liveRecord
	// progressInterval is what the engines are asked for; progressEvery
	// says every how many of a stream's Progress events a progress line
	// is printed (0: never). See progressCadence.
	progressInterval time.Duration
	progressEvery    int
	runID            string
	// caps are the engines' caps of concurrent executions, by backend, as
	// their Info said at the start of the run (madeBy); an engine that
	// did not answer is missing. A stage that starts more on a backend
	// than its cap is refused before any of it starts (capRefusal).
	caps map[string]uint32
	// manifest is the run's manifest, written before each stage's
	// dispatch; nil for a run without a report (nothing to resume by).
	manifest *manifestState
	// resume is what the driver before this one left, when this one
	// resumes the run; nil for a new run. absent is how long no driver
	// followed the run: a resumed stage's phases move by it.
	resume *resumed
	absent time.Duration
	// detached is set when a SIGTERM made the driver leave the run to
	// its engines.
	detached bool

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn

	// interrupted is set once the run's context is done.
	interrupted bool

	// onWait, when set (by tests), is called by a stage's deadline loop
	// just before it blocks. A test on a fake clock moves the time only
	// when the loop is waiting and has taken every event its engines sent.
	onWait func(waitState)
	// taken counts the events the deadline loops took for pending calls,
	// cancels the Cancel RPCs they sent; both belong to the loop.
	taken, cancels int
}

// waitState is what a deadline loop has done when it blocks.
type waitState struct {
	// next is when its timer fires.
	next time.Time
	// taken and cancels are the runner's counts so far.
	taken, cancels int
	// unstarted counts the pending calls whose engine has not yet said
	// Started; probing those whose look for a lost node's engine is out.
	unstarted, probing int
}

func (r *runner) client(addr string) (enginev1.EngineClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cc, ok := r.conns[addr]; ok {
		return enginev1.NewEngineClient(cc), nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(r.opts.engineCreds()))
	if err != nil {
		return nil, fmt.Errorf("engine %s: %w", addr, err)
	}
	if r.conns == nil {
		r.conns = map[string]*grpc.ClientConn{}
	}
	r.conns[addr] = cc
	return enginev1.NewEngineClient(cc), nil
}

func (r *runner) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cc := range r.conns {
		cc.Close()
	}
	r.conns = nil
}

// stageOutcome is what runStage hands to the verdict.
type stageOutcome struct {
	dispatched time.Time
	calls      map[*execRun][]*call // in backend order
	// refusedBy lists the calls an engine refused at its cap.
	refusedBy []*call
	// interrupted is set when the run was interrupted during the stage.
	interrupted bool
	// detached is set when the driver left the stage to its engines.
	detached bool
	// resumedAt is when a resuming driver took the stage over; zero for
	// a stage this driver dispatched.
	resumedAt time.Time
	// rejoins counts the goroutines that look for, and follow, an engine
	// that came back.
	rejoins sync.WaitGroup
}

// runStage starts every execution of the stage on every backend with one
// shared start time, then waits for every answer, enforcing each backend's
// deadline. It returns when every call is answered, lost, refused or given
// up on; no goroutine of the stage outlives it except those draining a
// stream whose context it already cancelled.
func (r *runner) runStage(ctx context.Context, sc *scenarioRun, st *stageRun) *stageOutcome {
	o := r.opts
	dispatched := o.now()
	startAt := dispatched.Add(o.StartLead)
	out := &stageOutcome{dispatched: dispatched, calls: map[*execRun][]*call{}}
	// A stage the driver before this one dispatched is followed again,
	// on its own start time and ids.
	sr, err := r.stageOf(stageName(sc, st))
	if err != nil {
		r.log.Error("run manifest", "stage", stageName(sc, st), "err", err)
	}
	if sr != nil {
		out.resumedAt = dispatched
		dispatched, startAt = sr.dispatched, sr.startAt
		out.dispatched = dispatched
	}

	var calls []*call
	for _, ex := range st.execs {
		r.lines.running(ex, sc.backends)
		r.status.start(ex.label, ex.duration, sc.backends)
		for _, b := range sc.backends {
			c := &call{ex: ex, backend: b, id: fmt.Sprintf("%s/%s@%s", r.runID, ex.label, b), startAt: startAt, dns: sc.dns}
			if id := sr.id(ex.label, b); id != "" {
				c.id, c.backendName = id, r.heldName(ex.label, b)
				resumeSegments(c, sr.rejoins[record.SeriesKey{Label: ex.label, Backend: b}])
			}
			c.deadline = startAt.Add(ex.duration + ex.timeout + o.Drain + o.Grace)
			if sr != nil {
				// The time no driver followed the run is not the
				// engines' fault, as a driver stopped with SIGSTOP
				// is not: the deadline moves by it.
				c.deadline = c.deadline.Add(r.absent)
			}
			c.cancelAt = c.deadline.Add(o.AnswerWindow)
			calls = append(calls, c)
			out.calls[ex] = append(out.calls[ex], c)
		}
	}

	// Five events at most per call (Started, then a Result or an error;
	// after a loss, the Started and the end of the engine that came back,
	// or evGone), so a call's goroutines never block on a coordinator
	// that stopped listening.
	events := make(chan event, 5*len(calls))
	if sr == nil {
		// On disk before any engine hears of the stage: a driver that
		// dies from here on leaves what a resume needs.
		if err := r.manifest.dispatching(stageName(sc, st), dispatched, startAt, calls); err != nil {
			r.log.Error("run manifest not written: a driver that dies now cannot resume", "err", err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		req, ok := c.ex.requests[c.backend]
		client, err := r.client(c.backend)
		if !ok {
			err = fmt.Errorf("the plan compiled no request for backend %s", c.backend)
		}
		if err != nil {
			c.state, c.err, c.endedAt = lost, err, dispatched
			continue
		}
		c.client = client
		req = proto.Clone(req).(*enginev1.ExecuteRequest)
		req.ExecutionId = c.id
		req.RunId = r.runID
		req.StartTime = timestamppb.New(startAt)
		if r.progressInterval > 0 {
			req.ProgressInterval = durationpb.New(r.progressInterval)
		}
		// The stream's context is not the run's: an interrupt cancels
		// executions with the Cancel RPC so that their results still come
		// back on the stream.
		c.ctx, c.stop = context.WithCancel(context.WithoutCancel(ctx))
		follow, err := r.followed(c)
		if err != nil {
			c.state, c.err, c.endedAt = lost, err, dispatched
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sr != nil {
				r.attach(follow, events)
				return
			}
			r.execute(c, req, events)
		}()
	}

	r.await(ctx, calls, events, out)

	// Release every stream; answered ones are already done.
	for _, c := range calls {
		if c.stop != nil {
			c.stop()
		}
	}
	// The goroutines of calls given up on end as soon as their contexts
	// are cancelled; waiting for them keeps a stage from overlapping the
	// next one even in its bookkeeping.
	wg.Wait()
	out.rejoins.Wait()
	return out
}

// followed is the call whose stream carries c's execution: c, or, when
// its node's engine came back before this driver resumed, the engine that
// came back last.
func (r *runner) followed(c *call) (*call, error) {
	if c.seg == nil {
		return c, nil
	}
	seg := c.seg
	seg.ctx = c.ctx
	client, err := r.client(seg.addr)
	seg.client = client
	return seg, err
}

// execute runs one Execute stream and reports its events.
func (r *runner) execute(c *call, req *enginev1.ExecuteRequest, events chan<- event) {
	stream, err := c.client.Execute(c.ctx, req)
	if err != nil {
		events <- event{c: c, kind: evError, err: err}
		return
	}
	r.follow(c, stream, events)
}

// follow reads an execution's stream (Execute's or Attach's) and reports
// its events.
func (r *runner) follow(c *call, stream grpc.ServerStreamingClient[enginev1.ExecuteEvent], events chan<- event) {
	progressed := 0
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the engine ended the stream without a result")
			}
			events <- event{c: c, kind: evError, err: err}
			return
		}
		switch e := ev.GetEvent().(type) {
		case *enginev1.ExecuteEvent_Started:
			c.tl.start(seriesOf(c, e.Started))
			events <- event{c: c, kind: evStarted, name: e.Started.GetBackendName()}
		case *enginev1.ExecuteEvent_Progress:
			// Counters come coded from the engine; everything below
			// reads them by name.
			if err := e.Progress.DecodeCounters(); err != nil {
				events <- event{c: c, kind: evError, err: fmt.Errorf("a Progress from the engine: %w", err)}
				return
			}
			r.live.append(c.tl.progress(e.Progress))
			progressed++
			if r.progressEvery > 0 && progressed%r.progressEvery == 0 {
				r.lines.progress(c.ex.label, c.backend, e.Progress)
			}
			r.status.update(c.ex.label, c.backend, e.Progress)
		case *enginev1.ExecuteEvent_Result:
			// The status ends on the backend's final counters.
			r.status.update(c.ex.label, c.backend, &enginev1.Progress{Elapsed: e.Result.GetElapsed(), Counters: e.Result.GetCounters()})
			events <- event{c: c, kind: evResult, result: e.Result}
			return
		}
	}
}

// await is the stage's coordinator loop: it takes events, fires the
// deadline phases of every pending call, and reacts to a refusal and to an
// interrupt.
func (r *runner) await(ctx context.Context, calls []*call, events chan event, out *stageOutcome) {
	o := r.opts
	clk := o.clock()
	done := ctx.Done()
	if r.interrupted {
		done = nil
	}
	drain := func() {
		for {
			select {
			case ev := <-events:
				r.take(ev, o.now(), calls, events, out)
			default:
				return
			}
		}
	}

	// The first observation is the dispatch itself, so a driver stopped
	// between dispatch and its first wait is caught too; for a resumed
	// stage, the resume.
	lastWake := out.dispatched
	if !out.resumedAt.IsZero() {
		lastWake = out.resumedAt
	}
	var asked time.Duration
	for pendingCount(calls) > 0 {
		if o.Pause != nil {
			o.Pause()
		}
		// Answers that are already waiting are taken before any deadline
		// is looked at: after the driver itself was stopped, its timers
		// fire at once on resume, but the answers that arrived meanwhile
		// are just as ready.
		drain()
		if pendingCount(calls) == 0 {
			break
		}
		now := o.now()
		// Waking much later than asked means this process did not run
		// (SIGSTOP, a paused VM, a starved node). The time lost is not the
		// engines' fault: every pending phase moves by it, plus a slack for
		// the streams to deliver what is waiting.
		if late := now.Sub(lastWake) - asked; late > o.ClockSlack {
			r.log.Warn("the driver did not run for a while; deadlines moved", "late", late.Round(time.Millisecond))
			shiftPhases(calls, late+o.ClockSlack)
		}
		r.firePhases(calls, now, events, out)
		if pendingCount(calls) == 0 {
			break
		}
		next := nextPhase(calls)
		asked = max(next.Sub(now), 0)
		lastWake = now
		timer := clk.NewTimer(asked)
		if r.onWait != nil {
			r.onWait(r.waitState(calls, next))
		}
		select {
		case ev := <-events:
			// An event is an early wake; a wake later than asked, whatever
			// woke it, is caught at the top of the loop.
			r.take(ev, o.now(), calls, events, out)
		case <-timer.C():
		case <-done:
			done = nil
			if r.manifest != nil && cli.Signal(ctx) == syscall.SIGTERM {
				// Detach: the engines run on, the next driver resumes.
				r.detached, out.detached = true, true
				timer.Stop()
				return
			}
			r.interrupted = true
			out.interrupted = true
			r.cancelAll(calls, cancelInterrupt, o.now(), o.InterruptWait)
		}
		timer.Stop()
	}
	if r.interrupted {
		out.interrupted = true
	}
}

// take applies one event of a call's stream, taken at now.
func (r *runner) take(ev event, now time.Time, calls []*call, events chan<- event, out *stageOutcome) {
	c := ev.c
	if c.parent != nil {
		r.takeSegment(c.parent, ev, now, events, out)
		return
	}
	if c.state != pending {
		// A call already given up on; its goroutine's last word.
		return
	}
	if ev.kind == evMissed {
		r.missed(c, ev, now)
		return
	}
	r.taken++
	switch ev.kind {
	case evStarted:
		c.started = true
		if ev.name != "" {
			c.backendName = ev.name
		}
		if c.cancelOnStart {
			r.sendCancel(c)
		}
	case evResult:
		if n := ev.result.GetBackendName(); n != "" {
			c.backendName = n
		}
		if ev.result.GetCancelled() && c.cancelWhy == notCancelled && r.rejoinable(c, now) {
			// The engine stopped itself with the schedule ahead (a pod
			// deleted or drained): its node may come back.
			c.first = ev.result
			r.waitRejoin(c, errors.New("the engine cancelled the execution before its planned end (it was stopped)"), now, events, out)
			return
		}
		c.state, c.result, c.endedAt = answered, ev.result, now
	case evError:
		c.endedAt = now
		if capRefusal(ev.err) && !c.started {
			c.state, c.err = refused, ev.err
			out.refusedBy = append(out.refusedBy, c)
			r.cancelAll(calls, cancelRefusal, now, r.opts.CancelWait)
			return
		}
		if r.rejoinable(c, now) {
			// The node may come back: the call waits for it.
			r.waitRejoin(c, ev.err, now, events, out)
			return
		}
		c.state, c.err = lost, ev.err
		if !c.started && rejection(ev.err) {
			c.state = rejected
		}
	}
}

// firePhases does what is due at now for every pending call: a deadline
// is marked missed; at the end of the answer window the execution is
// cancelled; at the end of the cancel wait the backend is named silent.
func (r *runner) firePhases(calls []*call, now time.Time, events chan<- event, out *stageOutcome) {
	for _, c := range calls {
		if c.state != pending {
			continue
		}
		if c.waiting() {
			r.fireRejoin(c, now, events, out)
			continue
		}
		if !now.Before(c.deadline) {
			c.missedDeadline = true
		}
		switch {
		case !c.cancelSent && !now.Before(c.cancelAt):
			c.cancelWhy = cancelDeadline
			c.silentAt = now.Add(r.opts.CancelWait)
			r.sendCancel(c)
		case c.cancelSent && !now.Before(c.silentAt):
			c.state, c.endedAt = silent, now
			c.stop()
		}
	}
}

// shiftPhases moves every phase still ahead of a pending call by d.
func shiftPhases(calls []*call, d time.Duration) {
	for _, c := range calls {
		if c.state != pending {
			continue
		}
		if !c.missedDeadline {
			c.deadline = c.deadline.Add(d)
		}
		c.cancelAt = c.cancelAt.Add(d)
		if c.cancelSent {
			c.silentAt = c.silentAt.Add(d)
		}
	}
}

// nextPhase is the earliest phase ahead of any pending call.
func nextPhase(calls []*call) time.Time {
	var next time.Time
	for _, c := range calls {
		if c.state != pending {
			continue
		}
		t := c.cancelAt
		if c.waiting() {
			// A look that is out ends with an event; the deadline is
			// the backstop.
			t = c.deadline
			if !c.probing {
				t = c.rejoinAt
			}
		} else if c.cancelSent {
			t = c.silentAt
		} else if !c.missedDeadline && c.deadline.Before(t) {
			t = c.deadline
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

func pendingCount(calls []*call) int {
	n := 0
	for _, c := range calls {
		if c.state == pending {
			n++
		}
	}
	return n
}

func (r *runner) waitState(calls []*call, next time.Time) waitState {
	w := waitState{next: next, taken: r.taken, cancels: r.cancels}
	for _, c := range calls {
		if c.state == pending && !c.started {
			w.unstarted++
		}
		if c.state == pending && c.probing {
			w.probing++
		}
	}
	return w
}

// cancelAll cancels every pending call of the stage (a refusal stops the
// whole stage, an interrupt the whole run) and gives each wait to answer.
func (r *runner) cancelAll(calls []*call, why cancelReason, now time.Time, wait time.Duration) {
	for _, c := range calls {
		if c.state != pending {
			continue
		}
		if c.waiting() {
			// Its node's engine was lost and has not come back: lost now.
			r.giveUp(c, now, nil)
			continue
		}
		if c.cancelSent {
			// Already cancelled for its deadline: keep the earlier of the
			// two limits.
			if t := now.Add(wait); t.Before(c.silentAt) {
				c.silentAt = t
			}
			continue
		}
		c.cancelWhy = why
		c.silentAt = now.Add(wait)
		if c.started {
			r.sendCancel(c)
		} else {
			// Not acknowledged yet: cancel as soon as it is, and count
			// the wait from now.
			c.cancelOnStart = true
			c.cancelSent = true
		}
	}
}

// sendCancel asks the engine to cancel the call's execution. The Cancel
// RPC runs on its own goroutine: a frozen engine never answers it, and the
// coordinator must keep its own time.
func (r *runner) sendCancel(c *call) {
	c.cancelSent = true
	c.cancelOnStart = false
	if c.seg != nil {
		// The engine that came back runs what is left of it.
		c = c.seg
	}
	if c.client == nil {
		return
	}
	r.cancels++
	client, id, wait := c.client, c.id, r.opts.CancelWait
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		resp, err := client.Cancel(ctx, &enginev1.CancelRequest{ExecutionId: id})
		if err != nil {
			r.log.Info("cancel failed", "backend", c.backend, "execution", id, "err", err)
			return
		}
		if !resp.GetFound() {
			r.log.Debug("cancel: execution not running", "backend", c.backend, "execution", id)
		}
	}()
}

// capRefusal reports whether an error is an engine refusing a start at its
// cap of concurrent executions: RESOURCE_EXHAUSTED with the engine's typed
// ErrorInfo detail (enginev1.RefusedAtCap). Any other RESOURCE_EXHAUSTED
// (gRPC's own, for a message over its size limit, or an engine out of some
// resource) is a request the engine cannot take, not a busy engine, and is
// never read as a reason to raise the cap.
func capRefusal(err error) bool {
	_, ok := enginev1.RefusedAtCap(err)
	return ok
}

// rejection reports whether an error before Started is the engine saying
// no to the request itself, rather than a transport failing.
func rejection(err error) bool {
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return !capRefusal(err)
	case codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists,
		codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.OutOfRange:
		return true
	}
	return false
}
