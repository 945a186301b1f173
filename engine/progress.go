package engine

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
)

// progressStream builds the Progress events of one stream (an Execute's
// or an Attach's) in one message it reuses: Progress goes out every
// second per execution for the live record, and a fresh message each
// time, with its counters in protobuf maps, cost more to build and to
// encode than the rest of the record path of the soak shape. gRPC encodes
// a message before Send returns, so the next event may overwrite it.
//
// Counters go coded (engine.proto: Progress.counter_names, counter_ids,
// counter_values, and a Bucket's ids and values): a name table of the
// message alone, so that no reader keeps state between events, and
// packed ids and values instead of map entries.
type progressStream struct {
	ev      enginev1.ExecuteEvent
	wrap    enginev1.ExecuteEvent_Progress
	p       enginev1.Progress
	elapsed durationpb.Duration
	// buckets are the Bucket messages made so far, reused: p.Buckets is a
	// prefix of them.
	buckets []*enginev1.Bucket
	// pos is 1 + the position of each counter in p.CounterNames, 0 while
	// the message does not use it.
	pos [numCounters]uint8
}

func newProgressStream() *progressStream {
	m := &progressStream{}
	m.wrap.Progress = &m.p
	m.ev.Event = &m.wrap
	return m
}

// reset empties the message for the next event, keeping its slices.
func (m *progressStream) reset() {
	p := &m.p
	names, ids, values, bs := p.CounterNames[:0], p.CounterIds[:0], p.CounterValues[:0], p.Buckets[:0]
	clear(p.FailureSamples) // samples are made fresh: let go of the last ones
	samples := p.FailureSamples[:0]
	p.Reset()
	p.CounterNames, p.CounterIds, p.CounterValues, p.Buckets, p.FailureSamples = names, ids, values, bs, samples
	clear(m.pos[:])
}

// code is c's position in the message's name table, added on first use.
func (m *progressStream) code(c counterID) uint32 {
	if m.pos[c] == 0 {
		m.p.CounterNames = append(m.p.CounterNames, counterNames[c])
		m.pos[c] = uint8(len(m.p.CounterNames))
	}
	return uint32(m.pos[c] - 1)
}

// bucket is the next Bucket message of the event, emptied but for its
// coded counters' storage, which the caller fills from length 0.
func (m *progressStream) bucket() *enginev1.Bucket {
	i := len(m.p.Buckets)
	if i == len(m.buckets) {
		m.buckets = append(m.buckets, new(enginev1.Bucket))
	}
	b := m.buckets[i]
	ids, values := b.CounterIds[:0], b.CounterValues[:0]
	b.Reset()
	b.CounterIds, b.CounterValues = ids, values
	m.p.Buckets = append(m.p.Buckets, b)
	return b
}

// setCounters codes the cumulative counters c, nonzero ones only.
func (m *progressStream) setCounters(c *counterSet) {
	for id, v := range c {
		if v != 0 {
			m.p.CounterIds = append(m.p.CounterIds, m.code(counterID(id)))
			m.p.CounterValues = append(m.p.CounterValues, v)
		}
	}
}

// setElapsed sets the Progress's elapsed time in the message's own
// Duration.
func (m *progressStream) setElapsed(d time.Duration) {
	m.elapsed.Seconds = int64(d / time.Second)
	m.elapsed.Nanos = int32(d % time.Second)
	m.p.Elapsed = &m.elapsed
}
