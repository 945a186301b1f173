package engine

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/internal/runca"
	"github.com/sortie-soak/sortie/record"
)

// startEcho runs the fixture's TCP and UDP echo services on loopback with
// fault set (none when empty).
func startEcho(t *testing.T, fault string) *fixture.EchoServer {
	t.Helper()
	e, err := fixture.StartEcho(fixture.EchoOptions{TCP: "127.0.0.1:0", UDP: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if fault != "" {
		if err := e.SetFault(fault); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func tcpReq(id, addr string, workers, conns, inflight uint32) *enginev1.ExecuteRequest {
	r := req(id, "tcp://"+addr, 100, 500*time.Millisecond)
	r.Workers = workers
	r.Body = []byte("ping\n")
	r.Timeout = durationpb.New(5 * time.Second)
	r.Tcp = &enginev1.TCP{Connections: conns, MaxInflightPerConnection: inflight, DrainDuration: durationpb.New(200 * time.Millisecond)}
	r.ProgressInterval = durationpb.New(50 * time.Millisecond)
	return r
}

// checkMessages asserts what every TCP, UDP or WebSocket result keeps: the record's
// conservation (the driver's and the gate's check), the mode's second law,
// the latency statistic counting exactly the echoes, and a timeline that
// sums to the result with a sample for every failure of an outcome class.
func checkMessages(t *testing.T, r run, echo bool) map[string]uint64 {
	t.Helper()
	if r.err != nil {
		t.Fatalf("Execute: %v", r.err)
	}
	res := r.result
	c := res.GetCounters()
	br := record.BackendResult{Backend: "engine", Planned: res.GetPlanned(), Unsent: res.GetUnsent(), Counters: c}
	if res.GetPlanned() == 0 {
		t.Fatalf("nothing planned: %v", res)
	}
	if err := br.Conserves(); err != nil {
		t.Errorf("conservation: %v; counters %v", err, c)
	}
	stats := statsByID(res)
	if c[record.StreamMessagesSent]+c[record.StreamDeferred]+c[record.StreamUnavailable] > 0 {
		// WebSocket: stream_messages_sent = received + unexpected + lost +
		// drain incomplete (record.StreamDetails).
		fates := c[record.StreamMessagesReceived] + c[record.StreamUnexpectedMessage] + c[record.StreamInflightLost] + c[record.StreamDrainIncomplete]
		if fates != c[record.StreamMessagesSent] {
			t.Errorf("websocket: %d sent, %d received + unexpected + lost + drain incomplete; counters %v", c[record.StreamMessagesSent], fates, c)
		}
		if lat := stats[record.StreamMessageLatency]; lat == nil || lat.GetCount() != c[record.StreamMessagesReceived] {
			t.Errorf("%s = %v, want count %d", record.StreamMessageLatency, lat, c[record.StreamMessagesReceived])
		}
	} else if c[record.TCPMessagesSent] > 0 || c[record.TCPDeferred]+c[record.TCPUnavailable] > 0 {
		// Without an echo a message written is done: nothing else to add.
		noEcho := !echo
		fates := c[record.TCPMessagesReceived] + c[record.TCPEchoMismatch] + c[record.TCPInflightLost] + c[record.TCPDrainIncomplete]
		if !noEcho && fates != c[record.TCPMessagesSent] {
			t.Errorf("tcp: %d sent, %d received + mismatched + lost + drain incomplete; counters %v", c[record.TCPMessagesSent], fates, c)
		}
		if lat := stats[record.TCPMessageLatency]; lat == nil || lat.GetCount() != c[record.TCPMessagesReceived] {
			t.Errorf("%s = %v, want count %d", record.TCPMessageLatency, lat, c[record.TCPMessagesReceived])
		}
	} else {
		if sent := c[record.UDPDatagramsReceived] + c[record.UDPLost]; sent != c[record.UDPDatagramsSent] {
			t.Errorf("udp: %d sent, %d received + lost; counters %v", c[record.UDPDatagramsSent], sent, c)
		}
		if lat := stats[record.UDPMessageLatency]; lat == nil || lat.GetCount() != c[record.UDPDatagramsReceived] {
			t.Errorf("%s = %v, want count %d", record.UDPMessageLatency, lat, c[record.UDPDatagramsReceived])
		}
	}
	if _, ok := stats[record.Latency2xx]; ok {
		t.Errorf("an HTTP statistic in a message mode: %v", stats)
	}
	buckets, samples := timelineOf(t, r)
	if err := record.CheckTimeline(buckets, br); err != nil {
		t.Errorf("timeline: %v", err)
	}
	if err := record.CheckSamples(buckets, samples); err != nil {
		t.Errorf("samples: %v", err)
	}
	var failures uint64
	for _, k := range record.FailureClasses {
		failures += c[k]
	}
	if uint64(len(samples)) != failures {
		t.Errorf("%d samples of %d failures", len(samples), failures)
	}
	return c
}

// TestTCPEcho runs TCP echo load against the fixture: every message is
// sent and echoed, on every connection of every worker.
func TestTCPEcho(t *testing.T) {
	t.Parallel()
	e := startEcho(t, "")
	te := startEngine(t, Options{})
	c := checkMessages(t, te.execute(t, tcpReq("tcp-echo", e.TCPAddr(), 2, 3, 16)), true)
	wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{
		record.TCPMessagesSent: 100, record.TCPMessagesReceived: 100, record.TCPConnectionsOpened: 6,
	})
}

// TestTCPFaults classifies the fixture's TCP faults exactly.
func TestTCPFaults(t *testing.T) {
	t.Parallel()
	te := startEngine(t, Options{})
	// 2 workers × 2 connections × 4 in flight each: what a peer that never
	// echoes holds; the rest of the 100 messages find no room.
	held := map[string]uint64{
		record.TCPMessagesSent: 16, record.TCPDrainIncomplete: 16, record.TCPDeferred: 84, record.TCPConnectionsOpened: 4,
	}
	for _, tc := range []struct {
		fault string
		want  map[string]uint64
	}{
		{"tcp:hang", held},
		{"tcp:stall", held},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			e := startEcho(t, tc.fault)
			c := checkMessages(t, te.execute(t, tcpReq("tcp-"+tc.fault[4:], e.TCPAddr(), 2, 2, 4)), true)
			wantCounters(t, &enginev1.Result{Counters: c}, tc.want)
		})
	}
	// A peer that closes or resets each connection on its first message:
	// each connection's close is counted once, with its messages in flight
	// lost, and every later message finds the connection unavailable.
	for _, fault := range []string{"tcp:close", "tcp:reset"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			e := startEcho(t, fault)
			c := checkMessages(t, te.execute(t, tcpReq("tcp-"+fault[4:], e.TCPAddr(), 2, 2, 4)), true)
			if c[record.TCPConnectionClosed] != 4 || c[record.TCPInflightLost] < 4 || c[record.TCPMessagesReceived] != 0 ||
				c[record.TCPInflightLost] != c[record.TCPMessagesSent] || c[record.TCPUnavailable] == 0 {
				t.Errorf("counters %v: want 4 connections closed, their messages lost, the rest unavailable", c)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		c := checkMessages(t, te.execute(t, tcpReq("tcp-refused", addr, 2, 2, 4)), true)
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{record.TCPConnectFailures: 4, record.TCPUnavailable: 100})
	})
	t.Run("no-echo", func(t *testing.T) {
		t.Parallel()
		e := startEcho(t, "tcp:hang")
		r := tcpReq("tcp-sink", e.TCPAddr(), 2, 2, 4)
		echo := false
		r.Tcp.ExpectEcho = &echo
		c := checkMessages(t, te.execute(t, r), false)
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{record.TCPMessagesSent: 100, record.TCPConnectionsOpened: 4})
	})
	t.Run("mismatch", func(t *testing.T) {
		t.Parallel()
		srv := newRawServer(t, func(nc net.Conn, _ int64) {
			buf := make([]byte, 5)
			for {
				if _, err := nc.Read(buf); err != nil {
					return
				}
				if _, err := nc.Write([]byte("PONG\n")); err != nil {
					return
				}
			}
		})
		c := checkMessages(t, te.execute(t, tcpReq("tcp-mismatch", srv.addr(), 1, 1, 1)), true)
		// One connection, one message at a time: the first echo is wrong,
		// the engine closes the connection, the rest are unavailable.
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{
			record.TCPMessagesSent: 1, record.TCPEchoMismatch: 1, record.TCPUnavailable: 49, record.TCPConnectionsOpened: 1,
		})
	})
}

