package enginev1

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

func coded() *Progress {
	return &Progress{
		CounterNames:  []string{"benchmark.http_2xx", "benchmark.late_sends", "benchmark.http_5xx"},
		CounterIds:    []uint32{0, 2, 1},
		CounterValues: []uint64{90, 3, 7},
		Buckets: []*Bucket{
			{Index: 4, CounterIds: []uint32{0}, CounterValues: []uint64{9}, LatencyCount: 9},
			{Index: 5, CounterIds: []uint32{2, 0}, CounterValues: []uint64{3, 6}, LatencyCount: 6},
			{Index: 6, Unsent: 9},
		},
	}
}

func TestDecodeCounters(t *testing.T) {
	p := coded()
	if err := p.DecodeCounters(); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"benchmark.http_2xx": 90, "benchmark.http_5xx": 3, "benchmark.late_sends": 7}
	if !maps.Equal(p.GetCounters(), want) {
		t.Errorf("counters %v, want %v", p.GetCounters(), want)
	}
	wantBuckets := []map[string]uint64{
		{"benchmark.http_2xx": 9},
		{"benchmark.http_5xx": 3, "benchmark.http_2xx": 6},
		nil,
	}
	for i, b := range p.GetBuckets() {
		if !maps.Equal(b.GetCounters(), wantBuckets[i]) {
			t.Errorf("bucket %d counters %v, want %v", b.GetIndex(), b.GetCounters(), wantBuckets[i])
		}
		if b.CounterIds != nil || b.CounterValues != nil {
			t.Errorf("bucket %d keeps its coded counters", b.GetIndex())
		}
	}
	if p.CounterNames != nil || p.CounterIds != nil || p.CounterValues != nil {
		t.Error("the coded counters are kept")
	}
	// Decoded twice: nothing changes.
	again := proto.Clone(p).(*Progress)
	if err := again.DecodeCounters(); err != nil || !proto.Equal(again, p) {
		t.Errorf("a second decode changed the Progress (%v)", err)
	}
}

// A Progress of an engine that sent maps is read as it came.
func TestDecodeCountersMaps(t *testing.T) {
	p := &Progress{Counters: map[string]uint64{"benchmark.http_2xx": 5},
		Buckets: []*Bucket{{Index: 0, Counters: map[string]uint64{"benchmark.http_2xx": 5}}}}
	want := proto.Clone(p)
	if err := p.DecodeCounters(); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(p, want) {
		t.Errorf("got %v, want %v", p, want)
	}
}

func TestDecodeCountersMalformed(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(*Progress)
		where string
	}{
		{"id past the table", func(p *Progress) { p.CounterIds[1] = 3 }, "counter_ids[1] is 3, the table has 3 names"},
		{"bucket id past the table", func(p *Progress) { p.Buckets[1].CounterIds[0] = 70 }, "buckets[1] (bucket 5): counter_ids[0] is 70"},
		{"fewer values", func(p *Progress) { p.CounterValues = p.CounterValues[:2] }, "3 counter_ids and 2 counter_values"},
		{"bucket with more values", func(p *Progress) { p.Buckets[0].CounterValues = []uint64{1, 2} }, "buckets[0] (bucket 4): 1 counter_ids and 2 counter_values"},
		{"a name twice", func(p *Progress) { p.CounterIds[2] = 0 }, `counter "benchmark.http_2xx" given twice (counter_ids[2])`},
		{"coded and in the map", func(p *Progress) { p.Buckets[0].Counters = map[string]uint64{"benchmark.http_2xx": 1} }, `buckets[0] (bucket 4): counter "benchmark.http_2xx" given twice`},
		{"an empty name", func(p *Progress) { p.CounterNames[2] = "" }, "counter_names[2] is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := coded()
			c.spoil(p)
			err := p.DecodeCounters()
			if !errors.Is(err, ErrCodedCounters) || !strings.Contains(err.Error(), c.where) {
				t.Errorf("error %v, want ErrCodedCounters naming %q", err, c.where)
			}
		})
	}
}

// FuzzDecodeCounters feeds DecodeCounters whatever decodes as a Progress:
// it never panics, and what it accepts keeps every counter it was sent,
// once, by name.
func FuzzDecodeCounters(f *testing.F) {
	for _, p := range []*Progress{coded(), {}, {CounterNames: []string{"a"}, CounterIds: []uint32{1}, CounterValues: []uint64{1}}} {
		b, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := new(Progress)
		if proto.Unmarshal(data, p) != nil {
			return
		}
		want := len(p.GetCounters()) + len(p.GetCounterIds())
		wantBuckets := make([]int, len(p.GetBuckets()))
		for i, b := range p.GetBuckets() {
			wantBuckets[i] = len(b.GetCounters()) + len(b.GetCounterIds())
		}
		if err := p.DecodeCounters(); err != nil {
			if !errors.Is(err, ErrCodedCounters) {
				t.Fatalf("error %v is not ErrCodedCounters", err)
			}
			return
		}
		if len(p.GetCounters()) != want {
			t.Fatalf("%d counters decoded, %d sent", len(p.GetCounters()), want)
		}
		for i, b := range p.GetBuckets() {
			if len(b.GetCounters()) != wantBuckets[i] || len(b.GetCounterIds())+len(b.GetCounterValues()) != 0 {
				t.Fatalf("bucket %d: %d counters decoded, %d sent", i, len(b.GetCounters()), wantBuckets[i])
			}
		}
	})
}
