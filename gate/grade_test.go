package gate

import (
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sortie-soak/sortie/record"
)

const (
	addrA = "10.9.0.1:8443"
	addrB = "10.9.0.2:8443"
)

// result is a clean backend result with n 2xx over the given elapsed time.
func result(addr string, n uint64, elapsedMs int64, more map[string]uint64) record.BackendResult {
	c := map[string]uint64{"benchmark.http_2xx": n}
	for k, v := range more {
		c[k] = v
	}
	return record.BackendResult{Backend: addr, ElapsedMs: elapsedMs, StartedAt: "2026-05-01T08:00:00.300Z", Counters: c}
}

// execution is one ran execution of "s/<target>" on addrA and addrB.
func execution(t *testing.T, target, rate string, durMs int64, results ...record.BackendResult) record.Entry {
	t.Helper()
	r, err := record.ParseDecimal(rate)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := r.Float64()
	return record.Entry{
		Execution: record.Execution{
			Label: "s/" + target, Scenario: "s", Rate: f, PerBackend: true, DurationMs: durMs,
			ElapsedMs: durMs + 500, StartedAt: "2026-05-01T08:00:00.100Z", EndedAt: "2026-05-01T08:30:00.100Z",
			Backends: []string{addrA, addrB}, Results: results,
		},
		ExactRate: r, HasResults: len(results) > 0,
	}
}

func input(execs ...record.Entry) Input {
	return Input{Source: &record.Source{Form: record.FormReport, Executions: execs, All: execs}, Backends: 2, FloorPct: big.NewRat(99, 1)}
}

func TestFloor(t *testing.T) {
	for _, tc := range []struct {
		floor string
		count uint64
		pass  bool
	}{
		{"99", 1336, false}, // 99 % of 1350 is 1336.5
		{"99", 1337, true},
		{"99", 1349, true}, // a late-woken worker ends one short
		{"99", 1350, true},
		{"99", 1363, true}, // 101 % is 1363.5
		{"99", 1364, false},
		{"99", 1400, false},
		{"100", 1349, false},
		{"100", 1350, true},
		{"100", 1351, false},
		{"99.5", 1343, false}, // 1343.25
		{"99.5", 1344, true},
		{"99", 0, false}, // nothing sent is never a pass
	} {
		e := execution(t, "a", "9", 150000, result(addrA, 1350, 150001, nil), result(addrB, tc.count, 150001, nil))
		in := input(e)
		in.FloorPct, _ = record.ParseDecimal(tc.floor)
		v := Grade(in)
		if got := v.Targets[0].Status == ResultPass; got != tc.pass {
			t.Errorf("floor %s%%, %d of 1350: pass=%v, want %v (%v)", tc.floor, tc.count, got, tc.pass, v.Targets[0].Reasons)
		}
	}
}

func TestPlanned(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rate       string
		perBackend bool
		durMs      int64
		rampMs     int64
		want       string // planned per node
		wantPool   string
	}{
		{"constant", "9", true, 150000, 0, "1350", "2700"},
		{"decimal rate is exact", "5.94", true, 150000, 0, "891", "1782"},
		{"pool rate is split", "18", false, 150000, 0, "1350", "2700"},
		{"ramp: R*T/2 + R*(D-T)", "10", true, 60000, 20000, "500", "1000"},
		{"all ramp", "3", true, 1000, 1000, "1.5", "3"},
		{"8h30m at 9 rps", "9", true, 30600000, 0, "275400", "550800"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := execution(t, "a", tc.rate, tc.durMs, result(addrA, 1, tc.durMs, nil), result(addrB, 1, tc.durMs, nil))
			e.PerBackend = tc.perBackend
			e.RampMs = tc.rampMs
			v := Grade(input(e))
			tg := v.Targets[0]
			if tg.Nodes[0].Planned != tc.want || tg.HTTP2xxPlanned != tc.wantPool {
				t.Errorf("planned %s per node, %s in all; want %s, %s", tg.Nodes[0].Planned, tg.HTTP2xxPlanned, tc.want, tc.wantPool)
			}
		})
	}
}

