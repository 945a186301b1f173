// Package engine is sortie's load engine: a gRPC service that runs open-loop
// HTTP/1.1 (and, with protocol HTTP2, HTTP/2: see h2.go) load executions and
// counts the outcome of every request.
//
// An execution paces each of its workers with engine/pacer (request i is
// due at start + offset(i), whatever earlier requests did), hands each due
// request to the worker's keep-alive connection pool, and reads responses
// with engine/httpwire, which never re-sends a request. Every planned
// request gets exactly one outcome class (benchmark.http_2xx,
// benchmark.stream_resets, benchmark.pool_overflow, ...), or is left unsent
// by a cancel and said so in Result.unsent. Latency runs from the due
// time, so time spent waiting for a connection is in it.
//
// Every execution also keeps a timeline (timeline.go): its counters per
// bucket of due time, and a sample of each failure up to a budget, both
// streamed with Progress as they become final, so the record of a run is
// written while it goes and sums to its Result exactly.
//
// The engine is built for hours of low, exact load at little cost: no
// goroutine or allocation per request, one goroutine per connection, and a
// pacer that blocks between requests.
package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

// DefaultMaxConcurrentExecutions is the default cap of executions running
// at once.
const DefaultMaxConcurrentExecutions = 16

// Options configure an Engine.
type Options struct {
	// BackendName names this engine (a node name) in results and statsd
	// metric names; it may be empty.
	BackendName string
	// MaxConcurrentExecutions caps the executions running at once; a start
	// over it is refused with RESOURCE_EXHAUSTED and the cap in an
	// ErrorInfo detail (enginev1.CapRefusal), before anything of the
	// execution is built. 0 means DefaultMaxConcurrentExecutions.
	MaxConcurrentExecutions int
	// Version is reported by Info.
	Version string
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// Retention is how long the engine keeps an ended execution's Result
	// and timeline for Attach; 0 means DefaultRetention.
	Retention time.Duration
	// RetainBytes bounds the memory of the executions kept: past it the
	// oldest are let go first (the newest is kept whatever its size, so
	// the bound is this plus one execution's record). 0 means
	// DefaultRetainBytes.
	RetainBytes int64
	// Clock times the retention; nil is the wall clock.
	Clock clock.Clock
	// AllowTargets, when set, is where executions may send load and
	// statsd datagrams; a request aimed elsewhere is refused
	// (enginev1.TargetRefusal). Nil allows every target.
	AllowTargets *Allowlist
	// TLS, when set, is the TLS of the control plane (runca.ServerConfig:
	// a client certificate required); nil serves plaintext. A peer whose
	// handshake fails is logged once (peerLog), not once per attempt.
	TLS *tls.Config

	// newSleeper makes a worker's pacer timer; nil is the real one. Tests
	// make it fail as the system would (too many open files).
	newSleeper func() (*sleeper, error)
}

// Validate returns every problem of the options.
func (o Options) Validate() error {
	var errs []error
	if o.MaxConcurrentExecutions < 0 {
		errs = append(errs, fmt.Errorf("max concurrent executions %d must not be negative", o.MaxConcurrentExecutions))
	}
	if strings.ContainsAny(o.BackendName, "\r\n") {
		errs = append(errs, errors.New("backend name must be one line"))
	}
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("retention %v must not be negative", o.Retention))
	}
	if o.RetainBytes < 0 {
		errs = append(errs, fmt.Errorf("retained bytes %d must not be negative", o.RetainBytes))
	}
	return errors.Join(errs...)
}

// Engine runs executions for drivers over gRPC. Build it with New, serve it
// with Serve, end it with Stop.
type Engine struct {
	opts   Options
	log    *slog.Logger
	srv    *grpc.Server
	health *health.Server
	// healthSrv serves the health service alone, in plaintext, for
	// probes that speak no TLS (a kubelet's gRPC probe): ServeHealth.
	healthSrv *grpc.Server
	// refused remembers the peers the control plane's TLS refused; nil
	// in plaintext.
	refused *peerLog

	// ctx is the parent of every execution; Stop cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	running []*execution // in start order
	// retained are the ended executions kept for Attach, in the order
	// they ended; retainedBytes is what they hold. retainChanged wakes
	// the janitor that lets them go.
	retained      []*execution
	retainedBytes int64
	retainChanged chan struct{}
	// bg counts the goroutines that see executions to their end.
	bg       sync.WaitGroup
	stopping bool
	stopOnce sync.Once
	stopped  chan struct{}
	stopErr  error
}

