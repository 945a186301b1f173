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

func TestRefusedTarget(t *testing.T) {
	info := func(reason string) *errdetails.ErrorInfo {
		return &errdetails.ErrorInfo{Domain: ErrorDomain, Reason: reason, Metadata: map[string]string{MetadataField: FieldURL, MetadataTarget: "evil.example"}}
	}
	tests := []struct {
		name          string
		err           error
		field, target string
		ok            bool
	}{
		{"the engine's refusal", TargetRefusal(FieldStatsAddress, "10.0.0.1:8125", "not allowed"), FieldStatsAddress, "10.0.0.1:8125", true},
		{"words without the detail", status.Error(codes.PermissionDenied, "target host is not in --allow-targets"), "", "", false},
		{"the cap's detail", withInfo(t, codes.PermissionDenied, info(ReasonExecutionCap)), "", "", false},
		{"another code", withInfo(t, codes.InvalidArgument, info(ReasonTargetNotAllowed)), "", "", false},
		{"the detail", withInfo(t, codes.PermissionDenied, info(ReasonTargetNotAllowed)), FieldURL, "evil.example", true},
		{"nil", nil, "", "", false},
	}
	for _, tt := range tests {
		field, target, ok := RefusedTarget(tt.err)
		if field != tt.field || target != tt.target || ok != tt.ok {
			t.Errorf("%s: RefusedTarget = %q, %q, %v; want %q, %q, %v", tt.name, field, target, ok, tt.field, tt.target, tt.ok)
		}
	}
	if st := status.Convert(TargetRefusal(FieldURL, "x", "msg")); st.Code() != codes.PermissionDenied || st.Message() != "msg" {
		t.Errorf("TargetRefusal status = %v", st)
	}
}
