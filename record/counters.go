package record

import (
	"math/bits"
	"strings"
)

// The benchmark.* counters and statistics that the engine produces and the
// driver and gate read. The names are part of the compatibility contract
// and never change.

// Outcome classes: every request the plan asked for lands in exactly one.
const (
	HTTP1xx               = "benchmark.http_1xx"
	HTTP2xx               = "benchmark.http_2xx"
	HTTP3xx               = "benchmark.http_3xx"
	HTTP4xx               = "benchmark.http_4xx"
	HTTP5xx               = "benchmark.http_5xx"
	StreamResets          = "benchmark.stream_resets"
	PoolConnectionFailure = "benchmark.pool_connection_failure"
	PoolFailureTimeout    = "benchmark.pool_failure_timeout"
	PoolOverflow          = "benchmark.pool_overflow"
	InflightLost          = "benchmark.http_inflight_lost"
	// RequestTimeout: a request written on a connection whose response
	// had not ended when the plan's request_timeout had passed since; the
	// engine closed the connection.
	RequestTimeout = "benchmark.request_timeout"
	// LateDropped: a request that fell due while the engine was more than
	// the plan's max_lateness behind its schedule (a frozen or starved
	// engine catching up); it was never sent.
	LateDropped = "benchmark.late_dropped"
)

// Detail counters overlap the outcome classes by design and are never added
// to them.
const (
	// A connection failure is also one of these two.
	PoolFailureLocal  = "benchmark.pool_failure_local_connection_failure"
	PoolFailureRemote = "benchmark.pool_failure_remote_connection_failure"
	// A reset is also in one phase counter ...
	ResetsBeforeHeaders  = "benchmark.stream_resets_before_headers"
	ResetsIncompleteBody = "benchmark.stream_resets_incomplete_body"
	// ... and one reason counter, StreamResetsPrefix + reason.
	StreamResetsPrefix = "benchmark.stream_resets_"
	// Requests sent later than their due time by more than the engine's
	// lateness tolerance (pacing accuracy; not an outcome).
	LateSends = "benchmark.late_sends"
	// Connections closed because they received bytes while no request
	// was in flight (stray bytes after a response, an unsolicited
	// response on an idle connection): a protocol error of the
	// connection, not of any request, so in no outcome class. The name
	// is Envoy's upstream_cx_protocol_error in this namespace.
	ConnectionProtocolError = "benchmark.connection_protocol_error"
)

// Reasons of a reset, appended to StreamResetsPrefix.
const (
	ReasonConnectionTermination = "connection_termination" // FIN from the peer
	ReasonRemoteReset           = "remote_reset"           // RST from the peer
	ReasonProtocolError         = "protocol_error"         // unparseable response
	ReasonLocalReset            = "local_reset"            // the engine closed it (cancel, timeout)
	ReasonOverflow              = "overflow"               // response larger than the engine accepts
)

// Raw TCP echo counters (a tcp:// or tcps:// execution), the names of the
// sortie + Nighthawk stack.
//
// Conservation of a TCP execution: every message due is written or dropped,
//
//	planned = tcp_messages_sent + tcp_deferred + tcp_unavailable (+ late_dropped + unsent)
//
// and, when the peer is expected to echo, every message written has exactly
// one fate,
//
//	tcp_messages_sent = tcp_messages_received + tcp_echo_mismatch + tcp_inflight_lost + tcp_drain_incomplete.
//
// Without an echo a message is done once written, and tcp_inflight_lost
// counts the writes that failed (they are in tcp_messages_sent too).
const (
	// TCPMessagesSent: messages written (or whose write failed).
	TCPMessagesSent = "benchmark.tcp_messages_sent"
	// TCPDeferred: a message due on a connection that held
	// max_inflight_per_connection unanswered ones; not sent.
	TCPDeferred = "benchmark.tcp_deferred"
	// TCPUnavailable: a message due on a connection that is not open (it
	// never opened, or the peer closed it); not sent.
	TCPUnavailable = "benchmark.tcp_unavailable"
	// TCPMessagesReceived: messages whose echo came back, byte for byte.
	TCPMessagesReceived = "benchmark.tcp_messages_received"
	// TCPEchoMismatch: a message's worth of bytes came back that is not the
	// message; the connection is closed.
	TCPEchoMismatch = "benchmark.tcp_echo_mismatch"
	// TCPInflightLost: messages written on a connection that closed (or
	// failed the write) before their echo.
	TCPInflightLost = "benchmark.tcp_inflight_lost"
	// TCPDrainIncomplete: messages still unanswered when the drain ended.
	TCPDrainIncomplete = "benchmark.tcp_drain_incomplete"
	// Connection events, in no outcome class.
	TCPConnectionsOpened = "benchmark.tcp_connections_opened"
	TCPConnectFailures   = "benchmark.tcp_connect_failures"
	// TCPConnectionClosed: the peer closed (or reset) a connection in use.
	TCPConnectionClosed = "benchmark.tcp_connection_closed"
)

