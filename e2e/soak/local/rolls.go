package local

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/record"
)

// soak local's rolls and faults, and the lines it writes of them: a
// ROLLED or FAILED line per roll in rolls.log, a FAULT line per fault in
// faults.log, in the one format record.ParseRolls reads (the churn
// driver's, with fields added after its own). Each line is written when
// its roll or fault is over, so it carries both ends:
//
//	ROLLED <target> at=<t> took=<s>s end=<t> term=<t> held_conns=<n> held_inflight=<n> answered_after_term=<n>
//	FAILED <target> at=<t> took=<s>s end=<t>: <why>
//	FAULT <kind> <target|node|driver> at=<t> end=<t> spec=<--fault> [failed=<n>] [left=<n>]
//
// Times are RFC 3339 in UTC to the millisecond.

// drainWait bounds the wait for a replica told to stop to exit: its drain
// takes --drain-grace (1 s) and at most --drain-timeout (30 s) more.
const drainWait = 45 * time.Second

// faultPoll is how often a target fault is looked at until it ends.
const faultPoll = 100 * time.Millisecond

// lineLog is a file of the run directory that takes whole lines, each
// synced to disk as it is written, and echoes them to stderr.
type lineLog struct {
	mu   sync.Mutex
	w    io.Writer
	echo io.Writer
}

func (g *lineLog) write(line string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fmt.Fprintln(g.w, line)
	if f, ok := g.w.(interface{ Sync() error }); ok {
		f.Sync()
	}
	if g.echo != nil {
		fmt.Fprintln(g.echo, line)
	}
}

// msNow is the time now to the millisecond, as the lines write it.
func msNow() time.Time { return time.Now().Truncate(time.Millisecond) }

// rollRecord is the ROLLED line of a roll: from its begin to its end (the
// old replica gone and out of the endpoints), with when it got SIGTERM and
// what it held then (nil when it did not say).
func rollRecord(target string, begin, term, end time.Time, held *record.Held) record.Roll {
	return record.Roll{Ref: target, Begin: begin, Took: end.Sub(begin).Round(time.Second), End: end, Term: term, Held: held}
}

// failedRollRecord is the FAILED line of a roll that could not start its
// new replica.
func failedRollRecord(target string, begin, end time.Time, err error) record.Roll {
	return record.Roll{Ref: target, Begin: begin, Took: end.Sub(begin).Round(time.Second), End: end,
		Failed: true, Why: strings.Join(strings.Fields(err.Error()), " ")}
}

// faultRecord is the FAULT line of a fault over from begin to end.
func faultRecord(f Fault, begin, end time.Time, fields ...record.Field) record.Fault {
	subject := f.Subject
	if f.Kind.driverFault() {
		subject = "driver"
	}
	return record.Fault{Kind: string(f.Kind), Subject: subject, Begin: begin, End: end,
		Fields: append([]record.Field{{Key: "spec", Value: f.String()}}, fields...)}
}

// inject carries out one fault and, once it is over, writes its line.
func (l *local) inject(ctx context.Context, f Fault) {
	l.log.Info("fault", "fault", f.String())
	begin := msNow()
	var end time.Time
	var fields []record.Field
	ok := false
	switch f.Kind {
	case TargetDown, TargetFail:
		begin, end, fields, ok = l.targetFault(ctx, f)
	case EngineKill:
		if e := l.engine(f.Subject); e != nil {
			ok = e.proc.signal(syscall.SIGKILL) == nil
			end = begin
		}
	case EngineFreeze:
		if e := l.engine(f.Subject); e != nil {
			end, ok = l.freeze(ctx, e.proc, f.For)
		}
	case EngineRestart:
		end, ok = l.restartEngine(ctx, f)
	case DriverFreeze:
		end, ok = l.freeze(ctx, l.currentDriver(), f.For)
	case DriverKill, DriverTerm:
		end, ok = l.stopDriver(f)
	}
	if !ok {
		l.log.Error("fault not injected", "fault", f.String())
		return
	}
	l.faults.write(faultRecord(f, begin, end, fields...).String())
}

