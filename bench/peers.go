package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// measure is what one row's window measured.
type measure struct {
	Wall time.Duration
	// CPU is the generators' user+sys time, summed over their processes.
	CPU time.Duration
	// PeakKiB sums the generators' peak RSS.
	PeakKiB uint64
	// TargetCPU is the target's user+sys time in the window.
	TargetCPU time.Duration
}

// window measures the target, and an engine process when there is one,
// from its start to its end.
type window struct {
	b          *bench
	t0         time.Time
	gen0, tgt0 procStat
}

// startWindow opens a window; pid is the engine's, 0 when the generators
// are peers measured by their rusage.
func (b *bench) startWindow(pid int) (*window, error) {
	w := &window{b: b}
	var err error
	if pid > 0 {
		if w.gen0, err = readStat(pid); err != nil {
			return nil, err
		}
	}
	if w.tgt0, err = readStat(b.target.pid()); err != nil {
		return nil, err
	}
	w.t0 = time.Now()
	return w, nil
}

// end closes the window; pid as for startWindow.
func (w *window) end(pid int) (measure, error) {
	m := measure{Wall: time.Since(w.t0)}
	tgt, err := readStat(w.b.target.pid())
	if err != nil {
		return m, err
	}
	m.TargetCPU = tgt.CPU() - w.tgt0.CPU()
	if pid > 0 {
		gen, err := readStat(pid)
		if err != nil {
			return m, err
		}
		st, err := readStatus(pid)
		if err != nil {
			return m, err
		}
		m.CPU = gen.CPU() - w.gen0.CPU()
		m.PeakKiB = st.HWMKiB
	}
	return m, nil
}