func udpReq(id, addr string, timeout time.Duration, inflight uint32) *enginev1.ExecuteRequest {
	r := req(id, "udp://"+addr, 100, 500*time.Millisecond)
	r.Workers = 2
	r.Body = []byte("datagram")
	r.Timeout = durationpb.New(5 * time.Second)
	r.Udp = &enginev1.UDP{MaxInflight: inflight, Timeout: durationpb.New(timeout)}
	r.ProgressInterval = durationpb.New(50 * time.Millisecond)
	return r
}

// TestUDPEcho runs UDP echo load against the fixture, clean and with each
// fault the fixture has for UDP, classified exactly.
func TestUDPEcho(t *testing.T) {
	t.Parallel()
	te := startEngine(t, Options{})
	t.Run("clean", func(t *testing.T) {
		t.Parallel()
		e := startEcho(t, "")
		c := checkMessages(t, te.execute(t, udpReq("udp-echo", e.UDPAddr(), time.Second, 16)), true)
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{record.UDPDatagramsSent: 100, record.UDPDatagramsReceived: 100})
	})
	t.Run("drop", func(t *testing.T) {
		t.Parallel()
		e := startEcho(t, "udp:drop#7")
		c := checkMessages(t, te.execute(t, udpReq("udp-drop", e.UDPAddr(), 200*time.Millisecond, 16)), true)
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{record.UDPDatagramsSent: 100, record.UDPDatagramsReceived: 93, record.UDPLost: 7})
	})
	t.Run("deferred", func(t *testing.T) {
		t.Parallel()
		// Nothing comes back and each worker may hold 3: every worker's
		// first 3 are lost when their timeout passes, after 2 s, long after
		// the last is due; every other datagram finds no room.
		e := startEcho(t, "udp:drop")
		c := checkMessages(t, te.execute(t, udpReq("udp-deferred", e.UDPAddr(), 2*time.Second, 3)), true)
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{record.UDPDatagramsSent: 6, record.UDPLost: 6, record.UDPDeferred: 94})
	})
	t.Run("unexpected", func(t *testing.T) {
		t.Parallel()
		// A peer that answers every datagram twice: the second copy
		// matches nothing outstanding.
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 1024)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(buf[:n], from)
				_, _ = pc.WriteTo(buf[:n], from)
			}
		}()
		c := checkMessages(t, te.execute(t, udpReq("udp-twice", pc.LocalAddr().String(), time.Second, 16)), true)
		// The last copies may come after everything ended: not counted.
		if c[record.UDPDatagramsReceived] != 100 || c[record.UDPUnexpected] < 90 || c[record.UDPUnexpected] > 100 || c[record.UDPLost] != 0 {
			t.Errorf("counters %v: want 100 received and up to 100 unexpected", c)
		}
	})
}

