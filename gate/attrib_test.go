package gate

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// TestBracketArithmetic: a sample falls in a bracket when its outcome or
// its due time lies from the bracket's begin to its end plus the settle
// window, both edges included; a dropped bucket when its interval meets
// that span.
func TestBracketArithmetic(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	begin, end := at(10_000), at(12_000) // a roll from +10 s to +12 s
	const settle = 3 * time.Second       // its bracket runs to +15 s
	sample := func(dueMs, outMs int) failure {
		return failure{due: at(dueMs), outcome: at(outMs), dueOK: true, outcomeOK: true}
	}
	bucket := func(startMs, widthMs int) failure {
		return failure{sample: -1, dropped: 1, span: [2]time.Time{at(startMs), at(startMs + widthMs)}}
	}
	for _, tc := range []struct {
		name string
		f    failure
		want bool
	}{
		{"due and outcome inside", sample(10_500, 10_600), true},
		{"outcome at the begin", sample(9_000, 10_000), true},
		{"outcome a ms before the begin", sample(9_000, 9_999), false},
		{"due before, outcome in the settle", sample(9_000, 14_000), true},
		{"outcome at the end of the settle", sample(14_000, 15_000), true},
		{"due at the end of the settle, outcome after", sample(15_000, 16_000), true},
		{"due and outcome a ms past the settle", sample(15_001, 15_002), false},
		{"due before the begin, outcome past the settle: in flight over it all", sample(9_000, 16_000), false},
		{"long before", sample(1_000, 1_100), false},
		{"bucket ending at the begin", bucket(9_000, 1_000), false},
		{"bucket straddling the begin", bucket(9_500, 1_000), true},
		{"bucket starting at the end of the settle", bucket(15_000, 1_000), true},
		{"bucket starting a ms past the settle", bucket(15_001, 1_000), false},
		{"bucket without a time", failure{dropped: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.falls(begin, end, settle); got != tc.want {
				t.Errorf("falls = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBracketScope: a roll covers its own target's failures, by the name
// of its ref; a fault its subject's: a target, the driver (everything) or
// a node. A planted fault counts without excusing.
func TestBracketScope(t *testing.T) {
	targets := map[string]bool{"svc-1": true, "svc-2": true}
	roll := newRollBracket(record.Roll{Ref: "soak/deployment/svc-1"})
	down := newFaultBracket(record.Fault{Kind: "target-down", Subject: "svc-2"}, targets)
	kill := newFaultBracket(record.Fault{Kind: "engine-kill", Subject: "node-b"}, targets)
	freeze := newFaultBracket(record.Fault{Kind: "driver-freeze", Subject: "driver"}, targets)
	planted := newFaultBracket(record.Fault{Kind: PlantedFault, Subject: "svc-1"}, targets)
	for _, tc := range []struct {
		name         string
		b            Bracket
		target, node string
		want         bool
	}{
		{"roll, its target", roll, "svc-1", "node-a", true},
		{"roll, another target", roll, "svc-2", "node-a", false},
		{"roll, a target whose name ends like it", roll, "my-svc-1", "node-a", false},
		{"target fault, its target", down, "svc-2", "node-b", true},
		{"target fault, another", down, "svc-1", "node-b", false},
		{"node fault, its node", kill, "svc-1", "node-b", true},
		{"node fault, another node", kill, "svc-1", "node-a", false},
		{"driver fault, anything", freeze, "svc-2", "node-a", true},
		{"planted, its target", planted, "svc-1", "node-a", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.covers(&failure{target: tc.target, node: tc.node}); got != tc.want {
				t.Errorf("covers = %v, want %v", got, tc.want)
			}
		})
	}
	if !planted.Planted || down.Planted {
		t.Errorf("planted: target-fail %v, target-down %v; want only target-fail", planted.Planted, down.Planted)
	}
	for label, want := range map[string]string{"soak/svc-1": "svc-1", "ramp/svc-1/stage-2": "svc-1", "lonely": "lonely"} {
		if got := labelTarget(label); got != want {
			t.Errorf("labelTarget(%q) = %q, want %q", label, got, want)
		}
	}
}

// TestReadLiveFailuresKeepsTheLastRun: a second run appended to a live
// record starts with its own head line; only its failures are kept, and
// a torn last line is counted, not read.
func TestReadLiveFailuresKeepsTheLastRun(t *testing.T) {
	rec := strings.Join([]string{
		`{"type":"head","run_id":"r1"}`,
		`{"type":"sample","label":"soak/svc-1","backend":"10.0.0.1:8443","due":"2026-03-02T10:00:01.000Z","outcome":"2026-03-02T10:00:01.100Z","class":"benchmark.http_5xx","status":503}`,
		`{"type":"head","run_id":"r2"}`,
		`{"type":"bucket","label":"soak/svc-1","backend":"10.0.0.1:8443","index":0,"start":"2026-03-02T11:00:00.000Z","width_ms":1000,"counters":{"benchmark.http_2xx":3},"latency":{"count":3}}`,
		`{"type":"bucket","label":"soak/svc-1","backend":"10.0.0.1:8443","index":1,"start":"2026-03-02T11:00:01.000Z","width_ms":1000,"counters":{"benchmark.http_5xx":4},"latency":{},"samples_dropped":3}`,
		`{"type":"sample","label":"soak/svc-1","backend":"10.0.0.1:8443","bucket":1,"due":"2026-03-02T11:00:01.000Z","outcome":"2026-03-02T11:00:01.100Z","class":"benchmark.http_5xx","status":503}`,
		`{"type":"sample","label":"soak/sv`,
	}, "\n")
	lf, err := ReadLiveFailures(strings.NewReader(rec))
	if err != nil {
		t.Fatal(err)
	}
	if lf.sampleCount() != 1 || lf.view(0).due != "2026-03-02T11:00:01.000Z" || len(lf.dropped) != 1 || lf.droppedTotal() != 3 || lf.Skipped != 1 {
		t.Errorf("kept %+v, want the second run's one sample and one dropping bucket, one line skipped", lf)
	}
}

// FuzzAttribution feeds a live record and a rolls file of any bytes to
// the attribution: it must not panic, and every failure it read is
// accounted for, in a bracket that excuses it or as UNATTRIBUTED, never
// lost and never listed past its count.
//
//	go test ./gate -run '^$' -fuzz '^FuzzAttribution$' -fuzztime 1m
func FuzzAttribution(f *testing.F) {
	for _, dir := range []string{"attrib", "attrib-churn"} {
		live, _ := os.ReadFile(filepath.Join("testdata", dir, DirLive))
		var rolls []byte
		for _, name := range []string{DirRolls, DirFaults, DirChurn} {
			b, _ := os.ReadFile(filepath.Join("testdata", dir, name))
			rolls = append(rolls, b...)
		}
		f.Add(live, rolls, int64(10_000))
	}
	f.Add([]byte(`{"type":"sample","label":"x","backend":"b","due":"bad","outcome":"2026-01-01T00:00:00Z","class":"c"}`), []byte("FAULT engine-kill b at=2026-01-01T00:00:00Z end=2026-01-01T00:00:00Z"), int64(0))
	src, err := record.ReadReportFile(filepath.Join("testdata", "attrib", DirReport))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, live, rolls []byte, settleMs int64) {
		lf, err := ReadLiveFailures(bytes.NewReader(live))
		if err != nil {
			t.Skip()
		}
		rl, _ := record.ParseRolls(bytes.NewReader(rolls))
		settle := time.Duration(settleMs%3_600_000) * time.Millisecond
		if settle < 0 {
			settle = -settle
		}
		v := Grade(Input{Source: src, Backends: 2, Rolls: &rl, Live: lf, Settle: settle})
		a := v.Attribution
		want := lf.droppedTotal() + uint64(lf.sampleCount())
		var unattributed uint64
		for _, u := range a.Unattributed {
			unattributed += u.Failures
			var listed uint64
			for _, l := range u.Listed {
				listed += max(l.Dropped, 1)
			}
			if listed+u.More != u.Failures || len(u.Listed) > maxUnattributedLines {
				t.Fatalf("%s: %d listed + %d more != %d failures", u.Target, listed, u.More, u.Failures)
			}
		}
		if unattributed > want {
			t.Fatalf("%d unattributed of %d failures", unattributed, want)
		}
		if excused := excusedCount(a); unattributed+excused < want {
			t.Fatalf("%d unattributed + %d in brackets that excuse < %d failures: some were lost", unattributed, excused, want)
		}
		if err := WriteText(io.Discard, v, true); err != nil {
			t.Fatal(err)
		}
	})
}

// excusedCount sums the failures of the brackets that excuse theirs (a
// failure in two brackets counts twice).
func excusedCount(a *Attribution) uint64 {
	var n uint64
	for _, bs := range [][]Bracket{a.Rolls, a.Faults} {
		for _, b := range bs {
			if !b.Planted {
				n += b.Failures
			}
		}
	}
	return n
}

// TestTCPUnavailableAfterARoll: a raw TCP connection a roll closed stays
// closed, so the target's and node's tcp_unavailable messages long after
// the roll's settle window are the roll's, not findings; the same
// failures of another node, or of a target whose first tcp_unavailable
// fell in no bracket, stay UNATTRIBUTED, and so does an http failure long
// after.
func TestTCPUnavailableAfterARoll(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	sec := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.Encode(record.HeadLine{Type: record.LineHead, RunID: "t"})
	put := func(label, node string, s int, class string) {
		se := record.Series{Label: label, Backend: node + ":9000", BackendName: node, Start: t0, Width: time.Second}
		l := se.Sample(int64(s)*int64(time.Second), int64(s)*int64(time.Second)+int64(time.Millisecond))
		l.Class = class
		if err := enc.Encode(l); err != nil {
			t.Fatal(err)
		}
	}
	// The roll of svc-1 at +10 s..+11 s closes node-a's connection.
	for s := 10; s < 40; s++ {
		put("mesh/svc-1", "node-a", s, record.TCPUnavailable)
	}
	put("mesh/svc-1", "node-b", 35, record.TCPUnavailable) // closed later, by nothing
	put("mesh/svc-2", "node-a", 30, record.TCPUnavailable) // another target
	put("mesh/svc-1", "node-a", 38, record.PoolOverflow)   // another class
	live, err := ReadLiveFailures(&buf)
	if err != nil {
		t.Fatal(err)
	}
	roll := record.Roll{Ref: "svc-1", Begin: sec(10), End: sec(11), Term: sec(10)}
	g := newGrader(Input{Source: &record.Source{}, Rolls: &record.RollLog{Rolls: []record.Roll{roll}}, Live: live, Settle: 3 * time.Second})
	a := g.attribute(nil)
	if len(a.Rolls) != 1 || a.Rolls[0].Failures != 30 {
		t.Fatalf("the roll holds %+v, want the 30 tcp_unavailable of svc-1 on node-a", a.Rolls)
	}
	got := map[string]uint64{}
	for _, u := range a.Unattributed {
		got[u.Target] = u.Failures
	}
	if got["svc-1"] != 2 || got["svc-2"] != 1 || len(got) != 2 {
		t.Errorf("unattributed %v, want svc-1=2 (node-b's, and the pool_overflow) and svc-2=1", got)
	}
}
