package engine

import (
	"fmt"
	"strconv"
	"time"

	"github.com/cactus/go-statsd-client/v5/statsd"

	"github.com/sortie-soak/sortie/record"
)

// statsdSink sends an execution's per-flush deltas to statsd: one counter
// per nonzero counter delta and worker, and a sample of latency_2xx as
// timers in ms, each sent with the sample rate it stands for, so a statsd
// server counts every response while a flush stays a bounded number of
// packets at any rate.
type statsdSink struct {
	client *statsd.Client
	x      *execution
	prev   []counterSet
	names  [][numCounters]string
	timer  []string
	buf    []int64
}

func newStatsdSink(x *execution) (*statsdSink, error) {
	st := x.spec.stats
	sender, err := statsd.NewSimpleSender(st.addr)
	if err != nil {
		return nil, fmt.Errorf("statsd sender for %s: %w", st.addr, err)
	}
	cl, err := statsd.NewClientWithSender(sender, "", 0)
	if err != nil {
		_ = sender.Close()
		return nil, fmt.Errorf("statsd client: %w", err)
	}
	client := cl.(*statsd.Client)
	// Sampling is decided here (the reservoir), not by the client.
	client.SetSamplerFunc(func(float32) bool { return true })
	s := &statsdSink{
		client: client,
		x:      x,
		prev:   make([]counterSet, len(x.workers)),
		names:  make([][numCounters]string, len(x.workers)),
		timer:  make([]string, len(x.workers)),
	}
	for i := range x.workers {
		base := st.names + strconv.Itoa(i) + "."
		for c := range numCounters {
			s.names[i][c] = base + counterNames[c]
		}
		s.timer[i] = base + record.Latency2xx
	}
	return s, nil
}

// run flushes every interval until stop closes, then a last time.
func (s *statsdSink) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(s.x.spec.stats.flushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flush()
		case <-stop:
			s.flush()
			_ = s.client.Close()
			return
		}
	}
}

// flush sends what changed since the previous flush. Send errors (no one
// listening) are ignored: statsd is best effort and never fails a run.
func (s *statsdSink) flush() {
	var now counterSet
	for i, w := range s.x.workers {
		w.stats.snapshot(&now)
		for c := range numCounters {
			if d := now[c] - s.prev[i][c]; d > 0 {
				_ = s.client.Inc(s.names[i][c], int64(d), 1)
			}
		}
		s.prev[i] = now
		w.stats.mu.Lock()
		var seen uint64
		s.buf, seen = w.stats.window.take(s.buf)
		w.stats.mu.Unlock()
		if len(s.buf) == 0 {
			continue
		}
		rate := float32(float64(len(s.buf)) / float64(seen))
		if rate < 1e-6 {
			rate = 1e-6
		}
		for _, v := range s.buf {
			ms := strconv.FormatFloat(float64(v)/1e6, 'f', 3, 64)
			_ = s.client.Raw(s.timer[i], ms+"|ms", rate)
		}
	}
}
