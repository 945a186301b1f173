package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// timelineOf is the run's streamed timeline as the driver writes it down:
// record lines. It fails the test on a bucket sent twice or out of range,
// on a Progress whose counters lack what the timeline sent so far, and
// when a bucket of the execution never came.
func timelineOf(t *testing.T, r run) ([]record.BucketLine, []record.SampleLine) {
	t.Helper()
	st := r.started
	width := st.GetBucketWidth().AsDuration()
	if width <= 0 || st.GetBuckets() == 0 {
		t.Fatalf("Started without a timeline: %v", st)
	}
	se := record.Series{Label: "test", Backend: "engine", Start: st.GetStartTime().AsTime(), Width: width}
	var buckets []record.BucketLine
	var samples []record.SampleLine
	seen := make([]bool, st.GetBuckets())
	sums := map[string]uint64{}
	for i, p := range r.progress {
		for _, b := range p.GetBuckets() {
			k := b.GetIndex()
			if k >= st.GetBuckets() || seen[k] {
				t.Fatalf("progress %d: bucket %d sent again or out of %d", i, k, st.GetBuckets())
			}
			seen[k] = true
			l := se.Bucket(k)
			l.Counters, l.Unsent, l.SamplesDropped = b.GetCounters(), b.GetUnsent(), b.GetSamplesDropped()
			l.Latency = record.BucketLatency{Count: b.GetLatencyCount(), P50: b.GetLatencyP50Ns(), P99: b.GetLatencyP99Ns(), Max: b.GetLatencyMaxNs()}
			buckets = append(buckets, l)
			for c, n := range b.GetCounters() {
				sums[c] += n
			}
		}
		for _, s := range p.GetFailureSamples() {
			l := se.Sample(s.GetDueNs(), s.GetOutcomeNs())
			if l.Bucket != s.GetBucket() || l.LatencyNs != s.GetLatencyNs() {
				t.Fatalf("sample %v: bucket or latency disagree with its times", s)
			}
			l.Class, l.Reason, l.Phase, l.Status = s.GetClass(), s.GetReason(), s.GetPhase(), int(s.GetStatus())
			l.Remote, l.ConnAgeMs, l.ConnRequests = s.GetRemote(), s.GetConnAgeNs()/1e6, s.GetConnRequests()
			samples = append(samples, l)
		}
		// A Progress counts everything the timeline sent so far.
		for c, n := range sums {
			if p.GetCounters()[c] < n {
				t.Fatalf("progress %d counts %s %d, its buckets so far %d", i, c, p.GetCounters()[c], n)
			}
		}
	}
	for k, ok := range seen {
		if !ok {
			t.Fatalf("bucket %d of %d never sent", k, len(seen))
		}
	}
	return buckets, samples
}

// checkTimeline asserts what every streamed timeline keeps: it sums to the
// Result class by class, the samples are a subset of the counters (all
// failures while under budget), and each bucket's and sample's fields
// agree with each other. remote is the target's address.
func checkTimeline(t *testing.T, r run, remote string) ([]record.BucketLine, []record.SampleLine) {
	t.Helper()
	res := r.mustResult(t)
	buckets, samples := timelineOf(t, r)
	br := record.BackendResult{Backend: "engine", Planned: res.GetPlanned(), Unsent: res.GetUnsent(), Counters: res.GetCounters()}
	if err := record.CheckTimeline(buckets, br); err != nil {
		t.Errorf("conservation: %v", err)
	}
	if err := record.CheckSamples(buckets, samples); err != nil {
		t.Errorf("samples: %v", err)
	}
	for _, b := range buckets {
		l := b.Latency
		if l.Count != b.Counters[record.HTTP2xx] || (l.Count > 0 && !(0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.Max)) {
			t.Errorf("bucket %d: latency %+v for %d 2xx", b.Index, l, b.Counters[record.HTTP2xx])
		}
	}
	lo, hi := record.FailedCalls(res.GetCounters())
	budget := uint64(r.started.GetSampleBudget())
	dropped := record.SumBuckets(buckets).SamplesDropped
	n := uint64(len(samples))
	if n+dropped < lo || n+dropped > hi || n != min(n+dropped, budget) {
		t.Errorf("%d samples and %d dropped of %d to %d failed calls (budget %d)", n, dropped, lo, hi, budget)
	}
	for _, s := range samples {
		connected := s.Class == record.HTTP4xx || s.Class == record.HTTP5xx || s.Class == record.StreamResets
		noConn := s.Class == record.PoolOverflow || s.Class == record.PoolConnectionFailure || s.Class == record.PoolFailureTimeout
		switch {
		case s.LatencyNs < 0 || s.ConnAgeMs < 0:
			t.Errorf("sample %+v: negative latency or age", s)
		case connected && s.Remote != remote, noConn && s.Remote != "":
			t.Errorf("sample %+v: remote %q, want %q", s, s.Remote, remote)
		case (s.Class == record.StreamResets) != (s.Phase != "" && strings.HasPrefix(s.Reason, record.StreamResetsPrefix)):
			t.Errorf("sample %+v: a reset has a phase and a reason, nothing else does", s)
		case (s.Status != 0) != (s.Class == record.HTTP4xx || s.Class == record.HTTP5xx):
			t.Errorf("sample %+v: status only on 4xx and 5xx", s)
		}
	}
	return buckets, samples
}

