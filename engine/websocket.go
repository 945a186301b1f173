package engine

// WebSocket echo mode: the TCP echo mode's connections (tcpConns), each
// upgraded with an HTTP/1.1 GET before the first message is due, every
// message one masked data frame, every echo one data message read back
// through wsframe. Counters: benchmark.stream_* (record.StreamDetails).

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/wsframe"
)

// Limits of the WebSocket mode.
const (
	// maxWSMessage bounds a message, the body sent and any message read.
	maxWSMessage = 1 << 20
	// maxHandshake bounds the upgrade's response head.
	maxHandshake = 16 << 10
)

type wsSpec struct {
	streams, maxInflight int
	drain                time.Duration
	op                   byte // wsframe.OpText or wsframe.OpBinary
	// head is the upgrade request less its key and final CRLF.
	head []byte
}

// parseWebSocket reads the websocket settings of an http(s) url into s.
func parseWebSocket(req *enginev1.ExecuteRequest, u *url.URL, s *spec) error {
	var errs []error
	o := req.GetWebsocket()
	s.mode = modeWS
	s.message = req.GetBody()
	ws := &wsSpec{streams: int(o.GetStreams()), maxInflight: int(o.GetMaxInflightPerStream()), op: wsframe.OpText}
	if o.GetBinary() {
		ws.op = wsframe.OpBinary
	}
	if ws.streams == 0 {
		ws.streams = enginev1.DefaultStreamsPerWorker
	}
	if ws.maxInflight == 0 {
		ws.maxInflight = enginev1.DefaultStreamMaxInflight
	}
	if ws.streams > maxTCPConnections {
		errs = append(errs, fieldErr("websocket.streams", "%d is more than %d", ws.streams, maxTCPConnections))
	}
	if ws.maxInflight > maxInflight {
		errs = append(errs, fieldErr("websocket.max_inflight_per_stream", "%d is more than %d", ws.maxInflight, maxInflight))
	}
	d, err := durationField("websocket.drain_duration", o.GetDrainDuration(), enginev1.DefaultStreamDrain)
	errs = append(errs, err)
	ws.drain = d
	if req.GetProtocol() != enginev1.Protocol_HTTP1 {
		errs = append(errs, fieldErr("websocket", "requires protocol HTTP1"))
	}
	if m := req.GetMethod(); m != "" && m != "GET" {
		errs = append(errs, fieldErr("method", "%s: a websocket upgrade is a GET", m))
	}
	if req.GetGrpc() != nil {
		errs = append(errs, fieldErr("websocket", "and grpc are mutually exclusive"))
	}
	if len(s.message) == 0 || len(s.message) > maxWSMessage {
		errs = append(errs, fieldErr("body", "is %d bytes; a websocket message is 1 to %d, matched against its echo", len(s.message), maxWSMessage))
	}
	for i, h := range req.GetHeaders() {
		switch n := strings.ToLower(h.GetName()); {
		case n == "upgrade" || n == "connection" || strings.HasPrefix(n, "sec-websocket-"):
			errs = append(errs, fieldErr(fmt.Sprintf("headers[%d]", i), "%s is set by the engine for the upgrade", h.GetName()))
		}
	}
	head, _, err := buildRequest(&enginev1.ExecuteRequest{Method: "GET", Headers: req.GetHeaders()}, u)
	errs = append(errs, err)
	if err == nil {
		ws.head = head[:len(head)-2]
	}
	s.ws = ws
	return errors.Join(errs...)
}

// errUpgradeRejected: the server did not answer the upgrade with a 101
// carrying the right Sec-WebSocket-Accept.
var errUpgradeRejected = errors.New("websocket upgrade rejected")

