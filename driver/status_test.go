package driver

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/record"
)

// prog is a Progress snapshot at elapsed with counters.
func prog(elapsed time.Duration, counters map[string]uint64) *enginev1.Progress {
	return &enginev1.Progress{Elapsed: durationpb.New(elapsed), Counters: counters}
}

// step is one Progress event of a backend.
type step struct {
	backend string
	p       *enginev1.Progress
}

func TestStatusLine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		backends []string
		planned  time.Duration
		events   []step
		want     string
	}{
		{name: "nothing reported yet", backends: []string{"a", "b"}, planned: time.Minute,
			want: "  status mesh/svc-1 sent=0 answered=0 2xx=0 failures=none backends=0/2 elapsed=0s/1m0s"},
		{name: "one backend of two", backends: []string{"a", "b"}, planned: time.Minute,
			events: []step{{"a", prog(1200*time.Millisecond, map[string]uint64{record.HTTP2xx: 7})}},
			want:   "  status mesh/svc-1 sent=7 answered=7 2xx=7 failures=none backends=1/2 elapsed=1s/1m0s"},
		{name: "summed over backends, the furthest elapsed", backends: []string{"a", "b"}, planned: time.Minute,
			events: []step{
				{"a", prog(12900*time.Millisecond, map[string]uint64{record.HTTP2xx: 77})},
				{"b", prog(12100*time.Millisecond, map[string]uint64{record.HTTP2xx: 72})},
			},
			want: "  status mesh/svc-1 sent=149 answered=149 2xx=149 failures=none backends=2/2 elapsed=12s/1m0s"},
		{name: "a later snapshot replaces the earlier one (cumulative, never added)", backends: []string{"a"}, planned: 30 * time.Second,
			events: []step{
				{"a", prog(time.Second, map[string]uint64{record.HTTP2xx: 6})},
				{"a", prog(2*time.Second, map[string]uint64{record.HTTP2xx: 12})},
			},
			want: "  status mesh/svc-1 sent=12 answered=12 2xx=12 failures=none backends=1/1 elapsed=2s/30s"},
		{name: "failures by class, in the outcome order; detail counters left out", backends: []string{"a", "b"}, planned: 8*time.Hour + 30*time.Minute,
			events: []step{
				{"a", prog(time.Hour, map[string]uint64{record.HTTP2xx: 100, record.HTTP5xx: 3, record.StreamResets: 2,
					record.ResetsBeforeHeaders: 2, record.StreamResetsPrefix + record.ReasonRemoteReset: 2, record.LateSends: 9})},
				{"b", prog(time.Hour, map[string]uint64{record.HTTP2xx: 98, record.HTTP3xx: 1, record.HTTP4xx: 1, record.PoolOverflow: 4,
					record.PoolConnectionFailure: 1, record.PoolFailureRemote: 1, record.PoolFailureTimeout: 2, record.InflightLost: 1})},
			},
			want: "  status mesh/svc-1 sent=213 answered=203 2xx=198 failures=4xx=1,5xx=3,stream_resets=2,pool_connection_failure=1,pool_failure_timeout=2,pool_overflow=4,inflight_lost=1 backends=2/2 elapsed=1h0m0s/8h30m0s"},
		{name: "grpc: failed calls answered 200 are answered, resets, timeouts and overflows are not; failed statuses are failures", backends: []string{"a"}, planned: time.Minute,
			events: []step{{"a", prog(time.Second, map[string]uint64{record.HTTP2xx: 5, record.GRPCStatusOK: 5,
				record.GRPCStatusPrefix + "14": 3, record.GRPCStatusMissing: 2, record.GRPCError: 5, record.StreamResets: 1,
				record.ResetsBeforeHeaders: 1, record.RequestTimeout: 1, record.PoolOverflow: 1})}},
			want: "  status mesh/svc-1 sent=11 answered=8 2xx=5 failures=stream_resets=1,pool_overflow=1,request_timeout=1,grpc_status.14=3,grpc_status.missing=2 backends=1/1 elapsed=1s/1m0s"},
		{name: "an unknown backend's event is its own", backends: []string{"a"}, planned: time.Second,
			events: []step{{"a", prog(500*time.Millisecond, map[string]uint64{record.HTTP1xx: 1, record.HTTP2xx: 2})}},
			want:   "  status mesh/svc-1 sent=3 answered=3 2xx=2 failures=none backends=1/1 elapsed=0s/1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := &liveTarget{label: "mesh/svc-1", planned: tc.planned, backends: tc.backends, progress: map[string]*enginev1.Progress{}}
			for _, ev := range tc.events {
				lt.progress[ev.backend] = ev.p
			}
			if got := lt.status().line(); got != tc.want {
				t.Errorf("line\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// The documented format, as a grep recipe would read it.
var statusLineRE = regexp.MustCompile(`^  status (\S+) sent=(\d+) answered=(\d+) 2xx=(\d+) failures=(none|[a-z0-9_.]+=\d+(,[a-z0-9_.]+=\d+)*) backends=(\d+)/(\d+) elapsed=(\S+)/(\S+)$`)

func TestStatusLineFormat(t *testing.T) {
	s := targetStatus{label: "mesh/svc-1/stage-2", planned: time.Minute, backends: 3, reported: 2, elapsed: 41 * time.Second,
		counters: map[string]uint64{record.HTTP2xx: 10, record.HTTP5xx: 1, record.PoolOverflow: 2}}
	m := statusLineRE.FindStringSubmatch(s.line())
	if m == nil {
		t.Fatalf("%q does not match %s", s.line(), statusLineRE)
	}
	if m[1] != "mesh/svc-1/stage-2" || m[2] != "13" || m[3] != "11" || m[4] != "10" || m[5] != "5xx=1,pool_overflow=2" || m[7] != "2" || m[8] != "3" || m[9] != "41s" || m[10] != "1m0s" {
		t.Errorf("fields %q", m[1:])
	}
}

func TestProgressCadence(t *testing.T) {
	for _, tc := range []struct {
		progress, tick time.Duration
		status         bool
		interval       time.Duration
		every          int
	}{
		// Without a status, exactly as before: the engines report every
		// --progress, and every report is a line.
		{progress: 30 * time.Second, tick: time.Second, status: false, interval: 30 * time.Second, every: 1},
		{progress: 0, tick: time.Second, status: false, interval: 0, every: 0},
		// With one, every tick; a line every --progress.
		{progress: 30 * time.Second, tick: time.Second, status: true, interval: time.Second, every: 30},
		{progress: 0, tick: time.Second, status: true, interval: time.Second, every: 0},
		// A --progress the tick does not divide: a little more often than
		// the tick, so a line still comes at every --progress.
		{progress: 1500 * time.Millisecond, tick: time.Second, status: true, interval: 750 * time.Millisecond, every: 2},
		{progress: 2500 * time.Millisecond, tick: time.Second, status: true, interval: 2500 * time.Millisecond / 3, every: 3},
		// A --progress shorter than the tick: every report is a line.
		{progress: 500 * time.Millisecond, tick: time.Second, status: true, interval: 500 * time.Millisecond, every: 1},
	} {
		interval, every := progressCadence(tc.progress, tc.tick, tc.status)
		if interval != tc.interval || every != tc.every {
			t.Errorf("progressCadence(%v, %v, %v) = %v, %d; want %v, %d", tc.progress, tc.tick, tc.status, interval, every, tc.interval, tc.every)
		}
		if every > 0 && time.Duration(every)*interval > tc.progress {
			t.Errorf("progressCadence(%v, %v, %v): a line after %v, later than --progress", tc.progress, tc.tick, tc.status, time.Duration(every)*interval)
		}
	}
}

func TestParseStatusMode(t *testing.T) {
	for _, tc := range []struct {
		s        string
		terminal bool
		want     statusMode
		bad      bool
	}{
		{s: "auto", terminal: true, want: statusTTY},
		{s: "auto", terminal: false, want: statusLines},
		{s: "tty", terminal: false, want: statusTTY},
		{s: "lines", terminal: true, want: statusLines},
		{s: "off", terminal: true, want: statusOff},
		{s: "TTY", bad: true},
		{s: "", bad: true},
	} {
		got, err := parseStatusMode(tc.s, tc.terminal)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseStatusMode(%q, %v) = %v, %v", tc.s, tc.terminal, got, err)
		}
	}
}

// TestStatusLinesMode: a target's first line comes once every backend
// reported, then one at most every interval, on the board's clock.
func TestStatusLinesMode(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	var out bytes.Buffer
	b := &statusBoard{mode: statusLines, now: clk.Now, interval: 10 * time.Second, redraw: time.Second, lines: &lineWriter{w: &out}}
	b.start("mesh/svc-1", time.Minute, []string{"a", "b"})
	b.start("mesh/svc-2", time.Minute, []string{"a", "b"})
	for i := 1; i <= 25; i++ {
		clk.Advance(time.Second)
		el := time.Duration(i) * time.Second
		b.update("mesh/svc-1", "a", prog(el, map[string]uint64{record.HTTP2xx: uint64(6 * i)}))
		b.update("mesh/svc-1", "b", prog(el, map[string]uint64{record.HTTP2xx: uint64(6 * i)}))
		if i <= 12 {
			// svc-2's backend b never reports: its first line waits for
			// the interval.
			b.update("mesh/svc-2", "a", prog(el, map[string]uint64{record.HTTP2xx: uint64(3 * i)}))
		}
	}
	b.done("mesh/svc-1")
	b.update("mesh/svc-1", "a", prog(26*time.Second, map[string]uint64{record.HTTP2xx: 999}))
	want := []string{
		"  status mesh/svc-1 sent=12 answered=12 2xx=12 failures=none backends=2/2 elapsed=1s/1m0s",
		"  status mesh/svc-2 sent=30 answered=30 2xx=30 failures=none backends=1/2 elapsed=10s/1m0s",
		// Printed on a's update, b's of the same second not yet in.
		"  status mesh/svc-1 sent=126 answered=126 2xx=126 failures=none backends=2/2 elapsed=11s/1m0s",
		"  status mesh/svc-1 sent=246 answered=246 2xx=246 failures=none backends=2/2 elapsed=21s/1m0s",
	}
	if d := cmp.Diff(want, strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")); d != "" {
		t.Errorf("lines (-want +got):\n%s", d)
	}
}

// screen is a fake terminal: it applies what the status block writes
// (text, newlines, carriage return, cursor up, erase to the end of the
// screen) to rows of text, and counts the redraws.
type screen struct {
	rows    []string
	row     int
	redraws int
	// now, when set, is the clock each write is stamped with, in writes.
	now    func() time.Time
	writes []time.Time
}

var csi = regexp.MustCompile(`^\x1b\[(\d*)([AJ])`)

func (s *screen) Write(p []byte) (int, error) {
	if s.now != nil {
		s.writes = append(s.writes, s.now())
	}
	b := string(p)
	for len(b) > 0 {
		if m := csi.FindStringSubmatch(b); m != nil {
			switch m[2] {
			case "A":
				n, _ := strconv.Atoi(m[1])
				s.row = max(s.row-n, 0)
				s.redraws++
			case "J":
				s.rows = s.rows[:s.row]
			}
			b = b[len(m[0]):]
			continue
		}
		switch c := b[0]; c {
		case '\r':
		case '\n':
			s.row++
		default:
			for len(s.rows) <= s.row {
				s.rows = append(s.rows, "")
			}
			s.rows[s.row] += string(c)
		}
		b = b[1:]
	}
	return len(p), nil
}

// TestStatusTTY drives the block on a fake terminal with a fake clock:
// lines print above it, it shows every running target's latest status,
// it is redrawn at most every redraw, and it is gone when they are done.
func TestStatusTTY(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	scr := &screen{now: clk.Now}
	lw := &lineWriter{w: scr, block: &liveBlock{width: func() int { return 0 }}}
	b := &statusBoard{mode: statusTTY, now: clk.Now, interval: time.Minute, redraw: 250 * time.Millisecond, lines: lw}

	lw.printf("  running mesh/svc-1 (5 rps per backend for 1m0s) on a, b")
	b.start("mesh/svc-1", time.Minute, []string{"a", "b"})
	lw.printf("  running mesh/svc-2 (5 rps per backend for 1m0s) on a, b")
	b.start("mesh/svc-2", time.Minute, []string{"a", "b"})
	// Four engines' streams report every second, at 100ms from each
	// other: 40 updates in 10 s, at most 4 redraws a second.
	start, first := scr.redraws, len(scr.writes)
	for i := 1; i <= 10; i++ {
		for _, lb := range []struct{ label, backend string }{{"mesh/svc-1", "a"}, {"mesh/svc-1", "b"}, {"mesh/svc-2", "a"}, {"mesh/svc-2", "b"}} {
			clk.Advance(100 * time.Millisecond)
			b.update(lb.label, lb.backend, prog(time.Duration(i)*time.Second, map[string]uint64{record.HTTP2xx: uint64(5 * i)}))
		}
		clk.Advance(600 * time.Millisecond)
	}
	if n := scr.redraws - start; n < 10 || n > 20 {
		t.Errorf("%d redraws for 40 updates over 10s, want one or two a second", n)
	}
	for i := first + 1; i < len(scr.writes); i++ {
		if gap := scr.writes[i].Sub(scr.writes[i-1]); gap < 250*time.Millisecond {
			t.Errorf("redraws %v apart, at %v: want at least 250ms", gap, scr.writes[i].Sub(time.Unix(0, 0)))
		}
	}
	// One redraw per update when they come slower than the redraw rate.
	before := scr.redraws
	for i := 0; i < 5; i++ {
		clk.Advance(300 * time.Millisecond)
		b.update("mesh/svc-2", "a", prog(11*time.Second, map[string]uint64{record.HTTP2xx: 55}))
	}
	if n := scr.redraws - before; n != 5 {
		t.Errorf("%d redraws for 5 updates 300ms apart, want 5", n)
	}
	lw.printf("  progress mesh/svc-1 a 10s 2xx=50")
	want := []string{
		"  running mesh/svc-1 (5 rps per backend for 1m0s) on a, b",
		"  running mesh/svc-2 (5 rps per backend for 1m0s) on a, b",
		"  progress mesh/svc-1 a 10s 2xx=50",
		"  status mesh/svc-1 sent=100 answered=100 2xx=100 failures=none backends=2/2 elapsed=10s/1m0s",
		"  status mesh/svc-2 sent=105 answered=105 2xx=105 failures=none backends=2/2 elapsed=11s/1m0s",
	}
	if d := cmp.Diff(want, scr.rows); d != "" {
		t.Errorf("screen (-want +got):\n%s", d)
	}
	// A finished target leaves the block with its PASS line.
	b.done("mesh/svc-1")
	lw.printf("  PASS mesh/svc-1 (scenario mesh, 1m0.5s)")
	b.done("mesh/svc-2")
	lw.printf("  PASS mesh/svc-2 (scenario mesh, 1m0.5s)")
	want = append(want[:3], "  PASS mesh/svc-1 (scenario mesh, 1m0.5s)", "  PASS mesh/svc-2 (scenario mesh, 1m0.5s)")
	if d := cmp.Diff(want, scr.rows); d != "" {
		t.Errorf("screen at the end (-want +got):\n%s", d)
	}
}

// TestLiveBlockCut: a line as wide as the terminal is cut, so that it
// never wraps onto a row the block does not count.
func TestLiveBlockCut(t *testing.T) {
	lb := &liveBlock{width: func() int { return 10 }, lines: []string{"0123456789abc", "short", "ünïcödé-wide"}}
	got := string(lb.frame("above\n"))
	if want := "above\n012345678\nshort\nünïcödé-w\n"; got != want {
		t.Errorf("frame %q, want %q", got, want)
	}
	if got := string(lb.frame("")); !strings.HasPrefix(got, "\r\x1b[3A\x1b[J") {
		t.Errorf("second frame %q does not first go up over the 3 rows", got)
	}
}

// TestIntegrationStatusBeforeProgress: a real run prints status lines
// from its first second, before its first --progress line, which keeps
// its format; stderr is not a terminal, so they are plain lines.
func TestIntegrationStatusBeforeProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load for seconds")
	}
	tg := newTarget(t)
	a := startEngine(t, "node-a", 0)
	planPath := writePlan(t, cleanPlan, planData{Backends: []string{a}, URL: tg.URL})
	// The engines report every 750ms (the status tick of 1s, shortened
	// to divide --progress); every second report is a progress line.
	res := runDriver(t, context.Background(), testOptions(), planPath, "--progress", "1500ms")
	if res.code != 0 {
		t.Fatalf("exit %d, want 0", res.code)
	}
	firstStatus, firstProgress := -1, -1
	for i, l := range strings.Split(res.stderr, "\n") {
		switch {
		case strings.HasPrefix(l, "  status "):
			m := statusLineRE.FindStringSubmatch(l)
			if m == nil {
				t.Errorf("status line %q is not in the documented format", l)
			} else if (m[1] != "mesh/alpha" && m[1] != "mesh/beta") || m[8] != "1" || m[10] != "2s" {
				t.Errorf("status line %q: want mesh/alpha or mesh/beta on 1 backend, planned 2s", l)
			}
			if firstStatus < 0 {
				firstStatus = i
			}
		case strings.HasPrefix(l, "  progress "):
			if !regexp.MustCompile(`^  progress mesh/(alpha|beta) ` + regexp.QuoteMeta(a) + ` \d+(\.\d+)?m?s 2xx=\d+`).MatchString(l) {
				t.Errorf("progress line %q changed its format", l)
			}
			if firstProgress < 0 {
				firstProgress = i
			}
		}
	}
	if firstStatus < 0 || firstProgress < 0 || firstStatus > firstProgress {
		t.Errorf("first status line at %d, first progress line at %d: want a status line first, and both", firstStatus, firstProgress)
	}
}