func TestClassesNeverSummed(t *testing.T) {
	e := execution(t, "a", "9", 150000,
		result(addrA, 1350, 150001, nil),
		result(addrB, 1346, 150001, map[string]uint64{
			"benchmark.stream_resets":                         2,
			"benchmark.stream_resets_before_headers":          2,
			"benchmark.stream_resets_remote_reset":            2,
			"benchmark.http_5xx":                              2,
			"benchmark.stream_resets_fancy_new":               0, // a zero counter is not a failure
			"benchmark.pool_failure_local_connection_failure": 0,
		}))
	v := Grade(input(e))
	got := strings.Join(v.Targets[0].Reasons, " | ")
	want := "failures http_5xx=2 [node=2] stream_resets=2 [node=2] stream_resets_before_headers=2 [node=2] stream_resets_remote_reset=2 [node=2]"
	want = strings.ReplaceAll(want, "node", addrB)
	if got != want {
		t.Errorf("reasons\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "=6") || strings.Contains(got, "=8") {
		t.Errorf("classes were added up: %s", got)
	}
}

func TestNodeNames(t *testing.T) {
	named := result(addrB, 1350, 150001, nil)
	named.BackendName = "from-engine"
	e := execution(t, "a", "9", 150000, result(addrA, 1350, 150001, nil), named)
	e.Backends = append(e.Backends, "[fd00::7]:8443")
	e.Results = append(e.Results, result("[fd00::7]:8443", 1350, 150001, nil))
	in := input(e)
	in.Backends = 3
	in.Engines = []Engine{{Addr: "10.9.0.1", Node: "from-list"}, {Addr: "fd00::7", Node: "v6-node"}}
	v := Grade(in)
	var got []string
	for _, n := range v.Targets[0].Nodes {
		got = append(got, n.Node)
	}
	if diff := cmp.Diff([]string{"from-list", "from-engine", "v6-node"}, got); diff != "" {
		t.Errorf("node names (-want +got):\n%s", diff)
	}
	in.Engines = nil
	v = Grade(in)
	if n := v.Targets[0].Nodes[0].Node; n != addrA {
		t.Errorf("without a list or a backend_name the node is %q, want the address", n)
	}
}

func TestEnginesOnOneHost(t *testing.T) {
	// Two engines on one host, told apart by their ports; a third node in
	// the list was never dispatched to.
	a, b := "127.0.0.1:7001", "127.0.0.1:7002"
	e := execution(t, "a", "9", 150000, result(a, 1350, 150001, nil), result(b, 1350, 150001, nil))
	e.Backends = []string{a, b}
	in := input(e)
	in.Backends = 3
	in.Engines = []Engine{{Addr: a, Node: "one"}, {Addr: b, Node: "two"}, {Addr: "127.0.0.1:7003", Node: "three"}}
	v := Grade(in)
	tg := v.Targets[0]
	if got := []string{tg.Nodes[0].Node, tg.Nodes[1].Node}; got[0] != "one" || got[1] != "two" {
		t.Errorf("nodes %v, want [one two]", got)
	}
	if r := strings.Join(tg.Reasons, "|"); !strings.Contains(r, "backends 2/3 dispatched (not dispatched: three)") {
		t.Errorf("reasons %q do not name the node missing from the pool", r)
	}
}

func TestUnobserved(t *testing.T) {
	clean := execution(t, "a", "9", 150000, result(addrA, 1350, 150001, nil), result(addrB, 1350, 150001, nil))
	zero := execution(t, "z", "0", 150000, result(addrA, 0, 150001, nil), result(addrB, 0, 150001, nil))
	for _, tc := range []struct {
		name   string
		in     Input
		result string
	}{
		{"no execution", input(), ResultUnobserved},
		{"empty share table", func() Input { in := input(clean); in.Shares = []Share{}; return in }(), ResultUnobserved},
		{"nothing planned anywhere", input(zero), ResultUnobserved},
		{"one target planned nothing", input(clean, zero), ResultFail},
		{"clean", input(clean), ResultPass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Grade(tc.in)
			if v.Result != tc.result {
				t.Errorf("result %s, want %s (%+v)", v.Result, tc.result, v.Targets)
			}
			want := map[string]int{ResultPass: 0, ResultFail: 1, ResultUnobserved: 3}[tc.result]
			if v.ExitCode != want {
				t.Errorf("exit %d, want %d", v.ExitCode, want)
			}
		})
	}
}