// TestMessageSpecRefusals: an execution of a message mode that cannot run
// is refused before any load, naming the field.
func TestMessageSpecRefusals(t *testing.T) {
	now := time.Now()
	noEcho := false
	for _, tc := range []struct {
		name string
		edit func(r *enginev1.ExecuteRequest)
		want string
	}{
		{"no port", func(r *enginev1.ExecuteRequest) { r.Url = "tcp://127.0.0.1" }, "needs an explicit port"},
		{"path", func(r *enginev1.ExecuteRequest) { r.Url = "udp://127.0.0.1:9/x" }, "host:port only"},
		{"scheme", func(r *enginev1.ExecuteRequest) { r.Url = "sctp://127.0.0.1:9" }, "not http, https, tcp, tcps or udp"},
		{"tcp without a body", func(r *enginev1.ExecuteRequest) { r.Body = nil }, "body: must not be empty"},
		{"udp without a body", func(r *enginev1.ExecuteRequest) { r.Url, r.Body, r.Tcp = "udp://127.0.0.1:9", nil, nil }, "body: is 0 bytes"},
		{"udp too big", func(r *enginev1.ExecuteRequest) {
			r.Url, r.Body, r.Tcp = "udp://127.0.0.1:9", make([]byte, maxUDPMessage+1), nil
		}, "a datagram carries 1 to 65491"},
		{"tcp block on udp", func(r *enginev1.ExecuteRequest) { r.Url = "udp://127.0.0.1:9" }, "tcp: goes with a tcp or tcps url"},
		{"udp block on tcp", func(r *enginev1.ExecuteRequest) { r.Udp = &enginev1.UDP{} }, "udp: goes with a udp url"},
		{"tls on tcp", func(r *enginev1.ExecuteRequest) { r.Tls = &enginev1.TLS{} }, "tls: goes with a tcps url"},
		{"headers", func(r *enginev1.ExecuteRequest) { r.Headers = []*enginev1.Header{{Name: "A", Value: "b"}} }, "headers: mean nothing"},
		{"too many connections", func(r *enginev1.ExecuteRequest) { r.Tcp.Connections = maxTCPConnections + 1 }, "tcp.connections: 10001 is more than"},
		{"negative drain", func(r *enginev1.ExecuteRequest) { r.Tcp.DrainDuration = durationpb.New(-time.Second) }, "tcp.drain_duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tcpReq("refused", "127.0.0.1:9", 1, 1, 1)
			r.Tcp.ExpectEcho = nil
			tc.edit(r)
			_, err := parseSpec(r, now, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseSpec: %v, want %q", err, tc.want)
			}
		})
	}
	// Without an echo a tcp message may be empty.
	r := tcpReq("sink", "127.0.0.1:9", 1, 1, 1)
	r.Body, r.Tcp.ExpectEcho = nil, &noEcho
	if s, err := parseSpec(r, now, ""); err != nil || s.mode != modeTCP || s.tcp.echo {
		t.Errorf("a sink without a body: %v", err)
	}
}