// WebSocket echo counters (an execution with websocket settings), the
// names of the sortie + Nighthawk stack's WebSocket stream client.
//
// Conservation of a WebSocket execution: every message due is sent or
// dropped,
//
//	planned = stream_messages_sent + stream_deferred + stream_unavailable (+ late_dropped + unsent)
//
// and every message sent has exactly one fate,
//
//	stream_messages_sent = stream_messages_received + stream_unexpected_message + stream_inflight_lost + stream_drain_incomplete.
//
// streams_opened, stream_open_failures, stream_upgrade_rejected,
// stream_early_close and stream_protocol_errors count connections, not
// messages. The older stack's stream_resets is not counted in this mode:
// here it is the HTTP outcome class, and a reset connection is
// stream_early_close with its messages stream_inflight_lost.
const (
	StreamsOpened      = "benchmark.streams_opened"
	StreamOpenFailures = "benchmark.stream_open_failures"
	// StreamUpgradeRejected: the server answered the Upgrade with anything
	// but a 101 carrying the right Sec-WebSocket-Accept.
	StreamUpgradeRejected = "benchmark.stream_upgrade_rejected"
	// StreamMessagesSent: data frames handed to the connection's writer.
	StreamMessagesSent = "benchmark.stream_messages_sent"
	// StreamMessagesReceived: messages whose echo came back, byte for byte.
	StreamMessagesReceived = "benchmark.stream_messages_received"
	// StreamDeferred: a message due on a connection holding
	// max_inflight_per_stream unanswered; not sent, never queued.
	StreamDeferred = "benchmark.stream_deferred"
	// StreamUnavailable: a message due on a connection that is not open.
	StreamUnavailable = "benchmark.stream_unavailable"
	// StreamEarlyClose: the peer closed, reset or sent a Close frame on a
	// connection before the engine closed it.
	StreamEarlyClose = "benchmark.stream_early_close"
	// StreamUnexpectedMessage: an echo that is not the message sent.
	StreamUnexpectedMessage = "benchmark.stream_unexpected_message"
	// StreamProtocolErrors: a frame the decoder refused, or a data frame
	// while nothing was in flight; the connection is closed.
	StreamProtocolErrors = "benchmark.stream_protocol_errors"
	// StreamInflightLost: messages sent on a connection that ended.
	StreamInflightLost = "benchmark.stream_inflight_lost"
	// StreamDrainIncomplete: messages still unanswered when the drain ended.
	StreamDrainIncomplete = "benchmark.stream_drain_incomplete"
)

// StreamDetails are the WebSocket counters that are not outcome classes.
var StreamDetails = []string{
	StreamMessagesReceived, StreamUnexpectedMessage, StreamInflightLost, StreamDrainIncomplete,
	StreamsOpened, StreamOpenFailures, StreamUpgradeRejected, StreamEarlyClose, StreamProtocolErrors,
}

