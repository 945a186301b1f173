package engine

import (
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// counterID indexes a worker's counters. Outcome classes come first.
type counterID int

const (
	cHTTP1xx counterID = iota
	cHTTP2xx
	cHTTP3xx
	cHTTP4xx
	cHTTP5xx
	cResets
	cConnFailure
	cConnTimeout
	cOverflow
	cInflightLost
	cRequestTimeout
	cLateDropped
	cConnLocal
	cConnRemote
	cResetsBeforeHeaders
	cResetsIncompleteBody
	cResetConnTermination
	cResetRemote
	cResetProtocol
	cResetLocal
	cResetOverflow
	cLateSends
	cConnProtocol
	// TCP, UDP and WebSocket modes: outcome classes first, then details
	// (see record.Outcomes, record.TCPDetails, record.UDPDetails,
	// record.StreamDetails).
	cTCPSent
	cTCPDeferred
	cTCPUnavailable
	cUDPReceived
	cUDPLost
	cUDPSendErrors
	cUDPDeferred
	cUDPUnavailable
	cWSSent
	cWSDeferred
	cWSUnavailable
	cTCPReceived
	cTCPMismatch
	cTCPLost
	cTCPDrainIncomplete
	cTCPOpened
	cTCPConnectFailures
	cTCPClosed
	cUDPSent
	cUDPUnexpected
	cWSReceived
	cWSUnexpected
	cWSLost
	cWSDrainIncomplete
	cWSOpened
	cWSOpenFailures
	cWSUpgradeRejected
	cWSEarlyClose
	cWSProtocolErrors
	// gRPC mode: grpc_status.0..16 and .missing (indexed by
	// grpcStatusID), and grpc_error; see record.GRPCStatusPrefix.
	cGRPCStatus0
	cGRPCStatusMissing = cGRPCStatus0 + record.GRPCMaxStatus + 1
	cGRPCError         = cGRPCStatusMissing + 1
	numCounters        = cGRPCError + 1
)

// counterNames are the compatibility names of the counters.
var counterNames = [numCounters]string{
	cHTTP1xx:              record.HTTP1xx,
	cHTTP2xx:              record.HTTP2xx,
	cHTTP3xx:              record.HTTP3xx,
	cHTTP4xx:              record.HTTP4xx,
	cHTTP5xx:              record.HTTP5xx,
	cResets:               record.StreamResets,
	cConnFailure:          record.PoolConnectionFailure,
	cConnTimeout:          record.PoolFailureTimeout,
	cOverflow:             record.PoolOverflow,
	cInflightLost:         record.InflightLost,
	cRequestTimeout:       record.RequestTimeout,
	cLateDropped:          record.LateDropped,
	cConnLocal:            record.PoolFailureLocal,
	cConnRemote:           record.PoolFailureRemote,
	cResetsBeforeHeaders:  record.ResetsBeforeHeaders,
	cResetsIncompleteBody: record.ResetsIncompleteBody,
	cResetConnTermination: record.StreamResetsPrefix + record.ReasonConnectionTermination,
	cResetRemote:          record.StreamResetsPrefix + record.ReasonRemoteReset,
	cResetProtocol:        record.StreamResetsPrefix + record.ReasonProtocolError,
	cResetLocal:           record.StreamResetsPrefix + record.ReasonLocalReset,
	cResetOverflow:        record.StreamResetsPrefix + record.ReasonOverflow,
	cLateSends:            record.LateSends,
	cConnProtocol:         record.ConnectionProtocolError,
	cTCPSent:              record.TCPMessagesSent,
	cTCPDeferred:          record.TCPDeferred,
	cTCPUnavailable:       record.TCPUnavailable,
	cUDPReceived:          record.UDPDatagramsReceived,
	cUDPLost:              record.UDPLost,
	cUDPSendErrors:        record.UDPSendErrors,
	cUDPDeferred:          record.UDPDeferred,
	cUDPUnavailable:       record.UDPUnavailable,
	cTCPReceived:          record.TCPMessagesReceived,
	cTCPMismatch:          record.TCPEchoMismatch,
	cTCPLost:              record.TCPInflightLost,
	cTCPDrainIncomplete:   record.TCPDrainIncomplete,
	cTCPOpened:            record.TCPConnectionsOpened,
	cTCPConnectFailures:   record.TCPConnectFailures,
	cTCPClosed:            record.TCPConnectionClosed,
	cUDPSent:              record.UDPDatagramsSent,
	cUDPUnexpected:        record.UDPUnexpected,
	cWSSent:               record.StreamMessagesSent,
	cWSDeferred:           record.StreamDeferred,
	cWSUnavailable:        record.StreamUnavailable,
	cWSReceived:           record.StreamMessagesReceived,
	cWSUnexpected:         record.StreamUnexpectedMessage,
	cWSLost:               record.StreamInflightLost,
	cWSDrainIncomplete:    record.StreamDrainIncomplete,
	cWSOpened:             record.StreamsOpened,
	cWSOpenFailures:       record.StreamOpenFailures,
	cWSUpgradeRejected:    record.StreamUpgradeRejected,
	cWSEarlyClose:         record.StreamEarlyClose,
	cWSProtocolErrors:     record.StreamProtocolErrors,
	cGRPCStatusMissing:    record.GRPCStatusMissing,
	cGRPCError:            record.GRPCError,
}

func init() {
	for code := 0; code <= record.GRPCMaxStatus; code++ {
		counterNames[cGRPCStatus0+counterID(code)] = record.GRPCStatusPrefix + strconv.Itoa(code)
	}
}

// grpcStatusID is the counter of grpc-status code, -1 meaning none.
func grpcStatusID(code int) counterID {
	if code < 0 || code > record.GRPCMaxStatus {
		return cGRPCStatusMissing
	}
	return cGRPCStatus0 + counterID(code)
}

// counterSet is a snapshot of counters.
type counterSet [numCounters]uint64

// add adds o to c.
func (c *counterSet) add(o *counterSet) {
	for i := range c {
		c[i] += o[i]
	}
}

// toMap returns the nonzero counters by name.
func (c *counterSet) toMap() map[string]uint64 {
	m := make(map[string]uint64, 8)
	for i, v := range c {
		if v != 0 {
			m[counterNames[i]] = v
		}
	}
	return m
}

// outcomes sums the outcome classes, of every mode: each counts none of
// the others'. A gRPC execution's (any grpc_status counted) is read by its
// own law (record.OutcomeSum).
func (c *counterSet) outcomes() uint64 {
	var n uint64
	if grpc := c[cGRPCStatus0 : cGRPCStatusMissing+1]; slices.ContainsFunc(grpc, func(v uint64) bool { return v > 0 }) {
		for _, v := range grpc {
			n += v
		}
		return n + c[cConnFailure] + c[cConnTimeout] + c[cOverflow] + c[cInflightLost] + c[cLateDropped]
	}
	for i := cHTTP1xx; i <= cLateDropped; i++ {
		n += c[i]
	}
	for i := cTCPSent; i <= cWSUnavailable; i++ {
		n += c[i]
	}
	return n
}

// Histogram geometry, in nanoseconds up to an hour (a longer value is
// recorded as an hour). Latency by status class, what thresholds judge,
// keeps three significant digits (0.1 %) above a resolution of 512 ns; the
// other statistics keep two (1 %) from 1 ns. An hdrhistogram's counts array
// is allocated and zeroed whole (about 200 KB for the first, 40 KB for the
// second), which is most of an execution's memory: the soak shape of eight
// executions must fit in 20 MiB.
const histMax = int64(3600e9)

func newLatencyHist() *hdrhistogram.Histogram { return hdrhistogram.New(1000, histMax, 3) }

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, 2) }