// Actions of the fault server, for one request.
const (
	actOK = iota
	act404
	act503
	actFIN     // close before answering
	actRST     // reset before answering
	actCut     // close in the middle of the body
	actGarbage // a response that is not HTTP
	actStall   // answer after a while
	actHang    // never answer; the engine's drain ends it
	numActs
)

// faultServer answers each request with an action drawn from weights,
// from one seeded source. With flap, its listener is closed and opened
// again on the same port every 150 ms (connections in hand stay), so
// that some connects are refused. A bound socket that never listens holds
// the port meanwhile (SO_REUSEPORT on both), so no other test's listener
// can take it, and a connect finds nobody.
type faultServer struct {
	addr    string
	mu      sync.Mutex
	rng     *rand.Rand
	weights [numActs]int
	wg      sync.WaitGroup
	done    chan struct{}
}

// reusePort is a ListenConfig whose sockets share their port.
var reusePort = net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}}

// holdPort binds a socket to addr without listening, with SO_REUSEPORT.
func holdPort(t *testing.T, addr *net.TCPAddr) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte(addr.IP.To4()), Port: addr.Port}); err != nil {
		t.Fatal(err)
	}
}

func newFaultServer(t *testing.T, seed uint64, weights [numActs]int, flap bool) *faultServer {
	t.Helper()
	lis, err := reusePort.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &faultServer{addr: lis.Addr().String(), rng: rand.New(rand.NewPCG(seed, 7)), weights: weights, done: make(chan struct{})}
	if flap {
		holdPort(t, lis.Addr().(*net.TCPAddr))
	}
	var lmu sync.Mutex
	current := lis
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for l := lis; l != nil; {
			s.accept(l)
			if !flap {
				return
			}
			select {
			case <-s.done:
				return
			case <-time.After(150 * time.Millisecond):
			}
			// If the port cannot be listened on again, it stays
			// closed: every later connect is refused.
			l, _ = reusePort.Listen(context.Background(), "tcp", s.addr)
			lmu.Lock()
			current = l
			lmu.Unlock()
		}
	}()
	if flap {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				select {
				case <-s.done:
					return
				case <-time.After(150 * time.Millisecond):
				}
				lmu.Lock()
				if current != nil {
					_ = current.Close()
				}
				lmu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		close(s.done)
		lmu.Lock()
		if current != nil {
			_ = current.Close()
		}
		lmu.Unlock()
		s.wg.Wait()
	})
	return s
}

// accept serves connections from l until it is closed.
func (s *faultServer) accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.serve(c)
		}()
	}
}

func (s *faultServer) pick() (int, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for _, w := range s.weights {
		total += w
	}
	n := s.rng.IntN(total)
	for a, w := range s.weights {
		if n < w {
			return a, time.Duration(20+s.rng.IntN(230)) * time.Millisecond
		}
		n -= w
	}
	return actOK, 0
}

func (s *faultServer) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for readRequest(br) == nil {
		a, stall := s.pick()
		resp := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		switch a {
		case act404:
			resp = "HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope"
		case act503:
			resp = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"
		case actFIN:
			return
		case actRST:
			_ = c.(*net.TCPConn).SetLinger(0)
			return
		case actCut:
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
			return
		case actGarbage:
			_, _ = io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n\r\n")
			return
		case actStall:
			select {
			case <-time.After(stall):
			case <-s.done:
				return
			}
		case actHang:
			_, _ = io.Copy(io.Discard, c)
			return
		}
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
	}
}

func (s *faultServer) url() string { return "http://" + s.addr + "/" }