// New returns an engine for opts.
func New(opts Options) (*Engine, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("engine options: %w", err)
	}
	if opts.MaxConcurrentExecutions == 0 {
		opts.MaxConcurrentExecutions = DefaultMaxConcurrentExecutions
	}
	if opts.newSleeper == nil {
		opts.newSleeper = newSleeper
	}
	if opts.Retention == 0 {
		opts.Retention = DefaultRetention
	}
	if opts.RetainBytes == 0 {
		opts.RetainBytes = DefaultRetainBytes
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Engine{
		opts:    opts,
		log:     log.With("component", "engine"),
		health:  health.NewServer(),
		stopped: make(chan struct{}),

		retainChanged: make(chan struct{}, 1),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.janitor()
	srvOpts := []grpc.ServerOption{
		// A driver keeps one stream per execution open for its whole
		// duration, often idle between progress snapshots; its pings are
		// welcome, and a driver that stops answering ours for over a
		// minute is gone (its executions go on, to be attached again).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second}),
	}
	if opts.TLS != nil {
		e.refused = newPeerLog(e.log)
		srvOpts = append(srvOpts, grpc.Creds(&loggedCreds{TransportCredentials: credentials.NewTLS(opts.TLS), peers: e.refused}))
	}
	e.srv = grpc.NewServer(srvOpts...)
	enginev1.RegisterEngineServer(e.srv, &service{e: e})
	healthpb.RegisterHealthServer(e.srv, e.health)
	e.healthSrv = grpc.NewServer()
	healthpb.RegisterHealthServer(e.healthSrv, e.health)
	e.health.SetServingStatus(enginev1.Engine_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return e, nil
}

// Serve serves the Engine service and the gRPC health service on lis until
// Stop. It returns nil after Stop.
func (e *Engine) Serve(lis net.Listener) error {
	e.log.Info("serving", "address", lis.Addr().String(), "backend_name", e.opts.BackendName,
		"max_concurrent_executions", e.opts.MaxConcurrentExecutions, "version", e.opts.Version,
		"mtls", e.opts.TLS != nil, "allow_targets", e.opts.AllowTargets.describe())
	err := e.srv.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// ServeHealth serves the gRPC health service alone, in plaintext, on lis
// until Stop: it says whether the engine serves (NOT_SERVING once it
// stops) and nothing else, so it needs no client certificate. It returns
// nil after Stop.
func (e *Engine) ServeHealth(lis net.Listener) error {
	e.log.Info("serving health", "address", lis.Addr().String())
	err := e.healthSrv.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop refuses new executions, cancels the running ones (their in-flight
// requests get the drain of their timeout), lets their Result events be
// delivered, then stops the gRPC server. When ctx ends first, in-flight
// requests are cut short (counted as local resets), Results are still sent,
// and the server stops at once. Stop is idempotent; every call waits for
// the first to finish.
func (e *Engine) Stop(ctx context.Context) error {
	e.stopOnce.Do(func() {
		defer close(e.stopped)
		// The health server goes last: a probe reads NOT_SERVING while
		// the executions drain.
		defer e.healthSrv.Stop()
		e.mu.Lock()
		e.stopping = true
		n := len(e.running)
		e.mu.Unlock()
		e.health.Shutdown()
		e.log.Info("stopping", "running", n)
		e.cancel()

		graceful := make(chan struct{})
		go func() {
			// The executions end first (their streams deliver their
			// Results), then the server.
			e.bg.Wait()
			e.srv.GracefulStop()
			close(graceful)
		}()
		select {
		case <-graceful:
			return
		case <-ctx.Done():
		}
		e.log.Warn("stop deadline passed; aborting in-flight requests")
		e.mu.Lock()
		running := append([]*execution(nil), e.running...)
		e.mu.Unlock()
		for _, x := range running {
			x.abortNow()
		}
		// The aborted executions send their Results now; give them a
		// moment before the transport goes.
		select {
		case <-graceful:
		case <-time.After(2 * time.Second):
			e.srv.Stop()
			<-graceful
		}
		e.stopErr = fmt.Errorf("stop: %w", ctx.Err())
	})
	<-e.stopped
	return e.stopErr
}

// unregisterLocked takes x off the running list; e.mu is held.
func (e *Engine) unregisterLocked(x *execution) {
	for i, r := range e.running {
		if r == x {
			// slices.Delete clears the slot it frees: the backing
			// array keeps no pointer to an ended execution.
			e.running = slices.Delete(e.running, i, i+1)
			return
		}
	}
}

// register admits an execution, or says why not as a gRPC status:
// UNAVAILABLE while stopping, ALREADY_EXISTS for an id that runs, and
// RESOURCE_EXHAUSTED with the cap's detail at the cap. x has no workers
// yet: a refusal costs nothing to release.
func (e *Engine) register(x *execution) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return status.Error(codes.Unavailable, "engine is stopping; no new executions")
	}
	labels := make([]string, 0, len(e.running))
	for _, r := range e.running {
		if r.spec.id == x.spec.id {
			return status.Errorf(codes.AlreadyExists, "execution %q is already running (label %q)", x.spec.id, r.spec.label)
		}
		labels = append(labels, r.spec.label)
	}
	if len(e.running) >= e.opts.MaxConcurrentExecutions {
		return enginev1.CapRefusal(uint32(e.opts.MaxConcurrentExecutions),
			fmt.Sprintf("engine %sis at its cap of %d concurrent executions (--max-concurrent-executions); running: %s",
				nameForMsg(e.opts.BackendName), e.opts.MaxConcurrentExecutions, strings.Join(labels, ", ")))
	}
	e.running = append(e.running, x)
	// Counted here, under the lock that Stop takes to set stopping, so a
	// Stop that waits for the executions never starts its Wait before an
	// execution it let in is counted (launch's goroutine, or unregister,
	// is its Done).
	e.bg.Add(1)
	return nil
}

func nameForMsg(n string) string {
	if n == "" {
		return ""
	}
	return fmt.Sprintf("%q ", n)
}

// unregister takes back an execution that was registered but never
// launched.
func (e *Engine) unregister(x *execution) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unregisterLocked(x)
	e.bg.Done()
}

// service implements the gRPC Engine service.
type service struct {
	enginev1.UnimplementedEngineServer
	e *Engine
}

var _ enginev1.EngineServer = (*service)(nil)

// admit parses req, registers its execution and only then builds it: a
// start refused (invalid, a duplicate, at the cap, while stopping) builds
// no worker. A failure to build (the system out of descriptors, say) is
// UNAVAILABLE, never RESOURCE_EXHAUSTED, which a driver reads as the cap;
// what was built is released. On success the caller unregisters and
// releases x, and closes the sink if there is one.
func (e *Engine) admit(req *enginev1.ExecuteRequest) (*execution, *statsdSink, error) {
	sp, err := parseSpec(req, time.Now(), e.opts.BackendName)
	if err == nil {
		err = e.opts.AllowTargets.check(sp, sp.host, e.opts.BackendName)
	}
	if err != nil {
		e.log.Warn("execution refused", "execution_id", req.GetExecutionId(), "label", req.GetLabel(), "error", err)
		return nil, nil, err
	}
	x := newExecution(sp, e.ctx)
	if err := e.register(x); err != nil {
		x.cancel()
		e.log.Warn("execution refused", "execution_id", sp.id, "label", sp.label, "error", err)
		return nil, nil, err
	}
	fail := func(err error) (*execution, *statsdSink, error) {
		x.release()
		e.unregister(x)
		e.log.Error("execution not started", "execution_id", sp.id, "label", sp.label, "error", err)
		return nil, nil, status.Errorf(codes.Unavailable, "engine %scould not start execution %q: %v", nameForMsg(e.opts.BackendName), sp.label, err)
	}
	if err := x.build(e.opts.newSleeper); err != nil {
		return fail(err)
	}
	var sink *statsdSink
	if sp.stats != nil {
		// The address was validated with the request; what fails here is
		// the engine's own socket.
		if sink, err = newStatsdSink(x); err != nil {
			return fail(fmt.Errorf("statsd sink: %w", err))
		}
	}
	return x, sink, nil
}

// Execute runs one execution and streams its events. The execution runs
// on its own: when the stream breaks (the driver died, or detached) it
// goes on to its planned end, and the engine keeps its Result and
// timeline for Attach.
func (s *service) Execute(req *enginev1.ExecuteRequest, stream grpc.ServerStreamingServer[enginev1.ExecuteEvent]) error {
	e := s.e
	x, sink, err := e.admit(req)
	if err != nil {
		return err
	}
	sp := x.spec
	log := e.log.With("execution_id", sp.id, "label", sp.label)
	log.Info("execution started", "start_time", sp.start, "planned", sp.planned(), "first", sp.first,
		"workers", sp.workers, "rate", sp.pacer.Rate(), "duration", sp.pacer.Duration(), "run_id", sp.runID)
	x.started = &enginev1.Started{
		ExecutionId: sp.id, BackendName: e.opts.BackendName, StartTime: timestamppb.New(sp.start),
		BucketWidth: durationpb.New(sp.bucketWidth), Buckets: sp.buckets, SampleBudget: uint32(sp.sampleBudget),
	}
	if err := stream.Send(&enginev1.ExecuteEvent{Event: &enginev1.ExecuteEvent_Started{Started: x.started}}); err != nil {
		// Never started: nobody heard of it.
		if sink != nil {
			_ = sink.client.Close()
		}
		x.release()
		e.unregister(x)
		return err
	}
	e.launch(x, sink, log)
	return e.follow(stream, x, &cursor{}, sp.progress, log)
}

// launch starts x's workers and sink, and sees x to its end on a
// goroutine of its own: its Result is kept and its workers let go
// whether or not a stream follows it.
func (e *Engine) launch(x *execution, sink *statsdSink, log *slog.Logger) {
	x.start()
	var sinkStop, sinkDone chan struct{}
	if sink != nil {
		sinkStop, sinkDone = make(chan struct{}), make(chan struct{})
		go sink.run(sinkStop, sinkDone)
	}
	go func() {
		defer e.bg.Done() // added by register
		<-x.done
		if sink != nil {
			close(sinkStop)
			<-sinkDone
		}
		if n := x.tl.finalCount(); n != x.spec.buckets {
			log.Error("timeline incomplete", "final_buckets", n, "buckets", x.spec.buckets)
		}
		res := x.end(e.opts.BackendName)
		kept := e.retire(x)
		close(x.finished)
		log.Info("execution finished", "cancelled", res.Cancelled, "planned", res.Planned, "unsent", res.Unsent,
			"elapsed", res.Elapsed.AsDuration(), "counters", res.Counters, "retained_bytes", kept)
	}()
}

// follow streams x from cur: Progress every interval (none for 0) while
// it runs, the rest of the timeline once it ended, then its Result. A
// stream that breaks leaves x running.
func (e *Engine) follow(stream grpc.ServerStreamingServer[enginev1.ExecuteEvent], x *execution, cur *cursor, every time.Duration, log *slog.Logger) error {
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	gone := stream.Context().Done()
	m := newProgressStream()
	for running := true; running; {
		select {
		case <-x.finished:
			running = false
		case <-tick:
			if err := sendProgress(stream, x, cur, m); err != nil {
				log.Warn("progress not delivered; the execution goes on without this stream", "error", err)
				return err
			}
		case <-gone:
			log.Warn("driver went away; the execution goes on, to be attached again")
			return status.FromContextError(stream.Context().Err()).Err()
		}
	}
	// The rest of the timeline goes out before the Result, so that a
	// stream read to its Result holds all of it.
	if every > 0 && x.tl.waiting(cur) {
		if err := sendProgress(stream, x, cur, m); err != nil {
			return err
		}
	}
	x.mu.Lock()
	res := x.res
	x.mu.Unlock()
	return stream.Send(&enginev1.ExecuteEvent{Event: &enginev1.ExecuteEvent_Result{Result: res}})
}

// sendProgress sends a Progress, and more at once while more of the
// timeline waits than one carries.
// m is the stream's message, built anew for each.
func sendProgress(stream grpc.ServerStreamingServer[enginev1.ExecuteEvent], x *execution, cur *cursor, m *progressStream) error {
	for {
		ev, more := x.progress(cur, m)
		if err := stream.Send(ev); err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// Cancel ends a running execution early.
func (s *service) Cancel(_ context.Context, req *enginev1.CancelRequest) (*enginev1.CancelResponse, error) {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.running {
		if x.spec.id == req.GetExecutionId() {
			e.log.Info("execution cancelled", "execution_id", x.spec.id, "label", x.spec.label)
			x.cancel()
			return &enginev1.CancelResponse{Found: true}, nil
		}
	}
	return &enginev1.CancelResponse{}, nil
}

// Info describes the engine: its version, name, cap and running
// executions, and the build and host that make its numbers (a driver
// records them with its run).
func (s *service) Info(context.Context, *enginev1.InfoRequest) (*enginev1.InfoResponse, error) {
	e := s.e
	// Read before the lock: it asks the kernel and the build info, nothing
	// of the engine's state.
	here := record.ThisProgram()
	e.mu.Lock()
	defer e.mu.Unlock()
	r := &enginev1.InfoResponse{
		Version:                 e.opts.Version,
		BackendName:             e.opts.BackendName,
		MaxConcurrentExecutions: uint32(e.opts.MaxConcurrentExecutions),
		Running:                 make([]string, 0, len(e.running)),
		Kernel:                  here.Kernel,
		Cpus:                    uint32(here.CPUs),
		Gomaxprocs:              uint32(here.GOMAXPROCS),
		GoVersion:               here.GoVersion,
		VcsRevision:             here.VCSRevision,
		VcsModified:             here.VCSModified,
	}
	for _, x := range e.running {
		r.Running = append(r.Running, x.spec.label)
	}
	r.RetainedExecutions, r.RetainedBytes = uint32(len(e.retained)), uint64(e.retainedBytes)
	return r, nil
}