// findPeer returns the path of a peer's binary: in PeersBin, else in
// $PATH; "" when it is not installed.
func (b *bench) findPeer(name string) string {
	if name == peerFloor {
		return b.self[0]
	}
	if b.opts.PeersBin != "" {
		p := filepath.Join(b.opts.PeersBin, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// peerProc is one peer process of a row and how to read its report.
type peerProc struct {
	cmd    *exec.Cmd
	out    bytes.Buffer // stdout, when the report is not in a file
	errOut bytes.Buffer // stderr, shown when the run fails
	// report returns the peer's report once the process exited.
	report func(ctx context.Context, p *peerProc) (peerReport, error)
}

// rateArg writes rate for vegeta's -rate: "freq/duration" with whole
// numbers.
func rateArg(rate float64) (string, error) {
	for _, per := range []int{1, 2, 4, 5, 10} {
		f := rate * float64(per)
		if f == float64(int64(f)) && f > 0 {
			return fmt.Sprintf("%d/%ds", int64(f), per), nil
		}
	}
	return "", fmt.Errorf("rate %v has no whole vegeta form", rate)
}

// peerCommands builds n processes of peer at rate rps each (0: closed
// loop) for d.
func (b *bench) peerCommands(peer, bin string, n int, rate float64, d time.Duration, tag string) ([]*peerProc, error) {
	var procs []*peerProc
	for i := range n {
		p := &peerProc{}
		dir := filepath.Join(b.tmp, fmt.Sprintf("%s-%s-%d", tag, peer, i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		switch peer {
		case peerFortio, peerFortioUniform:
			// Connections: one per process at the soak shape, 8 (fortio's
			// default) at 1,000 rps, 64 at high rate; -r for
			// sub-millisecond percentiles.
			conns := 64
			switch {
			case rate < 100:
				conns = 1
			case rate <= 10000:
				conns = 8
			}
			file := filepath.Join(dir, "result.json")
			args := []string{"load", "-qps", strconv.FormatFloat(rate, 'f', -1, 64), "-t", d.String(),
				"-c", strconv.Itoa(conns), "-r", "0.00001", "-json", file}
			if peer == peerFortioUniform {
				args = append(args, "-uniform")
			}
			p.cmd = exec.Command(bin, append(args, b.url)...)
			p.report = func(context.Context, *peerProc) (peerReport, error) {
				data, err := os.ReadFile(file)
				if err != nil {
					return peerReport{}, fmt.Errorf("fortio result: %w", err)
				}
				return parseFortio(data)
			}
		case peerVegeta:
			r, err := rateArg(rate)
			if err != nil {
				return nil, err
			}
			file := filepath.Join(dir, "results.bin")
			p.cmd = exec.Command(bin, "attack", "-rate", r, "-duration", d.String(), "-max-workers", "64", "-output", file)
			p.cmd.Stdin = bytes.NewReader([]byte("GET " + b.url + "\n"))
			p.report = func(ctx context.Context, _ *peerProc) (peerReport, error) {
				// The report is made after the attack, unpinned: its cost
				// is not the attack's.
				rep := exec.CommandContext(ctx, bin, "report", "-type", "json", file)
				var stderr bytes.Buffer
				rep.Stderr = &stderr
				data, err := rep.Output()
				_ = os.Remove(file)
				if err != nil {
					return peerReport{}, fmt.Errorf("vegeta report: %w: %s", err, tail(stderr.Bytes()))
				}
				return parseVegeta(data)
			}
		case peerWrk:
			p.cmd = exec.Command(bin, "-t1", "-c50", "-d"+d.String(), "--latency", b.url)
			p.report = func(_ context.Context, p *peerProc) (peerReport, error) { return parseWrk(p.out.Bytes()) }
		case peerFloor:
			// As many connections as the engine has at high rate; at
			// low rates one is in flight and one answer waits.
			conns := b.opts.EngineConnections
			if rate <= 10000 {
				conns = 4
			}
			args := append(append([]string(nil), b.self[1:]...), cmdFloor, "--url", b.url,
				"--rate", strconv.FormatFloat(rate, 'f', 0, 64), "--duration", d.String(), "--connections", strconv.Itoa(conns))
			p.cmd = exec.Command(bin, args...)
			p.report = func(_ context.Context, p *peerProc) (peerReport, error) { return parseFloor(p.out.Bytes()) }
		default:
			return nil, fmt.Errorf("unknown peer %q", peer)
		}
		p.cmd.Dir = dir
		p.cmd.Stdout = &p.out
		p.cmd.Stderr = &p.errOut
		p.cmd.SysProcAttr = childAttr()
		procs = append(procs, p)
	}
	return procs, nil
}

// peerRow runs n processes of peer at rate rps each (0: closed loop) for d
// together, pinned to the generators' core, and sums their CPU and peak
// RSS from their rusage.
func (b *bench) peerRow(ctx context.Context, scenario, peer string, n int, rate float64, d time.Duration) (Row, error) {
	row := Row{Scenario: scenario, Tool: peer, Processes: n, Rate: rate * float64(n), Duration: d.String(), LatencyFrom: "actual"}
	binName := peer
	if peer == peerFortioUniform {
		row.Tool, binName = "fortio -uniform", peerFortio
	}
	if n > 1 {
		row.Tool = fmt.Sprintf("%s x%d", row.Tool, n)
	}
	if !contains(b.opts.Peers, binName) {
		row.note("not run (--peers)")
		return row, nil
	}
	bin := b.findPeer(binName)
	if bin == "" {
		row.note("not installed")
		return row, nil
	}
	row.Installed = true
	procs, err := b.peerCommands(peer, bin, n, rate, d, scenario)
	if err != nil {
		return row, err
	}
	b.log.Info("run", "scenario", scenario, "tool", peer, "processes", n, "rate", rate, "duration", d, "bin", bin)
	w, err := b.startWindow(0)
	if err != nil {
		return row, err
	}
	started := 0
	for _, p := range procs {
		if err = startPinned(p.cmd, b.genCPU, b.opts.Nice); err != nil {
			break
		}
		started++
	}
	// Stop the whole row if the bench is interrupted; the peers end on
	// their own otherwise.
	stop := context.AfterFunc(ctx, func() {
		for _, p := range procs[:started] {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	})
	var waitErrs []error
	for _, p := range procs[:started] {
		if werr := p.cmd.Wait(); werr != nil {
			waitErrs = append(waitErrs, fmt.Errorf("%s: %w: %s", peer, werr, tail(p.errOut.Bytes())))
		}
	}
	stop()
	if err != nil {
		return row, fmt.Errorf("start %s: %w", peer, err)
	}
	m, err := w.end(0)
	if err != nil {
		return row, err
	}
	if err := errors.Join(waitErrs...); err != nil {
		return row, err
	}
	if err := ctx.Err(); err != nil {
		return row, err
	}
	for _, p := range procs {
		ps := p.cmd.ProcessState
		m.CPU += ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			m.PeakKiB += uint64(ru.Maxrss) // KiB on Linux
		}
	}
	row.setMeasure(m)
	var worst50, worst99 time.Duration
	var rateSum float64
	for _, p := range procs {
		r, err := p.report(ctx, p)
		if err != nil {
			return row, err
		}
		row.Sent += r.Sent
		row.OK += r.OK
		row.Errors += r.Errors
		rateSum += r.Rate
		worst50, worst99 = max(worst50, r.P50), max(worst99, r.P99)
		if r.Note != "" {
			row.note("%s", r.Note)
		}
	}
	row.P50NS, row.P99NS = int64(worst50), int64(worst99)
	row.AchievedRate = rateSum
	row.setPerRequest()
	if rate > 0 {
		row.Planned = uint64(rate * float64(n) * d.Seconds())
		row.Held = row.Errors == 0 && float64(row.Sent) >= 0.99*float64(row.Planned) && rateSum >= 0.99*row.Rate
	} else {
		row.Held = row.Errors == 0
		row.note("closed loop, 50 connections: %.0f rps", rateSum)
	}
	if n > 1 {
		row.note("CPU and RSS summed over %d processes, p50/p99 the worst", n)
	}
	switch peer {
	case peerFortio:
		if n == 1 && rate >= 100 {
			row.note("its connections send in step, in bursts")
		}
		row.note("plus one warm-up request per connection, not counted")
	case peerFortioUniform:
		row.note("connections spread over the period")
		row.note("plus one warm-up request per connection, not counted")
	case peerVegeta:
		row.note("attack only; report made afterwards")
	case peerFloor:
		row.LatencyFrom = ""
		row.note("reference, not a peer: raw system calls, no HTTP parsing, no statistics")
	}
	return row, nil
}

// tail returns the last line or so of a program's stderr, for an error.
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 300 {
		b = b[len(b)-300:]
	}
	return string(b)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