// upgrade sends the upgrade request on nc and reads the answer, within
// deadline. The reader it returns holds what followed the 101's head.
func upgrade(nc net.Conn, ws *wsSpec, deadline time.Time) (*bufio.Reader, error) {
	var k [16]byte
	_, _ = rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	req := append(append([]byte(nil), ws.head...),
		"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "+key+"\r\n\r\n"...)
	_ = nc.SetDeadline(deadline)
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(req); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 16<<10)
	status, hdr, err := readHead(br)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 101 ") && status != "HTTP/1.1 101" ||
		!strings.EqualFold(hdr["upgrade"], "websocket") ||
		!strings.Contains(strings.ToLower(hdr["connection"]), "upgrade") ||
		hdr["sec-websocket-accept"] != wsframe.AcceptKey(key) {
		return nil, fmt.Errorf("%w: %q", errUpgradeRejected, status)
	}
	return br, nil
}

// readHead reads a response head: its status line and its fields (names
// lowercased, the last of a repeated name kept), at most maxHandshake
// bytes.
func readHead(br *bufio.Reader) (string, map[string]string, error) {
	var status string
	hdr := map[string]string{}
	for n := 0; ; {
		line, err := br.ReadSlice('\n')
		n += len(line)
		if err != nil {
			if err == bufio.ErrBufferFull || n > maxHandshake {
				return "", nil, fmt.Errorf("%w: response head longer than %d bytes", errUpgradeRejected, maxHandshake)
			}
			return "", nil, err
		}
		if n > maxHandshake {
			return "", nil, fmt.Errorf("%w: response head longer than %d bytes", errUpgradeRejected, maxHandshake)
		}
		l := strings.TrimRight(string(line), "\r\n")
		switch {
		case status == "":
			status = l
		case l == "":
			return status, hdr, nil
		default:
			if name, value, ok := strings.Cut(l, ":"); ok {
				hdr[strings.ToLower(strings.TrimSpace(name))] = strings.TrimSpace(value)
			}
		}
	}
}

// frames appends to dst n data frames of the message, each masked with a
// key of its own (RFC 6455 section 5.3).
func (c *tcpConn) frames(dst []byte, n int) []byte {
	msg, op := c.t.w.spec.message, c.t.ws.op
	var keys [64 * 4]byte
	for n > 0 {
		k := min(n, 64)
		_, _ = rand.Read(keys[:k*4])
		for i := range k {
			dst = wsframe.Append(dst, op, msg, (*[4]byte)(keys[i*4:i*4+4]))
		}
		n -= k
	}
	return dst
}

// errPeerClose: the peer sent a Close frame.
var errPeerClose = errors.New("websocket close frame from the peer")

// wsReadLoop matches echoes in order, one data message each: the message
// sent, of the same frame type, or stream_unexpected_message. A Close
// frame or the connection's end is stream_early_close, a frame the decoder
// refuses (or a message while nothing is in flight) stream_protocol_errors;
// pings and pongs are read and ignored.
func (c *tcpConn) wsReadLoop() {
	msg, want := c.t.w.spec.message, c.t.ws.op
	r := wsframe.NewReader(c.br, maxWSMessage, false)
	for {
		op, p, err := r.Next()
		var pe *wsframe.ProtocolError
		switch {
		case errors.As(err, &pe):
			c.protocolError()
			return
		case err != nil:
			c.fail(err)
			return
		case op == wsframe.OpClose:
			c.fail(errPeerClose)
			return
		case op == wsframe.OpPing || op == wsframe.OpPong:
			continue
		}
		now := c.t.w.now()
		c.mu.Lock()
		if len(c.inflight) == 0 {
			c.mu.Unlock()
			c.protocolError()
			return
		}
		due := c.inflight[0]
		c.inflight = c.inflight[1:]
		empty := len(c.inflight) == 0
		c.mu.Unlock()
		if !c.echoed(due, now, empty, op == want && string(p) == string(msg)) {
			return
		}
	}
}

// protocolError closes the connection for a frame it cannot take; what
// is in flight is lost. Counted now, with the first message in flight,
// or when the pacer next picks the connection.
func (c *tcpConn) protocolError() {
	c.mu.Lock()
	var first int64
	n := len(c.inflight)
	if n > 0 {
		first = c.inflight[0]
	} else {
		c.strayUncounted = true
	}
	c.mu.Unlock()
	if n > 0 {
		c.t.w.stats.detail(first, c.t.ids.stray, 1)
	}
	c.closeLocal(c.t.ids.lost)
}
