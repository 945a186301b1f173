package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/pacer"
	"github.com/sortie-soak/sortie/record"
)

// An engine that comes back rejoins. When a backend's stream breaks after
// its engine said Started under a node name, the node is not given up at
// once: an engine pod that restarts (OOM, a node reboot, a DaemonSet
// update) comes back under the same --backend-name at a new address. The
// driver looks for it every RejoinInterval until the execution's last
// request is due: a dns pool is looked up again, a services address is
// dialled again, and an engine there whose Info gives the lost engine's
// node name takes up the rest of the schedule (ExecuteRequest.start_offset)
// on the stage's own start time, so every request keeps its due time and
// the node's totals stay exact. The requests due between what the lost
// engine had counted and where the new one takes up are the gap: counted
// in the node's result as gap_unsent, never sent, never hidden.

// rejoinable says the loss of c's stream (or of the stream of the engine
// that came back last) at now may be waited out: the engine had started
// the execution under a node name, the call is not being cancelled, the
// schedule's last request is still ahead, and the node has not come back
// MaxRejoins times already in this execution.
func (r *runner) rejoinable(c *call, now time.Time) bool {
	if !c.started || c.backendName == "" || c.cancelSent || r.interrupted {
		return false
	}
	p, err := pacerOf(c.ex.requests[c.backend])
	if err != nil || !now.Before(c.startAt.Add(p.Last())) {
		return false
	}
	if len(c.segs) >= r.opts.MaxRejoins {
		r.lines.printf("lost %s on %s (%s) at +%s: its engine came back %d times already, the most one execution waits for (MaxRejoins)",
			c.ex.label, c.backend, c.backendName, offsetText(now.Sub(c.startAt)), len(c.segs))
		return false
	}
	return true
}

// waitRejoin keeps c pending after the stream of its engine (or of the
// engine that came back last) broke with err, and looks for its node's
// engine at once.
func (r *runner) waitRejoin(c *call, err error, now time.Time, events chan<- event, out *stageOutcome) {
	p, _ := pacerOf(c.ex.requests[c.backend])
	c.seg = nil
	c.lostErr, c.rejoinEnd = err, c.startAt.Add(p.Last())
	r.lines.printf("lost %s on %s (%s) at +%s: %v; waiting for an engine of %s to come back",
		c.ex.label, c.backend, c.backendName, offsetText(now.Sub(c.startAt)), err, c.backendName)
	r.probe(c, events, out)
}

// fireRejoin does what is due at now for a call that waits for its node:
// the next look, or, past the schedule's last request (or, with a look
// out, past the call's answer window: the backstop), the end of the wait.
func (r *runner) fireRejoin(c *call, now time.Time, events chan<- event, out *stageOutcome) {
	switch {
	case c.probing && !now.Before(c.cancelAt), !c.probing && !now.Before(c.rejoinEnd):
		r.giveUp(c, now, nil)
	case !c.probing && !now.Before(c.rejoinAt):
		r.probe(c, events, out)
	}
}

// missed takes the answer of a look that found no engine to take up c's
// schedule: the next look is an interval later, unless nothing is left
// to take up, or the look was final (the node's engine never left).
func (r *runner) missed(c *call, ev event, now time.Time) {
	c.probing = false
	if c.state != pending {
		return
	}
	if ev.final || !now.Before(c.rejoinEnd) {
		r.giveUp(c, now, ev.err)
		return
	}
	c.rejoinAt = now.Add(r.opts.RejoinInterval)
	if c.rejoinAt.After(c.rejoinEnd) {
		c.rejoinAt = c.rejoinEnd
	}
}

// giveUp ends the wait for c's node: the call is lost with why its stream
// broke (and why, when a look said more), or, when the engine that ran
// its schedule last had cancelled the execution itself, answered with
// that Result, as before.
func (r *runner) giveUp(c *call, now time.Time, why error) {
	c.state, c.err, c.endedAt = lost, c.lostErr, now
	if why != nil {
		c.err = fmt.Errorf("%w (%v)", c.lostErr, why)
	}
	last := c
	if n := len(c.segs); n > 0 {
		last = c.segs[n-1]
	}
	if last.first != nil {
		c.state, c.result, c.err = answered, last.first, nil
		last.result = last.first
	}
	c.stop()
}

