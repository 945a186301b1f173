package enginev1

import (
	"errors"
	"fmt"
)

// ErrCodedCounters is wrapped by every error of DecodeCounters: a
// Progress whose coded counters do not decode.
var ErrCodedCounters = errors.New("malformed coded counters")

// DecodeCounters fills p's counters map, and each of its buckets', from
// the coded counters an engine sends (counter_names, counter_ids and
// counter_values; see engine.proto) and clears the coded fields, so that
// what reads the Progress after it sees counters by name, whichever way
// the engine sent them. A Progress of an older engine (maps only) is left
// as it is. An id outside the name table, an empty name, ids and values
// of different lengths, or a counter given twice in one set (coded twice,
// or coded and in the map) is an error naming where; p is then left
// partly decoded and must not be used.
func (p *Progress) DecodeCounters() error {
	names := p.GetCounterNames()
	for i, n := range names {
		if n == "" {
			return fmt.Errorf("progress: counter_names[%d] is empty: %w", i, ErrCodedCounters)
		}
	}
	m, err := decodeCounters(names, p.GetCounterIds(), p.GetCounterValues(), p.GetCounters())
	if err != nil {
		return fmt.Errorf("progress counters: %w", err)
	}
	p.Counters = m
	for i, b := range p.GetBuckets() {
		m, err := decodeCounters(names, b.GetCounterIds(), b.GetCounterValues(), b.GetCounters())
		if err != nil {
			return fmt.Errorf("progress buckets[%d] (bucket %d): %w", i, b.GetIndex(), err)
		}
		b.Counters, b.CounterIds, b.CounterValues = m, nil, nil
	}
	p.CounterNames, p.CounterIds, p.CounterValues = nil, nil, nil
	return nil
}

// decodeCounters adds ids and values, against names, to into (made when
// nil and needed) and returns it.
func decodeCounters(names []string, ids []uint32, values []uint64, into map[string]uint64) (map[string]uint64, error) {
	if len(ids) != len(values) {
		return nil, fmt.Errorf("%d counter_ids and %d counter_values: %w", len(ids), len(values), ErrCodedCounters)
	}
	if len(ids) == 0 {
		return into, nil
	}
	if into == nil {
		into = make(map[string]uint64, len(ids))
	}
	for i, id := range ids {
		if uint64(id) >= uint64(len(names)) {
			return nil, fmt.Errorf("counter_ids[%d] is %d, the table has %d names: %w", i, id, len(names), ErrCodedCounters)
		}
		name := names[id]
		if _, dup := into[name]; dup {
			return nil, fmt.Errorf("counter %q given twice (counter_ids[%d]): %w", name, i, ErrCodedCounters)
		}
		into[name] = values[i]
	}
	return into, nil
}
