package engine

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/wsframe"
	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/record"
)

// wsReq is 100 messages (50 per worker) over workers × streams connections.
func wsReq(id, url string, workers, streams, inflight uint32) *enginev1.ExecuteRequest {
	r := req(id, url, 100, 500*time.Millisecond)
	r.Workers = workers
	r.Body = []byte(`{"type":"ping"}`)
	r.Timeout = durationpb.New(5 * time.Second)
	r.Websocket = &enginev1.WebSocket{Streams: streams, MaxInflightPerStream: inflight, DrainDuration: durationpb.New(200 * time.Millisecond)}
	r.ProgressInterval = durationpb.New(50 * time.Millisecond)
	return r
}

// TestWebSocketEcho runs WebSocket echo load against the fixture: every
// message echoed, text or binary, and accounted for.
func TestWebSocketEcho(t *testing.T) {
	t.Parallel()
	srv := startTarget(t)
	te := startEngine(t, Options{})
	for _, binary := range []bool{false, true} {
		r := wsReq("ws", "http://"+srv.Addr(fixture.DefaultService)+"/ws", 2, 3, 16)
		r.Websocket.Binary = binary
		c := checkMessages(t, te.execute(t, r), true)
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{
			record.StreamMessagesSent: 100, record.StreamMessagesReceived: 100, record.StreamsOpened: 6,
		})
	}
}

// wsPeer upgrades each connection (with accept as its Sec-WebSocket-Accept,
// the right one when empty) and hands it to serve with a reader of the
// client's frames.
func wsPeer(t *testing.T, accept string, serve func(c net.Conn, r *wsframe.Reader)) string {
	s := newRawServer(t, func(c net.Conn, _ int64) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		a := accept
		if a == "" {
			a = wsframe.AcceptKey(req.Header.Get("Sec-WebSocket-Key"))
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+a+"\r\n\r\n")
		serve(c, wsframe.NewReader(br, 1<<20, true))
	})
	return s.url()
}

// TestWebSocketPeerFaults classifies what a WebSocket peer can do wrong,
// exactly.
func TestWebSocketPeerFaults(t *testing.T) {
	t.Parallel()
	te := startEngine(t, Options{})
	drainAll := func(c net.Conn, r *wsframe.Reader) {
		for {
			if _, _, err := r.Next(); err != nil {
				return
			}
		}
	}
	// 2 workers × 2 streams × 4 in flight: what a peer that never echoes
	// holds; the other 84 of the 100 find no room.
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		c := checkMessages(t, te.execute(t, wsReq("silent", wsPeer(t, "", drainAll), 2, 2, 4)), true)
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{
			record.StreamMessagesSent: 16, record.StreamDrainIncomplete: 16, record.StreamDeferred: 84, record.StreamsOpened: 4,
		})
	})
	t.Run("wrong accept", func(t *testing.T) {
		t.Parallel()
		c := checkMessages(t, te.execute(t, wsReq("accept", wsPeer(t, "bm90IGl0", drainAll), 2, 2, 4)), true)
		wantCounters(t, &enginev1.Result{Counters: c}, map[string]uint64{
			record.StreamUpgradeRejected: 4, record.StreamUnavailable: 100, record.StreamsOpened: 0,
		})
	})
	// An echo that is not the message: that message is
	// stream_unexpected_message, the connection closed by the engine; a
	// masked frame (a server must not mask) is one stream_protocol_errors
	// per connection and the message in flight lost. Each connection's
	// first message ends it; the rest find it unavailable.
	for _, tc := range []struct {
		name  string
		frame []byte
		class string
	}{
		{"unexpected", wsframe.Append(nil, wsframe.OpText, []byte("pong"), nil), record.StreamUnexpectedMessage},
		{"masked", wsframe.Append(nil, wsframe.OpText, []byte(`{"type":"ping"}`), &[4]byte{1, 2, 3, 4}), record.StreamProtocolErrors},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := wsPeer(t, "", func(c net.Conn, r *wsframe.Reader) {
				if _, _, err := r.Next(); err == nil {
					c.Write(tc.frame)
				}
				drainAll(c, r)
			})
			c := checkMessages(t, te.execute(t, wsReq(tc.name, url, 2, 2, 4)), true)
			// A second message written before the bad frame arrived (a
			// worker woken late) is lost with its connection.
			extra := c[record.StreamInflightLost]
			if tc.class == record.StreamProtocolErrors {
				// Its first message is lost with it, not unexpected.
				extra -= min(extra, 4)
			}
			if c[tc.class] != 4 || c[record.StreamMessagesSent] != 4+extra || c[record.StreamUnavailable] != 96-extra || c[record.StreamsOpened] != 4 {
				t.Errorf("counters %v: want 4 %s (one a connection), the rest unavailable", c, strings.TrimPrefix(tc.class, "benchmark."))
			}
			if tc.name == "masked" && c[record.StreamInflightLost] < 4 {
				t.Errorf("counters %v: want each connection's first message lost", c)
			}
		})
	}
}

// FuzzReadHead: any bytes give a head within the bound or an error,
// never a panic.
func FuzzReadHead(f *testing.F) {
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("\n\n"))
	f.Add([]byte(strings.Repeat("X-A: b\r\n", 3000)))
	f.Fuzz(func(t *testing.T, in []byte) {
		status, hdr, err := readHead(bufio.NewReader(strings.NewReader(string(in))))
		if err == nil && len(status)+len(hdr) > maxHandshake {
			t.Fatalf("a head of %d fields past the bound", len(hdr))
		}
	})
}

// TestWebSocketRefused: websocket settings that cannot run are refused,
// each naming its field.
func TestWebSocketRefused(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		edit func(r *enginev1.ExecuteRequest)
		want string
	}{
		{"no body", func(r *enginev1.ExecuteRequest) { r.Body = nil }, "body: is 0 bytes"},
		{"http2", func(r *enginev1.ExecuteRequest) { r.Protocol = enginev1.Protocol_HTTP2 }, "websocket: requires protocol HTTP1"},
		{"post", func(r *enginev1.ExecuteRequest) { r.Method = "POST" }, "method: POST: a websocket upgrade is a GET"},
		{"tcp url", func(r *enginev1.ExecuteRequest) { r.Url = "tcp://127.0.0.1:9" }, "websocket: goes with an http or https url, not tcp"},
		{"upgrade header", func(r *enginev1.ExecuteRequest) {
			r.Headers = []*enginev1.Header{{Name: "Sec-WebSocket-Protocol", Value: "x"}}
		}, "headers[0]: Sec-WebSocket-Protocol is set by the engine"},
		{"streams", func(r *enginev1.ExecuteRequest) { r.Websocket.Streams = maxTCPConnections + 1 }, "websocket.streams: 10001 is more than 10000"},
	} {
		r := wsReq("refused", "http://127.0.0.1:9/ws", 1, 1, 1)
		tc.edit(r)
		if _, err := parseSpec(r, now, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