func TestShares(t *testing.T) {
	e := execution(t, "a", "9", 150000, result(addrA, 1350, 150001, nil), result(addrB, 1350, 150001, nil))
	share := func(name, rps string) Share {
		r, _ := record.ParseDecimal(rps)
		return Share{Name: name, RPS: rps, rps: r}
	}
	for _, tc := range []struct {
		name   string
		shares []Share
		want   []string // status and first reason per target
	}{
		{"match by target name", []Share{share("a", "9")}, []string{"PASS"}},
		{"match by full label", []Share{share("s/a", "9")}, []string{"PASS"}},
		{"different rate", []Share{share("a", "6")}, []string{"FAIL the report plans 9 rps per backend, the share table 6 (a different plan?)"}},
		{"missing", []Share{share("a", "9"), share("b", "3")}, []string{"PASS", "FAIL missing from the report (never driven)"}},
		{"extra", []Share{share("b", "3")}, []string{"FAIL missing from the report (never driven)", "FAIL in the report but not in the share table (a different plan?)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(e)
			in.Shares = tc.shares
			v := Grade(in)
			var got []string
			for _, tg := range v.Targets {
				s := tg.Status
				if len(tg.Reasons) > 0 {
					s += " " + tg.Reasons[0]
				}
				got = append(got, s)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMaxP99(t *testing.T) {
	slow := result(addrB, 1350, 150001, nil)
	slow.Statistics = map[string]record.Statistic{"benchmark_http_client.latency_2xx": {Count: 1350, Unit: "ns", P50: 4e6, P99: 250e6, Max: 900e6}}
	fast := result(addrA, 1350, 150001, nil)
	fast.Statistics = map[string]record.Statistic{"benchmark_http_client.latency_2xx": {Count: 1350, Unit: "ns", P50: 1e6, P99: 3e6, Max: 9e6}}
	e := execution(t, "a", "9", 150000, fast, slow)
	for _, tc := range []struct {
		max  time.Duration
		pass bool
	}{{0, true}, {time.Second, true}, {250 * time.Millisecond, true}, {249 * time.Millisecond, false}} {
		in := input(e)
		in.MaxP99 = tc.max
		v := Grade(in)
		tg := v.Targets[0]
		if got := tg.Status == ResultPass; got != tc.pass {
			t.Errorf("--max-p99 %s: pass=%v, want %v (%v)", tc.max, got, tc.pass, tg.Reasons)
		}
		if tg.Latency == nil || *tg.Latency.P99Ms != 250 || *tg.Latency.MaxMs != 900 {
			t.Errorf("worst latency %+v, want p99 250ms max 900ms", tg.Latency)
		}
	}
}

func TestOffPlan(t *testing.T) {
	for _, tc := range []struct {
		elapsed int64
		pass    bool
	}{{150000, true}, {157500, true}, {157501, false}, {142500, true}, {142499, false}} {
		// The count is kept within the floor so only the duration is judged.
		e := execution(t, "a", "9", 150000, result(addrA, 1350, 150000, nil), result(addrB, 1350, tc.elapsed, nil))
		v := Grade(input(e))
		if got := v.Targets[0].Status == ResultPass; got != tc.pass {
			t.Errorf("elapsed %d of 150000 ms: pass=%v, want %v (%v)", tc.elapsed, got, tc.pass, v.Targets[0].Reasons)
		}
	}
}

func TestSilentBackend(t *testing.T) {
	// Dispatched to two, one answered, nobody says why the other did not:
	// that node is named, never read as zero.
	e := execution(t, "a", "9", 150000, result(addrA, 1350, 150001, nil))
	v := Grade(input(e))
	tg := v.Targets[0]
	if tg.Status != ResultFail || !strings.Contains(strings.Join(tg.Reasons, "|"), "no result and no error from ["+addrB+"]") {
		t.Errorf("got %s %v", tg.Status, tg.Reasons)
	}
}

// planned is result with the planned and unsent counts of this project's
// engine.
func planned(r record.BackendResult, planned, unsent uint64) record.BackendResult {
	r.Planned, r.Unsent = planned, unsent
	return r
}

func TestExact(t *testing.T) {
	const twoTo64 = ^uint64(0)
	for _, tc := range []struct {
		name    string
		b       record.BackendResult
		errs    []record.BackendError
		reasons []string // of the target; nil: it passes
		lost    int
	}{
		{name: "exact", b: planned(result(addrB, 1350, 150001, nil), 1350, 0)},
		{name: "one missing", b: planned(result(addrB, 1349, 150001, nil), 1350, 0),
			reasons: []string{"accounting: 1349 outcomes for 1350 planned on " + addrB + " (1 missing)"}},
		{name: "thirteen missing: inside the floor, still a failure", b: planned(result(addrB, 1337, 150001, nil), 1350, 0),
			reasons: []string{"accounting: 1337 outcomes for 1350 planned on " + addrB + " (13 missing)"}},
		{name: "one counted twice", b: planned(result(addrB, 1350, 150001, map[string]uint64{record.HTTP3xx: 1}), 1350, 0),
			reasons: []string{"accounting: 1351 outcomes for 1350 planned on " + addrB + " (1 counted twice)"}},
		{name: "unsent after a cancel conserves, and is not clean", b: func() record.BackendResult {
			r := planned(result(addrB, 1349, 150001, nil), 1350, 1)
			r.Cancelled = true
			return r
		}(), reasons: []string{"cancelled before the planned end on [" + addrB + "]", "not clean: http_2xx 1349 != 1350 planned on " + addrB + " (unsent=1)"}},
		{name: "unsent that does not add up", b: planned(result(addrB, 1348, 150001, nil), 1350, 1),
			reasons: []string{"accounting: 1348 outcomes + 1 unsent for 1350 planned on " + addrB + " (1 missing)"}},
		{name: "a 3xx outcome is not 2xx", b: planned(result(addrB, 1349, 150001, map[string]uint64{record.HTTP3xx: 1}), 1350, 0),
			reasons: []string{"not clean: http_2xx 1349 != 1350 planned on " + addrB + " (http_3xx=1)"}},
		{name: "failures name the node, no clean rule on top", b: planned(result(addrB, 1348, 150001, map[string]uint64{record.HTTP5xx: 2}), 1350, 0),
			reasons: []string{"failures http_5xx=2 [" + addrB + "=2]"}},
		{name: "detail counters are not outcomes", b: planned(result(addrB, 1348, 150001, map[string]uint64{record.StreamResets: 2, record.ResetsBeforeHeaders: 2, record.StreamResetsPrefix + "remote_reset": 2}), 1350, 0),
			reasons: []string{"failures stream_resets=2 [" + addrB + "=2] stream_resets_before_headers=2 [" + addrB + "=2] stream_resets_remote_reset=2 [" + addrB + "=2]"}},
		{name: "overflow", b: planned(result(addrB, twoTo64, 150001, map[string]uint64{record.HTTP3xx: 2}), 1350, 0),
			reasons: []string{"accounting: the outcome counters overflow 64 bits for 1350 planned on " + addrB, "http_2xx above 101% of the planned 1350 on [" + addrB + "=18446744073709551615] (more than the plan asked for: not this plan's load)"}},
		{name: "no planned: the older stack's floor alone", b: result(addrB, 1337, 150001, nil)},
		{name: "the driver's accounting error, on a result that conserves", b: planned(result(addrB, 1350, 150001, nil), 1350, 0),
			errs:    []record.BackendError{{Backend: addrB, Kind: record.KindAccounting, Error: "accounting: 1349 outcomes for 1350 planned on node-b"}},
			reasons: []string{"the driver says the result of " + addrB + " breaks planned = unsent + outcomes: accounting: 1349 outcomes for 1350 planned on node-b"}},
		{name: "the driver's accounting error in words, on a result that does not", b: planned(result(addrB, 1349, 150001, nil), 1350, 0),
			errs:    []record.BackendError{{Backend: addrB, Error: "accounting: 1349 outcomes for 1350 planned on node-b"}},
			reasons: []string{"accounting: 1349 outcomes for 1350 planned on " + addrB + " (1 missing)"}},
		{name: "an accounting error without a result is a lost backend", b: planned(result(addrB, 1350, 150001, nil), 1350, 0),
			errs:    []record.BackendError{{Backend: addrA, Kind: record.KindAccounting, Error: "accounting: ?"}},
			reasons: []string{"LOST BACKEND " + addrA + " (" + addrA + ") [returned nothing]", "survivors " + addrB + "=ok"}, lost: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := planned(result(addrA, 1350, 150001, nil), 1350, 0)
			e := execution(t, "a", "9", 150000, a, tc.b)
			if len(tc.errs) > 0 && tc.errs[0].Backend == addrA {
				e.Results = e.Results[1:]
			}
			e.BackendErrors = tc.errs
			v := Grade(input(e))
			tg := v.Targets[0]
			if diff := cmp.Diff(tc.reasons, tg.Reasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			if want := map[bool]string{true: ResultPass, false: ResultFail}[tc.reasons == nil]; tg.Status != want {
				t.Errorf("status %s, want %s", tg.Status, want)
			}
			if len(v.Lost) != tc.lost {
				t.Errorf("lost %+v, want %d", v.Lost, tc.lost)
			}
		})
	}
}

// A resumed run's driver gaps are named in a DRIVER line before WINDOW,
// and judged nothing: the run passes on its counts.
func TestDriverGapsNamed(t *testing.T) {
	in := input(execution(t, "svc", "10", 1000, result(addrA, 10, 1000, nil), result(addrB, 10, 1000, nil)))
	in.Source.DriverGaps = []record.DriverGap{{From: "2026-05-01T08:10:00.000Z", To: "2026-05-01T08:10:03.300Z", Why: "detached (SIGTERM)"}}
	v := Grade(in)
	if v.Result != "PASS" {
		t.Fatalf("verdict %s, want PASS: a driver gap is named, not failed", v.Result)
	}
	var b strings.Builder
	if err := WriteText(&b, v, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	want := "DRIVER  gap from=2026-05-01T08:10:00.000Z to=2026-05-01T08:10:03.300Z  -- detached (SIGTERM)\n"
	if i, w := strings.Index(out, want), strings.Index(out, "WINDOW"); i < 0 || i > w {
		t.Errorf("output lacks the DRIVER line before WINDOW:\n%s", out)
	}
}

// TestMessageTargets grades TCP, UDP and gRPC unary targets: a clean one
// passes on its echoes (none of them http_2xx) or OK calls, and each
// failure class of the modes
// fails it, named with its node; a node that lost messages to no class is
// an accounting error.
func TestMessageTargets(t *testing.T) {
	msgs := func(addr string, c map[string]uint64) record.BackendResult {
		return record.BackendResult{Backend: addr, ElapsedMs: 150001, StartedAt: "2026-05-01T08:00:00.300Z", Planned: 1350, Counters: c}
	}
	tcpClean := map[string]uint64{record.TCPMessagesSent: 1350, record.TCPMessagesReceived: 1350, record.TCPConnectionsOpened: 1}
	udpClean := map[string]uint64{record.UDPDatagramsSent: 1350, record.UDPDatagramsReceived: 1350}
	grpcClean := map[string]uint64{record.HTTP2xx: 1350, record.GRPCStatusOK: 1350}
	for _, tc := range []struct {
		name string
		b    map[string]uint64
		want string // "" passes
	}{
		{"tcp clean", tcpClean, ""},
		{"udp clean", udpClean, ""},
		{"tcp lost", map[string]uint64{record.TCPMessagesSent: 1350, record.TCPMessagesReceived: 1347, record.TCPInflightLost: 3, record.TCPConnectionClosed: 1},
			"failures tcp_connection_closed=1 [node=1] tcp_inflight_lost=3 [node=3]"},
		{"tcp deferred", map[string]uint64{record.TCPMessagesSent: 1340, record.TCPMessagesReceived: 1340, record.TCPDeferred: 10},
			"failures tcp_deferred=10 [node=10]"},
		{"udp lost", map[string]uint64{record.UDPDatagramsSent: 1350, record.UDPDatagramsReceived: 1345, record.UDPLost: 5},
			"failures udp_lost=5 [node=5]"},
		{"udp unaccounted", map[string]uint64{record.UDPDatagramsSent: 1349, record.UDPDatagramsReceived: 1349}, "accounting"},
		// gRPC unary: a failed call answered 200 is in no HTTP class,
		// only in its grpc_status, by which the gRPC law accounts for it.
		{"grpc clean", grpcClean, ""},
		{"grpc unavailable", map[string]uint64{record.HTTP2xx: 1347, record.GRPCStatusOK: 1347, record.GRPCStatusPrefix + "14": 3, record.GRPCError: 3},
			"failures grpc_error=3 [node=3] grpc_status.14=3 [node=3]"},
		{"grpc reset", map[string]uint64{record.HTTP2xx: 1348, record.GRPCStatusOK: 1348, record.StreamResets: 2, record.GRPCStatusMissing: 2, record.GRPCError: 2},
			"grpc_status.missing=2 [node=2]"},
		{"grpc unaccounted", map[string]uint64{record.HTTP2xx: 1349, record.GRPCStatusOK: 1349}, "accounting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clean := tcpClean
			switch {
			case strings.HasPrefix(tc.name, "udp"):
				clean = udpClean
			case strings.HasPrefix(tc.name, "grpc"):
				clean = grpcClean
			}
			e := execution(t, "a", "9", 150000, msgs(addrA, clean), msgs(addrB, tc.b))
			v := Grade(input(e))
			got := v.Targets[0]
			if tc.want == "" {
				if got.Status != ResultPass {
					t.Fatalf("status %s: %v", got.Status, got.Reasons)
				}
				return
			}
			want := strings.ReplaceAll(tc.want, "node", addrB)
			if got.Status == ResultPass || !strings.Contains(strings.Join(got.Reasons, " | "), want) {
				t.Errorf("status %s, reasons %q; want a failure with %q", got.Status, got.Reasons, want)
			}
		})
	}
}