// probe sends one look for c's node out on its own goroutine: it answers
// with evMissed, or with the events of the execution the engine that came
// back runs (rejoined: its Started first).
func (r *runner) probe(c *call, events chan<- event, out *stageOutcome) {
	c.probing = true
	// The engine lost last, and the place of the next segment: read here,
	// on the coordinator, which alone changes them.
	prev, n := c, len(c.segs)+1
	if n > 1 {
		prev = c.segs[n-2]
	}
	// Its stream has ended: what it wrote to the live record is all it
	// will write.
	lines, samples := prev.tl.written()
	lines, samples = lines+prev.bucketsBefore, samples+prev.samplesBefore
	out.rejoins.Add(1)
	go func() {
		defer out.rejoins.Done()
		seg, stream, final, err := r.tryRejoin(c, prev, n, lines, samples)
		if seg == nil {
			events <- event{c: c, kind: evMissed, err: err, final: final}
			return
		}
		r.follow(seg, stream, events)
	}()
}

// tryRejoin dials every address where c's node may be now and starts the
// rest of the schedule, as c's n-th segment, on the first engine that
// gives c's node name and does not hold the execution of prev, the engine
// lost last. lines and samples count the live record's lines of the
// engines before it. An engine that holds it never left (only its stream broke):
// final says so, and the call is lost as before; it is never given the
// schedule twice. The segment is in the run manifest before its engine
// hears of it, with what prev counted and the gap. A fresh connection is
// made for each look: the one to the lost engine may be waiting out
// gRPC's reconnect backoff.
func (r *runner) tryRejoin(c, prev *call, n int, lines, samples uint32) (*call, grpc.ServerStreamingClient[enginev1.ExecuteEvent], bool, error) {
	for _, addr := range r.rejoinCandidates(c) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(r.opts.engineCreds()))
		if err != nil {
			continue
		}
		client := enginev1.NewEngineClient(cc)
		if err := r.sameNode(c, prev.id, client); err != nil {
			cc.Close()
			if errors.Is(err, errNotNode) || errors.Is(err, errHolds) {
				continue
			}
			return nil, nil, true, err
		}
		offset := rejoinOffset(c.startAt, r.opts.now(), r.opts.StartLead, widthOf(c, prev))
		seg := &call{ex: c.ex, backend: c.backend, addr: addr, id: fmt.Sprintf("%s~rejoin%d", c.id, n), client: client,
			ctx: c.ctx, parent: c, offset: offset, startAt: c.startAt}
		seg.tl.quietBefore = offset
		seg.before, seg.gap = segmentGap(c, prev, offset)
		seg.gap.Backend = addr
		seg.bucketsBefore, seg.samplesBefore = lines, samples
		rj := record.ManifestRejoin{Addr: addr, ExecutionID: seg.id, OffsetMs: offset.Milliseconds(), Before: seg.before, Gap: seg.gap,
			LiveBucketsBefore: lines, LiveSamplesBefore: samples}
		if err := r.manifest.rejoined(c.id, rj); err != nil {
			r.log.Error("run manifest not written: a driver that dies now cannot follow the engine that came back", "execution", seg.id, "err", err)
		}
		req := proto.Clone(c.ex.requests[c.backend]).(*enginev1.ExecuteRequest)
		req.ExecutionId, req.RunId = seg.id, r.runID
		req.StartTime = timestamppb.New(c.startAt)
		req.StartOffset = durationpb.New(offset)
		if r.progressInterval > 0 {
			req.ProgressInterval = durationpb.New(r.progressInterval)
		}
		stream, err := client.Execute(c.ctx, req)
		if err != nil {
			cc.Close()
			if err := r.manifest.unrejoin(c.id, seg.id); err != nil {
				r.log.Error("run manifest", "err", err)
			}
			continue
		}
		r.keepConn(addr+"#"+seg.id, cc)
		return seg, stream, false, nil
	}
	return nil, nil, false, nil
}

// widthOf is the bucket width of c's timeline, as the first of its
// engines that said Started gave it; 0 when none did.
func widthOf(c, prev *call) time.Duration {
	if w := prev.tl.width(); w > 0 {
		return w
	}
	return c.tl.width()
}

// errNotNode says an address holds no engine of the node looked for (none
// answers, one of another node answers, or one going away answers Info
// and then no more); errHolds that the engine there still
// holds the execution: it never left (only its stream broke), or it is
// the one that stopped and is going away. Either way the look goes on:
// the node's engine may yet come back elsewhere.
var (
	errNotNode = errors.New("not the node's engine")
	errHolds   = errors.New("the engine of the node still holds the execution")
)