// TestTCPSEcho runs tcps:// load against a TLS echo that asks for a client
// certificate: the engine presents the plan's, and every message is
// echoed through TLS.
func TestTCPSEcho(t *testing.T) {
	t.Parallel()
	d := newRunTLS(t)
	lis, err := tls.Listen("tcp", "127.0.0.1:0", d.server(t))
	if err != nil {
		t.Fatal(err)
	}
	serveRaw(t, lis, func(nc net.Conn, _ int64) { _, _ = io.Copy(nc, nc) })
	read := func(name string) []byte {
		b, err := os.ReadFile(d.file(name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	te := startEngine(t, Options{})
	r := tcpReq("tcps-echo", lis.Addr().String(), 1, 2, 16)
	r.Url = "tcps://" + lis.Addr().String()
	r.Tls = &enginev1.TLS{CertPem: read(runca.DriverCertFile), KeyPem: read(runca.DriverKeyFile), InsecureSkipVerify: true}
	c := checkMessages(t, te.execute(t, r), true)
	wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{
		record.TCPMessagesSent: 50, record.TCPMessagesReceived: 50, record.TCPConnectionsOpened: 2,
	})
	// Without the client certificate the handshake fails: no connection.
	r.ExecutionId, r.Tls = "tcps-anonymous", &enginev1.TLS{InsecureSkipVerify: true}
	c = checkMessages(t, te.execute(t, r), true)
	// (With TLS 1.3 the client's handshake ends before the server checks
	// its certificate: the connection opens, and the server's alert closes
	// it under the first message.)
	if c[record.TCPMessagesReceived] != 0 || c[record.TCPConnectFailures]+c[record.TCPConnectionClosed] != 2 {
		t.Errorf("counters %v: want both connections refused or closed, nothing echoed", c)
	}
}
