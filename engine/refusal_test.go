package engine

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("count descriptors: %v", err)
	}
	return len(ents)
}

// rssKiB is this process's resident set, from /proc/self/status.
func rssKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// holdSlot starts an execution due in a minute on te: it takes a slot of
// the cap and opens no connection. The returned function cancels it and
// checks its Result.
func holdSlot(t *testing.T, te *testEngine, id, url string) func() {
	t.Helper()
	r := req(id, url, 1, time.Second)
	r.StartTime = timestamppb.New(time.Now().Add(time.Minute))
	ch := startStream(t, te, r)
	waitRunning(t, te, 1)
	return func() {
		t.Helper()
		if _, err := te.client.Cancel(context.Background(), &enginev1.CancelRequest{ExecutionId: id}); err != nil {
			t.Fatal(err)
		}
		res := (<-ch).mustResult(t)
		if res.GetUnsent() != 1 {
			t.Errorf("held execution: %v, want its one request unsent", res)
		}
	}
}

// A start refused at the cap, as a duplicate or while stopping is refused
// before any worker is built: a run of refused 256-worker starts leaves
// the engine's descriptors as they were (each worker holds a timerfd, and
// a refused start used to build 256 of them and leave them to the garbage
// collector). Not parallel: it counts the whole process's descriptors,
// which parallel tests would change.
func TestRefusedStartsBuildNothing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd, and timers are descriptors on Linux only")
	}
	srv := okServer(t)
	te := startEngine(t, Options{MaxConcurrentExecutions: 1, BackendName: "node-a"})
	release := holdSlot(t, te, "hold", srv.URL)
	big := func(id string) *enginev1.ExecuteRequest {
		r := req(id, srv.URL, 256, time.Second)
		r.Workers = maxWorkers
		return r
	}
	// One refusal first, so that the gRPC connection's buffers exist.
	if got := te.execute(t, big("warm-up")); status.Code(got.err) != codes.ResourceExhausted {
		t.Fatalf("warm-up: %v, want RESOURCE_EXHAUSTED", got.err)
	}
	fds, rss := openFDs(t), rssKiB(t)
	const starts = 40
	for i := range starts {
		got := te.execute(t, big(fmt.Sprint("refused-", i)))
		limit, ok := enginev1.RefusedAtCap(got.err)
		if !ok || limit != 1 || !strings.Contains(status.Convert(got.err).Message(), "cap of 1 concurrent executions") {
			t.Fatalf("start %d: %v (cap %d, %v), want the refusal at the cap of 1 with its detail", i, got.err, limit, ok)
		}
		if got := te.execute(t, big("hold")); status.Code(got.err) != codes.AlreadyExists {
			t.Fatalf("duplicate %d: %v, want ALREADY_EXISTS", i, got.err)
		}
	}
	afterFDs, afterRSS := openFDs(t), rssKiB(t)
	t.Logf("%d refused %d-worker starts at the cap and %d as duplicates: descriptors %d -> %d, RSS %d -> %d KiB",
		starts, maxWorkers, starts, fds, afterFDs, rss, afterRSS)
	// A small slack: the runtime or gRPC may open a descriptor of their
	// own; one refused start used to leave 256.
	if afterFDs > fds+4 {
		t.Errorf("open descriptors %d after the refusals, %d before", afterFDs, fds)
	}
	release()
}

// A failure to build an execution's workers that is not the cap (here the
// system out of descriptors) is UNAVAILABLE and names what failed: a
// driver reads RESOURCE_EXHAUSTED as the cap and would tell the user to
// raise --max-concurrent-executions. The workers built before the failure
// are released. Not parallel: it counts the process's descriptors.
func TestBuildFailureIsNotTheCap(t *testing.T) {
	const failAt = 3
	var made atomic.Int64
	te := startEngine(t, Options{BackendName: "node-a", newSleeper: func() (*sleeper, error) {
		if made.Add(1) > failAt {
			return nil, fmt.Errorf("timerfd: %w", syscall.EMFILE)
		}
		return newSleeper()
	}})
	srv := okServer(t)
	r := req("emfile", srv.URL, 10, time.Second)
	r.Workers = 8
	fds := 0
	if runtime.GOOS == "linux" {
		// Once, so that the gRPC connection exists before counting.
		if _, err := te.client.Info(context.Background(), &enginev1.InfoRequest{}); err != nil {
			t.Fatal(err)
		}
		fds = openFDs(t)
	}
	got := te.execute(t, r)
	if status.Code(got.err) != codes.Unavailable {
		t.Fatalf("Execute: %v, want UNAVAILABLE", got.err)
	}
	if _, ok := enginev1.RefusedAtCap(got.err); ok {
		t.Errorf("a build failure reads as the cap: %v", got.err)
	}
	msg := status.Convert(got.err).Message()
	for _, want := range []string{`"node-a"`, `execution "test/emfile"`, "worker 3 of 8", syscall.EMFILE.Error()} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if got.started != nil {
		t.Error("a failed start sent Started")
	}
	if runtime.GOOS == "linux" {
		if after := openFDs(t); after > fds+2 {
			t.Errorf("open descriptors %d after the failed build, %d before: the %d timers built were kept", after, fds, failAt)
		}
	}
	// The slot was given back: the engine runs the next start (and its
	// timers come from the seam, which now works again).
	made.Store(-100)
	res := te.execute(t, r).mustResult(t)
	if res.GetCounters()[record.HTTP2xx] != res.GetPlanned() {
		t.Errorf("after the failure: %v, want every request answered", res.GetCounters())
	}
}