// stopDriver kills (driver-kill) or terminates (driver-term) the driver,
// and, unless --no-resume, asks runDriver to start it again with --resume
// after the fault's delay. The restart is asked for before the signal, so
// runDriver finds it when the driver's exit wakes it. The fault ends when
// the signal is sent; the driver's gap is the report's to name.
func (l *local) stopDriver(f Fault) (time.Time, bool) {
	sig := syscall.SIGKILL
	if f.Kind == DriverTerm {
		sig = syscall.SIGTERM
	}
	l.mu.Lock()
	drv := l.driver
	if !l.o.NoResume {
		l.restart, l.restartAfter = true, f.For
	}
	l.mu.Unlock()
	if drv == nil || drv.signal(sig) != nil {
		l.mu.Lock()
		l.restart = false
		l.mu.Unlock()
		return time.Time{}, false
	}
	return msNow(), true
}

// restartEngine kills the node's engine with SIGKILL and, after the
// fault's length, starts a new engine process of the same node name at
// the same address and waits until it answers: a node whose engine pod
// restarted, found again where its pool names it (a services pool's
// address is the node's; the driver dials it again). The fault ends when
// the new engine answers.
func (l *local) restartEngine(ctx context.Context, f Fault) (time.Time, bool) {
	old := l.engine(f.Subject)
	if old == nil || old.proc.signal(syscall.SIGKILL) != nil {
		return time.Time{}, false
	}
	// The address is free once the killed process is gone.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := old.proc.wait(wctx)
	cancel()
	if err != nil {
		return time.Time{}, false
	}
	t := time.NewTimer(f.For)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return time.Time{}, false
	}
	e, err := l.startEngine(f.Subject, old.addr, l.restartLog(f.Subject))
	if err == nil {
		err = waitEngine(ctx, e, l.engineCreds(), 20*time.Second)
	}
	if err != nil {
		l.log.Error("engine-restart: the new engine did not start", "node", f.Subject, "err", err)
		return time.Time{}, false
	}
	l.mu.Lock()
	for i, x := range l.engines {
		if x == old {
			l.engines[i] = e
		}
	}
	l.mu.Unlock()
	l.log.Info("fault: engine restarted", "node", f.Subject, "addr", e.addr)
	return msNow(), true
}

// restartLog is the log of the node's engine that an engine-restart
// starts: engine-<node>-restarted.log the first time, then
// engine-<node>-restarted-2.log and so on, so that a node restarted twice
// keeps both engines' logs.
func (l *local) restartLog(node string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.restarts == nil {
		l.restarts = map[string]int{}
	}
	l.restarts[node]++
	if n := l.restarts[node]; n > 1 {
		return fmt.Sprintf("engine-%s-restarted-%d.log", node, n)
	}
	return "engine-" + node + "-restarted.log"
}

// currentDriver is the driver process running now.
func (l *local) currentDriver() *proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.driver
}

// freeze stops p with SIGSTOP and resumes it after d (or when the run
// ends); it returns when it resumed it.
func (l *local) freeze(ctx context.Context, p *proc, d time.Duration) (time.Time, bool) {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return time.Time{}, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	p.signal(syscall.SIGCONT)
	end := msNow()
	l.log.Info("fault: resumed", "process", p.name)
	return end, true
}

// targetFault sets a target-down (503 for the window) or target-fail
// (reset the next Count requests, or those of the window) fault on the
// target's replica and watches it until it ends: its end is when the
// target says it ended, failed= how many requests it failed. When the run
// ends first, its end is the last look, and left= what a counted fault
// still had to fail.
func (l *local) targetFault(ctx context.Context, f Fault) (begin, end time.Time, fields []record.Field, ok bool) {
	l.mu.Lock()
	r := l.replicas[f.Subject]
	l.mu.Unlock()
	if r == nil {
		l.log.Error("fault: no such target", "target", f.Subject)
		return
	}
	q := url.Values{"service": {f.Subject}, "mode": {"reset"}}
	switch {
	case f.Kind == TargetDown:
		q.Set("mode", string(fixture.Mode503))
		q.Set("for", f.For.String())
	case f.Count > 0:
		q.Set("count", strconv.Itoa(f.Count))
	default:
		q.Set("for", f.For.String())
	}
	before, err := l.targetStatus(r, f.Subject)
	if err == nil {
		begin = msNow()
		err = l.postFault(r, q)
	}
	if err != nil {
		l.log.Error("fault: control endpoint", "target", f.Subject, "err", err)
		return
	}
	st, err := l.watchFault(ctx, r, f.Subject)
	if err != nil {
		l.log.Error("fault: control endpoint", "target", f.Subject, "err", err)
		return
	}
	failed := st.Resets - before.Resets + st.Responses["503"] - before.Responses["503"]
	fields = []record.Field{{Key: "failed", Value: strconv.FormatInt(failed, 10)}}
	end = msNow()
	if st.Fault != "" {
		if f.Count > 0 {
			fields = append(fields, record.Field{Key: "left", Value: strconv.FormatInt(st.FaultLeft, 10)})
		}
	} else if t, err := time.Parse(time.RFC3339Nano, st.FaultEnded); err == nil && !t.Before(begin) {
		end = t.Truncate(time.Millisecond)
	}
	return begin, end, fields, true
}