// The timeline of every run sums exactly to its Result, class by class,
// whatever the target does: a property over random fault mixes, rates,
// workers, bucket widths and pools. Each bucket comes once; the samples
// are a subset of the counters, and all the failures while under budget.
func TestTimelineProperty(t *testing.T) {
	t.Parallel()
	rates := []uint32{40, 150, 600}
	widths := []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 0}
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		var weights [numActs]int
		weights[actOK] = 6
		for a := act404; a < numActs; a++ {
			weights[a] = rng.IntN(3)
		}
		if seed <= 2 {
			weights[actHang] = 0 // a run whose drain empties on its own
		}
		flap := rng.IntN(3) == 0
		r := req(fmt.Sprint("prop-", seed), "", rates[rng.IntN(len(rates))], time.Second+time.Duration(rng.IntN(3))*200*time.Millisecond)
		if seed%3 == 0 {
			r.Ramp = durationpb.New(400 * time.Millisecond)
		}
		r.Workers = uint32(1 + rng.IntN(3))
		r.Connections = uint32(2 + rng.IntN(6))
		r.MaxPendingRequests = uint32(1 + rng.IntN(4))
		r.Timeout = durationpb.New(300 * time.Millisecond)
		r.BucketWidth = durationpb.New(widths[rng.IntN(len(widths))])
		// Some runs only flush at the end: the last Progress events
		// carry the whole timeline.
		r.ProgressInterval = durationpb.New(50 * time.Millisecond)
		if rng.IntN(3) == 0 {
			r.ProgressInterval = durationpb.New(time.Hour)
		}
		if seed == 8 {
			r.SampleBudget = 5
		}
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			t.Parallel()
			srv := newFaultServer(t, seed, weights, flap)
			r.Url = srv.url()
			te := startEngine(t, Options{})
			got := te.execute(t, r)
			buckets, samples := checkTimeline(t, got, srv.addr)
			t.Logf("rate %d x %d workers, %v (ramp %v), width %v, weights %v, flap %v: %d buckets, %d samples, counters %v",
				r.Rate, r.Workers, r.Duration.AsDuration(), r.Ramp.AsDuration(), got.started.GetBucketWidth().AsDuration(), weights, flap,
				len(buckets), len(samples), got.result.GetCounters())
		})
	}
}

// statusServer answers every request with code, keeping connections
// alive.
func statusServer(t *testing.T, code int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSampleBudget(t *testing.T) {
	t.Parallel()
	srv := statusServer(t, http.StatusServiceUnavailable)
	te := startEngine(t, Options{})
	r := req("budget", srv.URL, 200, 500*time.Millisecond)
	r.SampleBudget = 30
	r.BucketWidth = durationpb.New(100 * time.Millisecond)
	r.ProgressInterval = durationpb.New(50 * time.Millisecond)
	got := te.execute(t, r)
	res := got.mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP5xx: 100})
	buckets, samples := checkTimeline(t, got, strings.TrimPrefix(srv.URL, "http://"))
	if n, dropped := len(samples), record.SumBuckets(buckets).SamplesDropped; n != 30 || dropped != 70 {
		t.Errorf("%d samples, %d dropped; want 30 and 70", n, dropped)
	}
	if got.started.GetSampleBudget() != 30 {
		t.Errorf("Started says budget %d", got.started.GetSampleBudget())
	}
}

// A sample names the replica the connection reached (not the URL's host),
// the request's place on its connection, and why it failed.
func TestSampleFields(t *testing.T) {
	t.Parallel()
	t.Run("reset on a reused connection", func(t *testing.T) {
		t.Parallel()
		srv := newRawServer(t, keepAliveThenClose(false))
		_, port, _ := net.SplitHostPort(srv.lis.Addr().String())
		te := startEngine(t, Options{})
		r := req("fields-reset", "http://localhost:"+port+"/", 20, 500*time.Millisecond)
		r.Connections, r.MaxPendingRequests = 1, 10
		r.ProgressInterval = durationpb.New(50 * time.Millisecond)
		got := te.execute(t, r)
		_, samples := checkTimeline(t, got, srv.lis.Addr().String())
		if len(samples) != 5 {
			t.Fatalf("%d samples, want 5", len(samples))
		}
		for _, s := range samples {
			want := record.SampleLine{Class: record.StreamResets, Reason: record.StreamResetsPrefix + record.ReasonConnectionTermination,
				Phase: record.ResetsBeforeHeaders, Remote: "127.0.0.1:" + port, ConnRequests: 1}
			if s.Class != want.Class || s.Reason != want.Reason || s.Phase != want.Phase || s.Remote != want.Remote || s.ConnRequests != want.ConnRequests {
				t.Errorf("sample %+v, want %+v", s, want)
			}
		}
	})
	t.Run("status on one connection", func(t *testing.T) {
		t.Parallel()
		srv := statusServer(t, http.StatusTooManyRequests)
		te := startEngine(t, Options{})
		r := req("fields-status", srv.URL, 20, 500*time.Millisecond)
		r.Connections = 1
		r.ProgressInterval = durationpb.New(50 * time.Millisecond)
		got := te.execute(t, r)
		_, samples := checkTimeline(t, got, strings.TrimPrefix(srv.URL, "http://"))
		carried := map[uint64]bool{}
		for _, s := range samples {
			if s.Class != record.HTTP4xx || s.Status != http.StatusTooManyRequests || s.Reason != "" {
				t.Errorf("sample %+v", s)
			}
			carried[s.ConnRequests] = true
		}
		// One keep-alive connection carried the ten requests in turn.
		for i := range uint64(10) {
			if !carried[i] {
				t.Errorf("no sample was request %d of its connection: %v", i, carried)
			}
		}
	})
}