func recordValue(h *hdrhistogram.Histogram, v int64) {
	if v < 0 {
		v = 0
	} else if v > histMax {
		v = histMax
	}
	_ = h.RecordValue(v)
}

// Latency statistics of a worker, indexed by status class 1xx..5xx.
const numClasses = 5

// workerStats are the counters and histograms of one worker. Counters are
// atomic so Progress and statsd read them while the worker runs;
// histograms are guarded by mu and only merged at the end (and copied
// nowhere in between).
type workerStats struct {
	counts [numCounters]atomic.Uint64
	// Running summary of latency_2xx for Progress.
	lat2xxSum atomic.Int64
	lat2xxMax atomic.Int64
	// Offset of the last outcome from the start, ns; math.MinInt64 when
	// none.
	last atomic.Int64

	mu       sync.Mutex
	latency  [numClasses]*hdrhistogram.Histogram // lazily, but 2xx always
	r2r, q2c *hdrhistogram.Histogram
	// window samples latency_2xx for statsd; nil without statsd.
	window *sampleWindow

	// tl: the worker's open buckets of the execution's timeline.
	tl workerTimeline

	// lateness is written by the pacer goroutine only and read after it
	// ended.
	lateness *hdrhistogram.Histogram
	// message is the latency of a TCP or UDP message, from its due time
	// to its echo; of a gRPC call with grpc-status 0 (latency_grpc_ok) in
	// gRPC mode; nil in HTTP mode.
	message *hdrhistogram.Histogram
}

