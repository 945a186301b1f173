package enginev1

import (
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A start refused at the engine's cap of concurrent executions is the one
// RESOURCE_EXHAUSTED an engine returns, and it says so in a typed detail
// (a google.rpc.ErrorInfo in ErrorDomain with reason ReasonExecutionCap,
// the cap in its metadata) besides its message: a driver tells it from
// gRPC's own RESOURCE_EXHAUSTED (a message over the size limit) without
// reading English. Any other failure to start an execution is UNAVAILABLE.
const (
	// ErrorDomain is the ErrorInfo domain of the engine's refusals.
	ErrorDomain = "sortie.engine.v1"
	// ReasonExecutionCap is the ErrorInfo reason of a start refused at
	// the cap.
	ReasonExecutionCap = "EXECUTION_CAP"
	// MetadataMaxConcurrentExecutions is the metadata key of the cap, in
	// decimal.
	MetadataMaxConcurrentExecutions = "max_concurrent_executions"
)

// CapRefusal is the status error of a start refused at a cap of limit
// concurrent executions: RESOURCE_EXHAUSTED with msg, for people, and the
// ErrorInfo detail, for programs.
func CapRefusal(limit uint32, msg string) error {
	st := status.New(codes.ResourceExhausted, msg)
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   ReasonExecutionCap,
		Domain:   ErrorDomain,
		Metadata: map[string]string{MetadataMaxConcurrentExecutions: strconv.FormatUint(uint64(limit), 10)},
	})
	if err != nil {
		// WithDetails fails only for an OK status or a detail that does
		// not marshal; neither is possible here.
		return st.Err()
	}
	return withInfo.Err()
}

// RefusedAtCap reports whether err is an engine's refusal of a start at its
// cap of concurrent executions, and the cap it gave (0 if it gave none it
// could parse). A RESOURCE_EXHAUSTED without the detail is not one.
func RefusedAtCap(err error) (uint32, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != ErrorDomain || info.GetReason() != ReasonExecutionCap {
			continue
		}
		limit, err := strconv.ParseUint(info.GetMetadata()[MetadataMaxConcurrentExecutions], 10, 32)
		if err != nil {
			return 0, true
		}
		return uint32(limit), true
	}
	return 0, false
}

// An execution aimed outside the engine's --allow-targets is refused with
// PERMISSION_DENIED and an ErrorInfo detail of reason ReasonTargetNotAllowed
// naming the field (FieldURL or FieldStatsAddress) and the host or
// address refused, before anything of it is built or sent.
const (
	// ReasonTargetNotAllowed is the ErrorInfo reason of a target outside
	// the allowlist.
	ReasonTargetNotAllowed = "TARGET_NOT_ALLOWED"
	// MetadataField and MetadataTarget are its metadata keys: the request
	// field and the host (url) or address (stats.address) refused.
	MetadataField  = "field"
	MetadataTarget = "target"
	// FieldURL and FieldStatsAddress are the fields an allowlist checks.
	FieldURL          = "url"
	FieldStatsAddress = "stats.address"
)

// TargetRefusal is the status error of an execution whose field names a
// target outside the allowlist: PERMISSION_DENIED with msg, for people,
// and the ErrorInfo detail, for programs.
func TargetRefusal(field, target, msg string) error {
	st := status.New(codes.PermissionDenied, msg)
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   ReasonTargetNotAllowed,
		Domain:   ErrorDomain,
		Metadata: map[string]string{MetadataField: field, MetadataTarget: target},
	})
	if err != nil {
		return st.Err()
	}
	return withInfo.Err()
}

// RefusedTarget reports whether err is an engine's refusal of a target
// outside its allowlist, and the field and target it named.
func RefusedTarget(err error) (field, target string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.PermissionDenied {
		return "", "", false
	}
	for _, d := range st.Details() {
		info, isInfo := d.(*errdetails.ErrorInfo)
		if isInfo && info.GetDomain() == ErrorDomain && info.GetReason() == ReasonTargetNotAllowed {
			return info.GetMetadata()[MetadataField], info.GetMetadata()[MetadataTarget], true
		}
	}
	return "", "", false
}