// A cancel leaves the rest of the plan unsent; the timeline says, bucket
// by bucket, which of the requests due there were never sent, and a
// timeline longer than one Progress carries comes in several, all before
// the Result.
func TestTimelineCancelUnsent(t *testing.T) {
	t.Parallel()
	seen := newSeen()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		seen.mark()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	te := startEngine(t, Options{})
	// 10/s for 2,000 s in buckets of 100 ms: 20,000 buckets.
	r := req("unsent", srv.URL, 10, 2000*time.Second)
	r.BucketWidth = durationpb.New(100 * time.Millisecond)
	// No Progress before the end: the last ones carry it all.
	r.ProgressInterval = durationpb.New(time.Hour)
	ch := startStream(t, te, r)
	seen.wait(t)
	if _, err := te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: "unsent"}); err != nil {
		t.Fatal(err)
	}
	got := <-ch
	res := got.mustResult(t)
	if !res.GetCancelled() || res.GetUnsent() == 0 {
		t.Fatalf("cancelled %v, unsent %d", res.GetCancelled(), res.GetUnsent())
	}
	buckets, _ := checkTimeline(t, got, "")
	if len(buckets) != 20_000 || len(got.progress) < 20 {
		t.Errorf("%d buckets in %d Progress events, want 20000 in at least 20", len(buckets), len(got.progress))
	}
	for _, p := range got.progress {
		if len(p.GetBuckets()) > maxPerProgress {
			t.Errorf("a Progress of %d buckets", len(p.GetBuckets()))
		}
	}
	// The last bucket was never reached: all of it unsent.
	last := buckets[len(buckets)-1]
	for _, b := range buckets {
		if b.Index == 19_999 {
			last = b
		}
	}
	if last.Unsent != 1 || len(last.Counters) != 0 {
		t.Errorf("last bucket %+v, want one request, unsent", last)
	}
}

// The engine keeps every final bucket and sample of an execution while it
// runs (what a driver that lost its stream would fetch again): the store
// sums to the Result and equals what was streamed.
func TestTimelineKept(t *testing.T) {
	t.Parallel()
	srv := newFaultServer(t, 42, [numActs]int{actOK: 5, act503: 1, actFIN: 1, actStall: 1}, false)
	r := req("kept", srv.url(), 100, time.Second)
	r.Workers = 2
	r.BucketWidth = durationpb.New(100 * time.Millisecond)
	x := runDirect(t, r)
	finals := x.tl.finals()
	if err := finals.DecodeCounters(); err != nil {
		t.Fatal(err)
	}
	kept, keptSamples := finals.GetBuckets(), finals.GetFailureSamples()
	// Stream it all now, as the end of Execute does.
	var streamed run
	streamed.started = &enginev1.Started{BucketWidth: durationpb.New(x.spec.bucketWidth),
		Buckets: x.spec.buckets, SampleBudget: uint32(x.spec.sampleBudget)}
	var cur cursor
	for more := true; more; {
		var ev *enginev1.ExecuteEvent
		ev, more = x.progress(&cur, newProgressStream())
		p := ev.GetProgress()
		if err := p.DecodeCounters(); err != nil {
			t.Fatal(err)
		}
		streamed.progress = append(streamed.progress, p)
	}
	streamed.result = x.result("")
	streamed.started.StartTime = streamed.result.GetStartedAt()
	checkTimeline(t, streamed, srv.addr)
	if len(kept) != int(x.spec.buckets) {
		t.Fatalf("%d buckets kept of %d", len(kept), x.spec.buckets)
	}
	var all []*enginev1.Bucket
	var allSamples int
	for _, p := range streamed.progress {
		all = append(all, p.GetBuckets()...)
		allSamples += len(p.GetFailureSamples())
	}
	byIndex := map[uint32]*enginev1.Bucket{}
	for _, b := range all {
		byIndex[b.GetIndex()] = b
	}
	for _, k := range kept {
		if s := byIndex[k.GetIndex()]; s == nil || s.String() != k.String() {
			t.Errorf("bucket %d kept %v, streamed %v", k.GetIndex(), k, s)
		}
	}
	if allSamples != len(keptSamples) {
		t.Errorf("%d samples kept, %d streamed", len(keptSamples), allSamples)
	}
	// Taken once: nothing more to stream past the cursor.
	if bs, ss, more := takeDecoded(t, x.tl, &cur, maxPerProgress); len(bs)+len(ss) > 0 || more {
		t.Errorf("the timeline streamed again: %d buckets, %d samples", len(bs), len(ss))
	}
}