// UDP echo counters (a udp:// execution), the names of the sortie +
// Nighthawk stack.
//
// Conservation of a UDP execution: every datagram due has exactly one fate,
//
//	planned = udp_datagrams_received + udp_lost + udp_send_errors + udp_deferred + udp_unavailable (+ late_dropped + unsent)
//
// and udp_datagrams_sent = udp_datagrams_received + udp_lost.
const (
	UDPDatagramsSent = "benchmark.udp_datagrams_sent"
	// UDPDatagramsReceived: datagrams whose echo (same sequence number and
	// body) came back in time.
	UDPDatagramsReceived = "benchmark.udp_datagrams_received"
	// UDPLost: datagrams unanswered for the udp timeout (or when the
	// execution ended).
	UDPLost = "benchmark.udp_lost"
	// UDPSendErrors: datagrams the socket refused to send.
	UDPSendErrors = "benchmark.udp_send_errors"
	// UDPDeferred: a datagram due while max_inflight were unanswered; not
	// sent.
	UDPDeferred = "benchmark.udp_deferred"
	// UDPUnavailable: a datagram due while the worker had no socket.
	UDPUnavailable = "benchmark.udp_unavailable"
	// UDPUnexpected: a datagram that matches no datagram outstanding (a
	// duplicate, a late echo, or not an echo); in no outcome class.
	UDPUnexpected = "benchmark.udp_unexpected"
)

// gRPC unary counters (an execution with grpc mode unary), the names of
// the sortie + Nighthawk stack. Every call that got a stream (an answer, a
// reset, a request timeout) counts exactly one grpc_status.<code>: the
// grpc-status it ended with, 0..16, or missing when it had none (a reset,
// a timeout, an answer without the field or with one that is not a code
// of 0..16). Any status but 0 is also a grpc_error. A call answered with
// HTTP 2xx is http_2xx only when its status is 0; other HTTP classes are
// counted as ever. So the conservation of a gRPC execution is
//
//	planned = Σ grpc_status.* + pool_connection_failure + pool_failure_timeout
//	        + pool_overflow + http_inflight_lost + late_dropped (+ unsent)
//
// (GRPCOutcomes), and OutcomeSum reads a result by it when it has any
// grpc_status counter.
const (
	// GRPCStatusPrefix + "0".."16" or GRPCStatusMissing.
	GRPCStatusPrefix  = "benchmark.grpc_status."
	GRPCStatusOK      = GRPCStatusPrefix + "0"
	GRPCStatusMissing = GRPCStatusPrefix + "missing"
	// GRPCError: a call whose grpc-status is not 0 (or missing).
	GRPCError = "benchmark.grpc_error"
)

// GRPCMaxStatus is the largest gRPC status code (UNAUTHENTICATED).
const GRPCMaxStatus = 16

// GRPCStreamless are the outcome classes of a gRPC call that never had a
// stream, so no grpc_status.
var GRPCStreamless = []string{PoolConnectionFailure, PoolFailureTimeout, PoolOverflow, InflightLost, LateDropped}

// IsGRPC says a counter map is a gRPC execution's: it has a grpc_status
// counter. One without any had no call with a stream, and then both laws
// agree (its HTTP classes, resets and timeouts are all zero).
func IsGRPC(c map[string]uint64) bool {
	for k, v := range c {
		if v > 0 && strings.HasPrefix(k, GRPCStatusPrefix) {
			return true
		}
	}
	return false
}

// OutcomeSum sums the outcome classes of c by the law of its mode: of a
// gRPC execution Σ grpc_status.* and GRPCStreamless, of any other the
// Outcomes. The bool says the sum overflowed 64 bits.
func OutcomeSum(c map[string]uint64) (uint64, bool) {
	var n, carry uint64
	over := false
	add := func(v uint64) {
		n, carry = bits.Add64(n, v, 0)
		over = over || carry != 0
	}
	if !IsGRPC(c) {
		for _, k := range Outcomes {
			add(c[k])
		}
		return n, over
	}
	for k, v := range c {
		if strings.HasPrefix(k, GRPCStatusPrefix) {
			add(v)
		}
	}
	for _, k := range GRPCStreamless {
		add(c[k])
	}
	return n, over
}