// sameNode says whether the engine of client is one of c's node that
// came back: its Info gives c's node name (else errNotNode), and it does
// not hold the execution id lost last (Attach: NOT_FOUND). Any other
// answer to Attach is an error: the engine never left, or cannot say.
func (r *runner) sameNode(c *call, id string, client enginev1.EngineClient) error {
	ctx, cancel := context.WithTimeout(c.ctx, r.opts.InfoTimeout)
	defer cancel()
	info, err := client.Info(ctx, &enginev1.InfoRequest{})
	if err != nil || info.GetBackendName() != c.backendName {
		return errNotNode
	}
	stream, err := client.Attach(ctx, &enginev1.AttachRequest{ExecutionId: id, RunId: r.runID})
	if err == nil {
		_, err = stream.Recv()
	}
	switch status.Code(err) {
	case codes.NotFound:
		return nil
	case codes.OK:
		return errHolds
	case codes.Unavailable, codes.DeadlineExceeded:
		// An engine going away answers Info and then refuses new calls
		// while it drains (a pod being deleted does so for its whole
		// grace): nothing is known of the execution, so nothing is
		// dispatched, and the next look asks again.
		return errNotNode
	}
	return fmt.Errorf("the engine of the node did not say whether it holds the execution: %w", err)
}

// keepConn hands a connection to the runner, which closes it with the
// others at the end of the run.
func (r *runner) keepConn(key string, cc *grpc.ClientConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		r.conns = map[string]*grpc.ClientConn{}
	}
	r.conns[key] = cc
}

// rejoinCandidates are the addresses where c's node may be now: a dns
// pool's answer as it is now, or the services address as it was given.
func (r *runner) rejoinCandidates(c *call) []string {
	if c.dns == "" {
		return []string{c.backend}
	}
	host, port, err := net.SplitHostPort(c.dns)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, r.opts.InfoTimeout)
	defer cancel()
	addrs, err := lookup(ctx, r.opts.resolver(), host, port)
	if err != nil {
		r.log.Info("rejoin: dns lookup", "pool", c.dns, "err", err)
	}
	return addrs
}

// takeSegment applies an event of the execution an engine that came back
// runs for p. A segment that is lost too, or whose engine is stopped with
// the schedule ahead, is waited out as p's own engine was: any number of
// times, up to MaxRejoins.
func (r *runner) takeSegment(p *call, ev event, now time.Time, events chan<- event, out *stageOutcome) {
	if p.state != pending {
		if ev.kind == evStarted {
			// Given up on meanwhile: what the engine started is
			// cancelled, not left running.
			r.sendCancel(ev.c)
		}
		return
	}
	r.taken++
	seg := ev.c
	p.probing = false
	if !seg.joined {
		seg.joined = true
		p.segs = append(p.segs, seg)
	}
	switch ev.kind {
	case evStarted:
		seg.started, seg.backendName = true, ev.name
		if p.backendName == "" {
			p.backendName = ev.name
		}
		p.seg = seg
		if !seg.resumed {
			r.lines.printf("rejoined %s on %s (%s): the engine at %s takes up the schedule at +%s",
				p.ex.label, p.backend, p.backendName, seg.addr, offsetText(seg.offset))
		}
		if p.cancelSent {
			r.sendCancel(p)
		}
	case evResult:
		if ev.result.GetCancelled() && p.cancelWhy == notCancelled && r.rejoinable(p, now) {
			// Stopped too, with the schedule ahead: the node may come
			// back again.
			seg.first = ev.result
			r.waitRejoin(p, fmt.Errorf("the engine at %s cancelled the execution before its planned end (it was stopped)", seg.addr), now, events, out)
			return
		}
		p.seg, seg.result = seg, ev.result
		p.state, p.result, p.endedAt = answered, ev.result, now
	case evError:
		if seg.started && r.rejoinable(p, now) {
			r.waitRejoin(p, fmt.Errorf("the engine at %s that came back: %w", seg.addr, ev.err), now, events, out)
			return
		}
		p.state, p.endedAt = lost, now
		if seg.started {
			p.err = fmt.Errorf("%w; the engine of %s that came back was lost too: %v", p.lostErr, p.backendName, ev.err)
		} else {
			p.err = fmt.Errorf("%w; an engine of %s came back at %s but did not take the rest of the schedule: %v", p.lostErr, p.backendName, seg.addr, ev.err)
		}
	}
}

// rejoinOffset is where an engine that came back at now takes up a
// schedule that began at start: the start lead after now (for the
// request to reach it), rounded up to a whole bucket of the timeline, so
// that the gap begins and ends on bucket edges.
func rejoinOffset(start, now time.Time, lead, width time.Duration) time.Duration {
	off := now.Add(lead).Sub(start)
	if off < 0 {
		off = 0
	}
	if width <= 0 {
		return off
	}
	return (off + width - 1) / width * width
}