// Without progress_interval no Progress is sent, the timeline included.
func TestNoProgressNoTimeline(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	got := te.execute(t, req("quiet", srv.URL, 20, 500*time.Millisecond))
	got.mustResult(t)
	if len(got.progress) != 0 {
		t.Errorf("%d Progress events without progress_interval", len(got.progress))
	}
	if got.started.GetBuckets() != 1 || got.started.GetBucketWidth().AsDuration() != time.Second || got.started.GetSampleBudget() != defaultSampleBudget {
		t.Errorf("Started %v: want 1 bucket of 1 s and the default budget", got.started)
	}
}

// A rate slower than the buckets leaves most of them empty: they are sent
// all the same, and the pacer's end (its next due time past the last
// bucket) closes exactly the execution's buckets.
func TestTimelineSparse(t *testing.T) {
	t.Parallel()
	srv := okServer(t)
	te := startEngine(t, Options{})
	// 2/s for 1 s: requests due at 0 and 500 ms, in buckets 0 and 5 of
	// 100 ms; the next due time, 1 s, would be bucket 10.
	r := req("sparse", srv.URL, 2, time.Second)
	r.BucketWidth = durationpb.New(100 * time.Millisecond)
	r.ProgressInterval = durationpb.New(50 * time.Millisecond)
	got := te.execute(t, r)
	buckets, _ := checkTimeline(t, got, "")
	if len(buckets) != 6 {
		t.Fatalf("%d buckets, want 6", len(buckets))
	}
	for _, b := range buckets {
		want := uint64(0)
		if b.Index == 0 || b.Index == 5 {
			want = 1
		}
		// Late sends depend on the machine's load, not on the engine.
		others := 0
		for k := range b.Counters {
			if k != record.HTTP2xx && k != record.LateSends {
				others++
			}
		}
		if b.Counters[record.HTTP2xx] != want || others != 0 {
			t.Errorf("bucket %d: counters %v, want %d 2xx", b.Index, b.Counters, want)
		}
	}
}

// A request never answered holds its bucket until the drain ends; the
// buckets after it are final, and sent, as soon as their own requests are
// answered, so they come first.
func TestTimelineHeldBucket(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, func(c net.Conn, n int64) {
		br := bufio.NewReader(c)
		for readRequest(br) == nil {
			if n == 1 {
				// The first connection's request: never answered.
				_, _ = io.Copy(io.Discard, c)
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	te := startEngine(t, Options{})
	r := req("held", srv.url(), 20, time.Second)
	r.BucketWidth = durationpb.New(100 * time.Millisecond)
	r.ProgressInterval = durationpb.New(50 * time.Millisecond)
	// Time enough for every answered request; then the drain gives up.
	r.Timeout = durationpb.New(3 * time.Second)
	got := te.execute(t, r)
	buckets, samples := checkTimeline(t, got, srv.lis.Addr().String())
	wantCounters(t, got.result, map[string]uint64{record.HTTP2xx: 19, record.InflightLost: 1})
	if buckets[len(buckets)-1].Index != 0 || buckets[len(buckets)-1].Counters[record.InflightLost] != 1 {
		t.Errorf("last bucket sent %+v, want bucket 0 with the lost request", buckets[len(buckets)-1])
	}
	if len(samples) != 1 || samples[0].Bucket != 0 || samples[0].Remote != srv.lis.Addr().String() {
		t.Errorf("samples %+v, want the lost request of bucket 0 on its connection", samples)
	}
}