func newWorkerStats(statsd bool, tl *timeline) *workerStats {
	s := &workerStats{r2r: newHist(), q2c: newHist(), lateness: newHist(), tl: newWorkerTimeline(tl)}
	s.latency[1] = newLatencyHist()
	s.last.Store(math.MinInt64)
	if statsd {
		s.window = newSampleWindow(statsdSamples)
	}
	return s
}

func (s *workerStats) inc(c counterID) { s.counts[c].Add(1) }

// outcomeAt notes that an outcome was counted at offset now.
func (s *workerStats) outcomeAt(now int64) {
	for {
		old := s.last.Load()
		if now <= old || s.last.CompareAndSwap(old, now) {
			return
		}
	}
}

// response counts the answer with status code to the request due at due,
// which ended at end, its connection in hand since inHand: in the
// counters, the histograms and its bucket; a 4xx or 5xx also as a failure
// sample, described by c.
func (s *workerStats) response(code int, due, end, inHand int64, c *conn) {
	class := code/100 - 1 // 0..4, checked by the parser
	id := cHTTP1xx + counterID(class)
	latency := end - due
	s.inc(id)
	s.outcomeAt(end)
	if class == 1 {
		s.lat2xxSum.Add(latency)
		for {
			old := s.lat2xxMax.Load()
			if latency <= old || s.lat2xxMax.CompareAndSwap(old, latency) {
				break
			}
		}
	}
	s.mu.Lock()
	h := s.latency[class]
	if h == nil {
		h = newLatencyHist()
		s.latency[class] = h
	}
	recordValue(h, latency)
	recordValue(s.r2r, end-inHand)
	recordValue(s.q2c, inHand-due)
	if class == 1 && s.window != nil {
		s.window.add(latency)
	}
	b := s.tl.answer(due, id, latency)
	if id == cHTTP4xx || id == cHTTP5xx {
		f := failSample{due: due, at: end, status: uint16(code), class: uint8(id), reason: noDetail, phase: noDetail}
		c.describe(&f)
		s.sampleLocked(b, f)
	}
	s.tl.done(b)
	s.mu.Unlock()
}

// grpcAnswer counts the answer with HTTP status code and grpc-status
// status (-1: none) to the gRPC call due at due: its grpc_status counter,
// grpc_error unless 0, latency_grpc_ok when 0. A call answered 2xx counts
// in http_2xx only when its status is 0; a failed one with 2xx is in no
// HTTP class (its grpc_status is its outcome class). The bucket is open
// until response or the done below.
func (s *workerStats) grpcAnswer(code, status int, due, end, inHand int64, c *conn) {
	id := grpcStatusID(status)
	if id != cGRPCStatus0 {
		// Sampled unless the answer's 4xx or 5xx leaves the call's sample:
		// one sample a call, so a window's failures count calls.
		s.grpcFailed(id, due, end, c, code/100 != 4 && code/100 != 5)
	} else {
		s.detail(due, id, 1)
		s.mu.Lock()
		if s.message == nil {
			s.message = newLatencyHist()
		}
		recordValue(s.message, end-due)
		s.mu.Unlock()
	}
	if code/100 != 2 || id == cGRPCStatus0 {
		s.response(code, due, end, inHand, c)
		return
	}
	s.outcomeAt(end)
	s.mu.Lock()
	recordValue(s.r2r, end-inHand)
	recordValue(s.q2c, inHand-due)
	s.tl.done(s.tl.get(bucketOf(due, s.tl.width)))
	s.mu.Unlock()
}

// grpcFailed counts the failed grpc-status id (1..16 or missing) of the
// gRPC call due at due, ended at end on c: id and grpc_error, in the
// counters and the call's bucket, which is still open (the call's outcome
// is ended by the caller). With sample, the call is in no other failure
// class (answered 2xx, say: the fixture's trailers-only UNAVAILABLE), and
// it leaves a failure sample of class id, reason grpc_error, while the
// budget lasts, so it is placed in time like an HTTP failure; without,
// the call's reset, timeout or 5xx sample places it, and a second sample
// would count the call twice in a window's failures.
func (s *workerStats) grpcFailed(id counterID, due, end int64, c *conn, sample bool) {
	if !sample {
		s.detail(due, id, 1)
		s.detail(due, cGRPCError, 1)
		return
	}
	f := failSample{due: due, at: end, class: uint8(id), reason: uint8(cGRPCError), phase: noDetail}
	c.describe(&f)
	s.inc(id)
	s.inc(cGRPCError)
	s.mu.Lock()
	s.sampleLocked(s.tl.fail(&f), f)
	s.mu.Unlock()
}

