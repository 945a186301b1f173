package enginev1

import (
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func withInfo(t *testing.T, code codes.Code, info *errdetails.ErrorInfo) error {
	t.Helper()
	st, err := status.New(code, "refused").WithDetails(info)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestRefusedAtCap(t *testing.T) {
	capInfo := func(limit string) *errdetails.ErrorInfo {
		return &errdetails.ErrorInfo{Domain: ErrorDomain, Reason: ReasonExecutionCap, Metadata: map[string]string{MetadataMaxConcurrentExecutions: limit}}
	}
	tests := []struct {
		name  string
		err   error
		limit uint32
		ok    bool
	}{
		{"the engine's refusal", CapRefusal(16, "engine is at its cap of 16"), 16, true},
		{"a cap it cannot parse", withInfo(t, codes.ResourceExhausted, capInfo("many")), 0, true},
		// gRPC's own RESOURCE_EXHAUSTED, for a message over its limit.
		{"message too large", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000000 vs. 4194304)"), 0, false},
		{"words without the detail", status.Error(codes.ResourceExhausted, "engine is at its cap of 16 concurrent executions"), 0, false},
		{"another domain", withInfo(t, codes.ResourceExhausted, &errdetails.ErrorInfo{Domain: "example.com", Reason: ReasonExecutionCap}), 0, false},
		{"another code", withInfo(t, codes.Unavailable, capInfo("16")), 0, false},
		{"not a status", errors.New("too many open files"), 0, false},
		{"nil", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit, ok := RefusedAtCap(tt.err)
			if limit != tt.limit || ok != tt.ok {
				t.Errorf("RefusedAtCap(%v) = %d, %v, want %d, %v", tt.err, limit, ok, tt.limit, tt.ok)
			}
		})
	}
	if st := status.Convert(CapRefusal(2, "at the cap")); st.Code() != codes.ResourceExhausted || st.Message() != "at the cap" {
		t.Errorf("CapRefusal status = %v", st)
	}
}
