package record

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

// Outcomes lists the outcome classes whose sum is the number of planned
// requests (principle 1 of the architecture).
var Outcomes = []string{
	HTTP1xx, HTTP2xx, HTTP3xx, HTTP4xx, HTTP5xx,
	StreamResets, PoolConnectionFailure, PoolFailureTimeout, PoolOverflow,
	InflightLost, RequestTimeout, LateDropped,
}

// Statistic ids.
const (
	Latency2xx        = "benchmark_http_client.latency_2xx"
	LatencyPrefix     = "benchmark_http_client.latency_" // + 1xx, 3xx, 4xx, 5xx
	RequestToResponse = "benchmark_http_client.request_to_response"
	QueueToConnect    = "benchmark_http_client.queue_to_connect"
	SendLateness      = "benchmark_http_client.send_lateness"
)

// Sum adds the outcome classes of a counter map.
func Sum(c map[string]uint64) uint64 {
	var n uint64
	for _, k := range Outcomes {
		n += c[k]
	}
	return n
}
