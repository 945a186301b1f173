package record

import "testing"

// TestGRPCLaw: a result with a grpc_status counter is summed by the gRPC
// law (its HTTP classes and resets are not added, they overlap the
// statuses), any other by the Outcomes; the zero-failure set takes every
// grpc status but 0, and grpc_error.
func TestGRPCLaw(t *testing.T) {
	for _, tc := range []struct {
		name           string
		c              map[string]uint64
		want, answered uint64
	}{
		{"http", map[string]uint64{HTTP2xx: 7, HTTP5xx: 2, StreamResets: 1}, 10, 9},
		{"grpc", map[string]uint64{HTTP2xx: 7, GRPCStatusOK: 7, GRPCStatusPrefix + "14": 2, GRPCError: 3,
			StreamResets: 1, GRPCStatusMissing: 1, PoolOverflow: 4, LateDropped: 1}, 15, 9},
		{"grpc, a 503 in its HTTP class", map[string]uint64{HTTP5xx: 1, GRPCStatusMissing: 1, GRPCError: 1, GRPCStatusOK: 2, HTTP2xx: 2}, 3, 3},
		{"grpc, a timeout", map[string]uint64{RequestTimeout: 2, GRPCStatusMissing: 2, GRPCError: 2, GRPCStatusOK: 1, HTTP2xx: 1}, 3, 1},
		{"grpc without a stream", map[string]uint64{PoolConnectionFailure: 5, InflightLost: 1}, 6, 0},
		{"tcp", map[string]uint64{TCPMessagesSent: 4, TCPDeferred: 1}, 5, 0},
	} {
		if got := Sum(tc.c); got != tc.want {
			t.Errorf("%s: Sum = %d, want %d", tc.name, got, tc.want)
		}
		// Answered: every call with an HTTP response, a failed gRPC call
		// answered 200 among them.
		if got := Answered(tc.c); got != tc.answered {
			t.Errorf("%s: Answered = %d, want %d", tc.name, got, tc.answered)
		}
		r := BackendResult{Backend: "b", Planned: tc.want, Counters: tc.c}
		if err := r.Conserves(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		r.Planned++
		if r.Conserves() == nil {
			t.Errorf("%s: one planned call counted nowhere conserves", tc.name)
		}
	}
	over := map[string]uint64{GRPCStatusOK: 1 << 63, GRPCStatusMissing: 1 << 63}
	if _, o := OutcomeSum(over); !o {
		t.Error("OutcomeSum did not report the overflow")
	}
	for name, want := range map[string]bool{
		GRPCError: true, GRPCStatusMissing: true, GRPCStatusPrefix + "14": true, GRPCStatusPrefix + "1": true,
		GRPCStatusOK: false,
	} {
		if got := InZeroFailureSet(name); got != want {
			t.Errorf("InZeroFailureSet(%s) = %v, want %v", name, got, want)
		}
	}
}