// watchFault looks at the target until its fault is over, or the run is
// (then once more), and returns the last look.
func (l *local) watchFault(ctx context.Context, r *replica, service string) (fixture.ServiceStatus, error) {
	tick := time.NewTicker(faultPoll)
	defer tick.Stop()
	for {
		st, err := l.targetStatus(r, service)
		if err != nil || st.Fault == "" || ctx.Err() != nil {
			return st, err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// targetStatus asks a replica's control endpoint for one service's status.
func (l *local) targetStatus(r *replica, service string) (fixture.ServiceStatus, error) {
	resp, err := l.control().Get("http://" + r.control + "/status")
	if err != nil {
		return fixture.ServiceStatus{}, err
	}
	defer resp.Body.Close()
	var st fixture.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return fixture.ServiceStatus{}, fmt.Errorf("status of %s: %w", r.control, err)
	}
	for _, ss := range st.Services {
		if ss.Name == service {
			return ss, nil
		}
	}
	return fixture.ServiceStatus{}, fmt.Errorf("status of %s: no service %s", r.control, service)
}

// postFault sets a fault on a replica.
func (l *local) postFault(r *replica, q url.Values) error {
	resp, err := l.control().Post("http://"+r.control+"/fault?"+q.Encode(), "text/plain", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("fault %s: %s: %s", q.Encode(), resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// roll replaces a target's replica the way a rolling update does: the new
// replica starts and becomes an endpoint; then the old one is told to stop.
// A graceful replica has a pre-stop wait: it leaves the endpoints first and
// gets SIGTERM once they have propagated, then drains. A naive replica
// (--no-drain) gets SIGTERM at once while the endpoints still route to it
// for the propagation lag. With --roll-idle the replica rolled is the
// target's spare, which no endpoint list holds. The roll is over, and its
// line written, when the old replica has exited and left the endpoints.
func (l *local) roll(ctx context.Context, name string) {
	begin := msNow()
	svc := l.services[name]
	pool := l.replicas
	if l.o.RollIdle {
		pool, svc = l.spares, nil
	}
	l.mu.Lock()
	old := pool[name]
	l.mu.Unlock()
	nw, err := l.startReplica(ctx, name)
	if err != nil {
		l.rolls.write(failedRollRecord(name, begin, msNow(), err).String())
		l.log.Error("roll failed", "target", name, "err", err)
		return
	}
	if svc != nil {
		svc.Add(nw.addr)
	}
	l.mu.Lock()
	pool[name] = nw
	l.mu.Unlock()
	sleep := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	leave := func() {
		if svc != nil {
			svc.Remove(old.addr)
		}
	}
	var term time.Time
	if l.o.NoDrain {
		term = msNow()
		old.proc.signal(syscall.SIGTERM)
		sleep(l.o.Lag)
		leave()
	} else {
		leave()
		sleep(l.o.Lag)
		term = msNow()
		old.proc.signal(syscall.SIGTERM)
	}
	held := l.drained(name, old)
	l.rolls.write(rollRecord(name, begin, term, msNow(), held).String())
}

// drained waits for a replica told to stop to exit and reads its DRAINED
// line: what it held when SIGTERM landed. nil when it did not say.
func (l *local) drained(name string, r *replica) *record.Held {
	t := time.NewTimer(l.exitWait())
	defer t.Stop()
	select {
	case <-r.proc.done:
	case <-t.C:
		l.log.Warn("roll: the old replica did not exit; what it held is unknown", "target", name, "within", l.exitWait())
		return nil
	}
	f, err := os.Open(r.log)
	if err != nil {
		l.log.Warn("roll: what the old replica held is unknown", "target", name, "err", err)
		return nil
	}
	defer f.Close()
	d, err := fixture.ReadDrained(f)
	if err != nil {
		l.log.Warn("roll: what the old replica held is unknown", "target", name, "log", r.log, "err", err)
		return nil
	}
	return &record.Held{Conns: d.ConnsAtTerm, Inflight: d.InflightAtTerm, AnsweredAfterTerm: d.AnsweredAfterTerm}
}