// nodeGap is the gap of a node whose lost engine had counted the requests
// due before until, and whose engine that came back took up the schedule
// at offset: its times and the requests of req due between the two.
func nodeGap(req *enginev1.ExecuteRequest, start time.Time, until, offset time.Duration) record.Gap {
	return record.Gap{
		From:  start.Add(until).UTC().Format(record.TimeFormat),
		To:    start.Add(offset).UTC().Format(record.TimeFormat),
		Count: plannedBefore(req, offset) - plannedBefore(req, until),
		Why:   record.GapRestarted,
	}
}

// counted is what the engine of seg (c itself, or one of its segments)
// counted of its own part of c's schedule, from seg's offset on, and
// where that part ends. An engine that cancelled the execution itself
// counted everything due before it stopped (its Result less its unsent),
// and its part ends at its first unsent request; one that was lost
// counted its prefix of buckets; one that sent nothing, nothing, from its
// offset.
func counted(c, seg *call) (record.Counted, time.Duration) {
	req := c.ex.requests[c.backend]
	base := plannedBefore(req, seg.offset)
	if res := seg.first; res != nil {
		br := backendResult(&call{ex: c.ex, backend: c.backend, result: res})
		k := record.Counted{Planned: res.GetPlanned() - min(res.GetUnsent(), res.GetPlanned()), Counters: br.Counters}
		p, _ := pacerOf(req)
		w := uint64(max(req.GetWorkers(), 1))
		return k, p.Offset((base + k.Planned) / w)
	}
	if br, ok := seg.tl.partial(seg); ok && seg.tl.until() >= seg.offset {
		return record.Counted{Planned: br.Planned - min(base, br.Planned), Unsent: br.Unsent, Counters: br.Counters}, seg.tl.until()
	}
	return record.Counted{Counters: map[string]uint64{}}, seg.offset
}

// segmentGap is what prev, the engine lost last, counted, and the gap
// from the end of that to offset, where the engine that came back takes
// up c's schedule. Its count is exact whatever index each worker stopped
// at: what was due before the offset, less what every engine before had
// counted.
func segmentGap(c, prev *call, offset time.Duration) (record.Counted, record.Gap) {
	req := c.ex.requests[c.backend]
	k, end := counted(c, prev)
	g := nodeGap(req, c.startAt, min(end, offset), offset)
	due, had := plannedBefore(req, offset), plannedBefore(req, prev.offset)+k.Planned
	g.Count = due - min(had, due)
	return k, g
}

// rejoinedResult is the one result of a node whose engine came back, any
// number of times: what each engine counted of its part, the gap after
// it, and what the engine that came back last counted (its Result, or,
// lost too, its prefix of buckets). ok is false when no engine came back.
func (r *runner) rejoinedResult(c *call) (record.BackendResult, bool) {
	if len(c.segs) == 0 {
		return record.BackendResult{}, false
	}
	m := record.BackendResult{
		Backend: c.backend, BackendName: c.backendName,
		StartedAt: c.startAt.UTC().Format(record.TimeFormat),
		Counters:  map[string]uint64{},
	}
	add := func(k record.Counted) {
		m.Planned += k.Planned
		m.Unsent += k.Unsent
		for name, v := range k.Counters {
			m.Counters[name] += v
		}
	}
	for _, seg := range c.segs {
		add(seg.before)
		m.Planned += seg.gap.Count
		m.GapUnsent = append(m.GapUnsent, seg.gap)
	}
	last := c.segs[len(c.segs)-1]
	if c.state == answered && last.result != nil {
		own := backendResult(last)
		m.ElapsedMs, m.Statistics, m.Cancelled = own.ElapsedMs, own.Statistics, own.Cancelled
		add(record.Counted{Planned: own.Planned, Unsent: own.Unsent, Counters: own.Counters})
		return m, true
	}
	// Lost again: the buckets it sent count, after its offset.
	k, end := counted(c, last)
	add(k)
	m.Partial, m.CountedUntil = true, c.startAt.Add(end).UTC().Format(record.TimeFormat)
	m.ElapsedMs = end.Milliseconds()
	return m, true
}

// pacerOf is the schedule of one worker of req.
func pacerOf(req *enginev1.ExecuteRequest) (pacer.Pacer, error) {
	return pacer.New(req.GetRate(), req.GetDuration().AsDuration(), req.GetRamp().AsDuration())
}

// offsetText is an offset from the start as the gate prints it: seconds
// with one decimal.
func offsetText(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}
