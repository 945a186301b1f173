package driver

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// statusMode says how the live status of a run is shown.
type statusMode int

const (
	statusOff   statusMode = iota
	statusLines            // a status line per target every --status-interval
	statusTTY              // a block redrawn in place at the foot of a terminal
)

// parseStatusMode reads --status: auto is tty when stderr is a terminal,
// else lines.
func parseStatusMode(s string, terminal bool) (statusMode, error) {
	switch s {
	case "auto":
		if terminal {
			return statusTTY, nil
		}
		return statusLines, nil
	case "tty":
		return statusTTY, nil
	case "lines":
		return statusLines, nil
	case "off":
		return statusOff, nil
	}
	return statusOff, fmt.Errorf("--status %q: want auto, tty, lines or off", s)
}

// progressCadence says what progress interval the engines are asked for
// and every how many of their Progress events a progress line is printed
// (0: never). With a status shown the engines report every statusTick or
// a little more often, at an interval that divides --progress, so the
// progress lines come exactly when they came without it.
func progressCadence(progress, statusTick time.Duration, status bool) (interval time.Duration, every int) {
	switch {
	case !status && progress <= 0:
		return 0, 0
	case !status:
		return progress, 1
	case progress <= 0:
		return statusTick, 0
	}
	k := (progress + statusTick - 1) / statusTick
	return progress / k, int(k)
}

// targetStatus is the live status of one target (execution): its
// engines' latest Progress counters summed over its backends.
type targetStatus struct {
	label   string
	planned time.Duration
	// backends the execution was dispatched to; reported how many of
	// them sent a Progress so far.
	backends, reported int
	// elapsed is the furthest backend's time since the start.
	elapsed  time.Duration
	counters map[string]uint64
}

// line is the status line of a target:
//
//	status <label> sent=N answered=N 2xx=N failures=<class>=N,...|none backends=R/B elapsed=<d>/<planned>
//
// sent counts the requests with an outcome (every class, so one that never
// left, a pool_overflow, is in it; one still in flight is not yet);
// answered those that got an HTTP response (1xx to 5xx; of gRPC calls
// also those answered 200 with a failed grpc-status, record.Answered);
// failures the
// non-zero failure classes (record.FailureClasses: a failed gRPC status
// too), by their short names.
func (s targetStatus) line() string {
	var failures []string
	for _, k := range record.FailureClasses {
		if v := s.counters[k]; v > 0 {
			failures = append(failures, shortCounter(k)+"="+strconv.FormatUint(v, 10))
		}
	}
	failed := "none"
	if len(failures) > 0 {
		failed = strings.Join(failures, ",")
	}
	return fmt.Sprintf("  status %s sent=%d answered=%d 2xx=%d failures=%s backends=%d/%d elapsed=%v/%v",
		s.label, record.Sum(s.counters), record.Answered(s.counters), s.counters[record.HTTP2xx], failed,
		s.reported, s.backends, s.elapsed.Truncate(time.Second), s.planned)
}

// statusBoard keeps the live status of every running target and shows it:
// in lines mode a target's line when all its backends first reported and
// then at most every interval; in tty mode a block of every running
// target's line at the foot of the terminal, redrawn at most every
// redraw. It moves only on the engines' Progress events: it owns no timer.
// A nil board shows nothing.
type statusBoard struct {
	mode     statusMode
	now      func() time.Time
	interval time.Duration
	redraw   time.Duration
	lines    *lineWriter

	mu       sync.Mutex
	targets  []*liveTarget // in dispatch order
	lastDraw time.Time
}

// liveTarget is one running target on the board.
type liveTarget struct {
	label    string
	planned  time.Duration
	backends []string
	progress map[string]*enginev1.Progress // latest, per backend
	lastLine time.Time                     // dispatch, then the last line printed
	printed  bool
}

// start puts a dispatched execution on the board.
func (b *statusBoard) start(label string, planned time.Duration, backends []string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.targets = append(b.targets, &liveTarget{label: label, planned: planned, backends: backends,
		progress: map[string]*enginev1.Progress{}, lastLine: b.now()})
	b.setBlock(false)
}

// update takes a backend's Progress for a target.
func (b *statusBoard) update(label, backend string, p *enginev1.Progress) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.find(label)
	if t == nil {
		return
	}
	t.progress[backend] = p
	now := b.now()
	switch b.mode {
	case statusLines:
		all := len(t.progress) == len(t.backends)
		if (!t.printed && all) || now.Sub(t.lastLine) >= b.interval {
			t.printed, t.lastLine = true, now
			b.lines.printf("%s", t.status().line())
		}
	case statusTTY:
		b.setBlock(now.Sub(b.lastDraw) >= b.redraw)
	}
}

// done takes a finished target off the board; the block shows it no more
// from the next line printed.
func (b *statusBoard) done(label string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, t := range b.targets {
		if t.label == label {
			b.targets = append(b.targets[:i], b.targets[i+1:]...)
			break
		}
	}
	b.setBlock(false)
}

func (b *statusBoard) find(label string) *liveTarget {
	for _, t := range b.targets {
		if t.label == label {
			return t
		}
	}
	return nil
}

// setBlock hands the terminal block the lines of every running target,
// and draws it now when draw is set; otherwise the next line printed, or
// the next redraw, shows them. b.mu is held.
func (b *statusBoard) setBlock(draw bool) {
	if b.mode != statusTTY {
		return
	}
	block := make([]string, 0, len(b.targets))
	for _, t := range b.targets {
		block = append(block, t.status().line())
	}
	if draw {
		b.lastDraw = b.now()
	}
	b.lines.setBlock(block, draw)
}

// status sums the target's latest Progress over its backends.
func (t *liveTarget) status() targetStatus {
	s := targetStatus{label: t.label, planned: t.planned, backends: len(t.backends), reported: len(t.progress),
		counters: map[string]uint64{}}
	for _, p := range t.progress {
		for k, v := range p.GetCounters() {
			s.counters[k] += v
		}
		s.elapsed = max(s.elapsed, p.GetElapsed().AsDuration())
	}
	return s
}

// liveBlock is a block of lines kept at the foot of a terminal, below the
// lines printed above it: each frame moves the cursor up over the block,
// erases to the end of the screen, writes what goes above, and writes the
// block again. Lines are cut to the terminal's width, since a wrapped line
// would take two rows and break the count.
type liveBlock struct {
	width func() int // the terminal's columns now; 0 when unknown (no cut)
	lines []string   // the block
	shown int        // rows of the block on the screen now
}

// frame returns the bytes that print above (whole lines, or nothing) and
// then the block.
func (lb *liveBlock) frame(above string) []byte {
	var buf strings.Builder
	if lb.shown > 0 {
		fmt.Fprintf(&buf, "\r\x1b[%dA\x1b[J", lb.shown)
	}
	buf.WriteString(above)
	width := 0
	if lb.width != nil && len(lb.lines) > 0 {
		width = lb.width()
	}
	for _, l := range lb.lines {
		if r := []rune(l); width > 0 && len(r) >= width {
			l = string(r[:width-1])
		}
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	lb.shown = len(lb.lines)
	return []byte(buf.String())
}

// terminalOf says whether w is a terminal, and how to read its width.
func terminalOf(w io.Writer) (bool, func() int) {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false, nil
	}
	fd := int(f.Fd())
	if !term.IsTerminal(fd) {
		return false, nil
	}
	return true, func() int {
		cols, _, err := term.GetSize(fd)
		if err != nil {
			return 0
		}
		return cols
	}
}