// Outcomes lists the outcome classes whose sum is the number of planned
// requests (principle 1 of the architecture): an HTTP execution's, a TCP
// execution's, a UDP execution's and a WebSocket execution's (each mode
// counts none of the others').
var Outcomes = []string{
	HTTP1xx, HTTP2xx, HTTP3xx, HTTP4xx, HTTP5xx,
	StreamResets, PoolConnectionFailure, PoolFailureTimeout, PoolOverflow,
	InflightLost, RequestTimeout, LateDropped,
	TCPMessagesSent, TCPDeferred, TCPUnavailable,
	UDPDatagramsReceived, UDPLost, UDPSendErrors, UDPDeferred, UDPUnavailable,
	StreamMessagesSent, StreamDeferred, StreamUnavailable,
}

// TCPDetails are the TCP counters that are not outcome classes: the fate
// of a message written, and the connection events.
var TCPDetails = []string{
	TCPMessagesReceived, TCPEchoMismatch, TCPInflightLost, TCPDrainIncomplete,
	TCPConnectionsOpened, TCPConnectFailures, TCPConnectionClosed,
}

// UDPDetails are the UDP counters that are not outcome classes.
var UDPDetails = []string{UDPDatagramsSent, UDPUnexpected}

// Statistic ids.
const (
	Latency2xx        = "benchmark_http_client.latency_2xx"
	LatencyPrefix     = "benchmark_http_client.latency_" // + 1xx, 3xx, 4xx, 5xx
	RequestToResponse = "benchmark_http_client.request_to_response"
	QueueToConnect    = "benchmark_http_client.queue_to_connect"
	SendLateness      = "benchmark_http_client.send_lateness"
	// TCPMessageLatency and UDPMessageLatency run from each message's due
	// time to its echo.
	TCPMessageLatency = "benchmark_tcp.message_latency"
	UDPMessageLatency = "benchmark_udp.message_latency"
	// StreamMessageLatency: a WebSocket message's, from its due time to
	// its echo.
	StreamMessageLatency = "benchmark_stream.message_latency"
	// LatencyGRPCOK: latency of the gRPC calls that ended with
	// grpc-status 0, from their due time.
	LatencyGRPCOK = "benchmark_http_client.latency_grpc_ok"
)

// Succeeded is how many of a result's requests or messages succeeded, in
// whichever mode it ran: http_2xx; of a TCP execution the messages sent
// that were neither mismatched, lost nor left at the drain (with an echo,
// those echoed; without, those written); of a UDP execution the datagrams
// echoed; of a WebSocket one the messages echoed. It is what a count floor holds a result to.
func Succeeded(c map[string]uint64) uint64 {
	tcp := c[TCPMessagesSent]
	for _, k := range []string{TCPEchoMismatch, TCPInflightLost, TCPDrainIncomplete} {
		tcp -= min(tcp, c[k])
	}
	return c[HTTP2xx] + tcp + c[UDPDatagramsReceived] + c[StreamMessagesReceived]
}

// succeeding are the outcome classes Succeeded reads.
var succeeding = map[string]bool{HTTP2xx: true, TCPMessagesSent: true, UDPDatagramsReceived: true, StreamMessagesSent: true}

// Succeeding says an outcome class counts successes (see Succeeded).
func Succeeding(class string) bool { return succeeding[class] }

// httpClasses are the outcome classes of an HTTP response.
var httpClasses = map[string]bool{HTTP1xx: true, HTTP2xx: true, HTTP3xx: true, HTTP4xx: true, HTTP5xx: true}

// Answered is how many of a result's requests or calls got an HTTP
// response: its outcome sum by the law of its mode (OutcomeSum) less the
// outcome classes of no response (resets, timeouts, the stream-less
// classes, TCP and UDP). Of an HTTP execution that is its HTTP classes; of
// a gRPC execution every call with a grpc_status but a reset or a request
// timeout, so a failed call answered 200, in no HTTP class, is in it.
func Answered(c map[string]uint64) uint64 {
	n := Sum(c)
	for _, k := range Outcomes {
		if !httpClasses[k] {
			n -= min(n, c[k])
		}
	}
	return n
}

// Sum adds the outcome classes of a counter map, by the law of its mode
// (OutcomeSum).
func Sum(c map[string]uint64) uint64 {
	n, _ := OutcomeSum(c)
	return n
}