// fail counts failure f (a class of the zero-failure set, with its reason
// and phase) in the counters and its bucket, and keeps its sample while
// the execution's budget lasts. The counters come first: a sample is
// never streamed before its failure is counted.
func (s *workerStats) fail(f failSample) {
	s.inc(counterID(f.class))
	if f.reason != noDetail {
		s.inc(counterID(f.reason))
	}
	if f.phase != noDetail {
		s.inc(counterID(f.phase))
	}
	s.outcomeAt(f.at)
	s.mu.Lock()
	b := s.tl.fail(&f)
	s.sampleLocked(b, f)
	s.tl.done(b)
	s.mu.Unlock()
}

// stray counts bytes a connection received while no request was in
// flight, in the counters and in the bucket of the request due at due,
// which is still pending (it is about to be sent, or its answer was just
// read and is not yet counted), so the bucket is open.
func (s *workerStats) stray(due int64) {
	s.inc(cConnProtocol)
	s.mu.Lock()
	s.tl.get(bucketOf(due, s.tl.width)).counts[cConnProtocol]++
	s.mu.Unlock()
}

// detail counts id, a counter of no outcome class, in the bucket of the
// message due at due, which is still pending (so its bucket is open).
func (s *workerStats) detail(due int64, id counterID, n uint32) {
	if n == 0 {
		return
	}
	s.counts[id].Add(uint64(n))
	s.mu.Lock()
	s.tl.get(bucketOf(due, s.tl.width)).counts[id] += n
	s.mu.Unlock()
}

// fate ends the message due at due, counted in the outcome class or
// detail counter id at now; latency is recorded when positive (an echo).
// Its bucket then has one message less pending.
// noCounter is the id of a fate that no counter records: a TCP message
// written without an echo expected, whose outcome tcp_messages_sent
// counted already.
const noCounter counterID = -1

func (s *workerStats) fate(due, now int64, id counterID, echoed bool) {
	if id != noCounter {
		s.inc(id)
	}
	s.outcomeAt(now)
	s.mu.Lock()
	if echoed {
		if s.message == nil {
			s.message = newLatencyHist()
		}
		recordValue(s.message, now-due)
	}
	b := s.tl.get(bucketOf(due, s.tl.width))
	if id != noCounter {
		b.counts[id]++
	}
	s.tl.done(b)
	s.mu.Unlock()
}

// sampleLocked keeps f's sample, or counts it dropped in b once the
// budget is spent. s.mu is held.
func (s *workerStats) sampleLocked(b *openBucket, f failSample) {
	if s.tl.x.admit() {
		s.tl.x.addSample(f)
	} else {
		b.dropped++
	}
}

// snapshot reads the counters.
func (s *workerStats) snapshot(out *counterSet) {
	for i := range s.counts {
		out[i] = s.counts[i].Load()
	}
}

// statistic summarises h as id.
func statistic(id string, h *hdrhistogram.Histogram) *enginev1.Statistic {
	st := &enginev1.Statistic{Id: id, Unit: "ns", Count: uint64(h.TotalCount())}
	if st.Count == 0 {
		return st
	}
	st.Mean = h.Mean()
	st.Pstdev = h.StdDev()
	st.Min = h.Min()
	st.Max = h.Max()
	st.P50 = h.ValueAtQuantile(50)
	st.P90 = h.ValueAtQuantile(90)
	st.P99 = h.ValueAtQuantile(99)
	st.P999 = h.ValueAtQuantile(99.9)
	return st
}

// sampleWindow keeps a uniform sample of the latencies seen since the last
// statsd flush (reservoir sampling), so a flush sends a bounded number of
// timer values at any rate.
type sampleWindow struct {
	samples []int64
	seen    uint64
	rng     uint64
}

func newSampleWindow(n int) *sampleWindow {
	return &sampleWindow{samples: make([]int64, 0, n), rng: 0x9e3779b97f4a7c15}
}

func (w *sampleWindow) add(v int64) {
	w.seen++
	if len(w.samples) < cap(w.samples) {
		w.samples = append(w.samples, v)
		return
	}
	// xorshift64: cheap and good enough to pick a slot.
	w.rng ^= w.rng << 13
	w.rng ^= w.rng >> 7
	w.rng ^= w.rng << 17
	if j := w.rng % w.seen; j < uint64(len(w.samples)) {
		w.samples[j] = v
	}
}

// take copies the sample into dst, returns it with the count seen, and
// starts a new window.
func (w *sampleWindow) take(dst []int64) ([]int64, uint64) {
	dst = append(dst[:0], w.samples...)
	seen := w.seen
	w.samples, w.seen = w.samples[:0], 0
	return dst, seen
}
