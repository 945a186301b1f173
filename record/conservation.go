package record

import (
	"fmt"
	"math/bits"
	"strings"
)

// InZeroFailureSet says a counter belongs to the zero-failure set: a class
// that must be zero for a clean run (4xx, 5xx, resets, connection failures,
// overflow, in-flight losses, request timeouts, requests dropped late), or one of the detail counters of such a
// class (stream_resets_*, pool_failure_*), or a connection's protocol
// error (bytes no request asked for); of a TCP execution every tcp_*
// counter but messages sent and received and connections opened, of a UDP
// one every udp_* counter but datagrams sent and received; of a WebSocket
// one every stream_* counter but messages sent and received and
// streams_opened; of a gRPC one
// grpc_error and every grpc_status.<code> but 0.
func InZeroFailureSet(name string) bool {
	switch name {
	case GRPCError:
		return true
	case GRPCStatusOK:
		return false
	case HTTP4xx, HTTP5xx, PoolConnectionFailure, PoolOverflow, InflightLost, RequestTimeout, LateDropped, ConnectionProtocolError:
		return true
	case TCPDeferred, TCPUnavailable, TCPEchoMismatch, TCPInflightLost, TCPDrainIncomplete, TCPConnectFailures, TCPConnectionClosed:
		return true
	case UDPLost, UDPSendErrors, UDPDeferred, UDPUnavailable, UDPUnexpected:
		return true
	case StreamDeferred, StreamUnavailable, StreamUnexpectedMessage, StreamInflightLost, StreamDrainIncomplete,
		StreamOpenFailures, StreamUpgradeRejected, StreamEarlyClose, StreamProtocolErrors:
		return true
	}
	return strings.HasPrefix(name, StreamResets) || strings.HasPrefix(name, GRPCStatusPrefix) || strings.HasPrefix(name, "benchmark.pool_failure_")
}

// FailuresOf lists, in the compatibility shape of failures[], every result
// with a non-zero counter of the zero-failure set, in result order.
func FailuresOf(results []BackendResult) []Failure {
	var out []Failure
	for _, r := range results {
		c := map[string]uint64{}
		for k, v := range r.Counters {
			if v > 0 && InZeroFailureSet(k) {
				c[k] = v
			}
		}
		if len(c) > 0 {
			out = append(out, Failure{Backend: r.Backend, Counters: c})
		}
	}
	return out
}

// AccountingError says a backend's result breaks the law every result of
// this project's engine keeps: planned = unsent + the sum of the outcome
// classes.
type AccountingError struct {
	// Backend names the backend: its node name when it has one, else its
	// address.
	Backend string
	// Planned, Unsent and Outcomes are the result's numbers; Outcomes is
	// the sum of the outcome classes. Overflow says that sum does not fit
	// in 64 bits.
	Planned, Unsent, Outcomes uint64
	// Gap is the sum of the result's gap_unsent counts.
	Gap      uint64
	Overflow bool
}

func (e *AccountingError) Error() string {
	if e.Overflow {
		return fmt.Sprintf("accounting: the outcome counters overflow 64 bits for %d planned on %s", e.Planned, e.Backend)
	}
	if e.Gap > 0 {
		return fmt.Sprintf("accounting: %d outcomes + %d unsent + %d gap_unsent for %d planned on %s", e.Outcomes, e.Unsent, e.Gap, e.Planned, e.Backend)
	}
	if e.Unsent > 0 {
		return fmt.Sprintf("accounting: %d outcomes + %d unsent for %d planned on %s", e.Outcomes, e.Unsent, e.Planned, e.Backend)
	}
	return fmt.Sprintf("accounting: %d outcomes for %d planned on %s", e.Outcomes, e.Planned, e.Backend)
}

// Diff is accounted minus planned: negative when requests are missing,
// positive when some were counted twice. It is 0 on overflow.
func (e *AccountingError) Diff() int64 {
	if e.Overflow {
		return 0
	}
	return int64(e.Outcomes+e.Unsent+e.Gap) - int64(e.Planned)
}

// GapCount is the sum of the result's gap_unsent counts, and whether it
// overflows 64 bits.
func (r BackendResult) GapCount() (uint64, bool) {
	var sum, c uint64
	over := false
	for _, g := range r.GapUnsent {
		sum, c = bits.Add64(sum, g.Count, 0)
		over = over || c != 0
	}
	return sum, over
}

// HasPlanned says the result carries the planned count: results of this
// project's engine do; those of the older stack do not, and the law cannot
// be checked on them.
func (r BackendResult) HasPlanned() bool { return r.Planned > 0 }

// Conserves checks planned = unsent + Σ outcome classes + Σ gap_unsent
// counts on a result that carries planned, and returns an
// *AccountingError when it does not hold. A result without planned (the
// older stack) is not checked: nil.
func (r BackendResult) Conserves() error {
	if !r.HasPlanned() {
		return nil
	}
	name := r.BackendName
	if name == "" {
		name = r.Backend
	}
	gap, over := r.GapCount()
	sum, c := bits.Add64(r.Unsent, gap, 0)
	over = over || c != 0
	outcomes, o := OutcomeSum(r.Counters)
	over = over || o
	sum, c = bits.Add64(sum, outcomes, 0)
	over = over || c != 0
	if !over && sum == r.Planned {
		return nil
	}
	return &AccountingError{Backend: name, Planned: r.Planned, Unsent: r.Unsent, Gap: gap, Outcomes: outcomes, Overflow: over}
}
