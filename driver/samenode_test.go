package driver

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
)

// nodeStub answers Info with a node name and Attach with one error (nil:
// the engine holds the execution).
type nodeStub struct {
	enginev1.EngineClient
	node   string
	attach error
}

func (s nodeStub) Info(context.Context, *enginev1.InfoRequest, ...grpc.CallOption) (*enginev1.InfoResponse, error) {
	return &enginev1.InfoResponse{BackendName: s.node}, nil
}

func (s nodeStub) Attach(context.Context, *enginev1.AttachRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[enginev1.ExecuteEvent], error) {
	if s.attach != nil {
		return nil, s.attach
	}
	return heldStream{}, nil
}

type heldStream struct {
	grpc.ServerStreamingClient[enginev1.ExecuteEvent]
}

func (heldStream) Recv() (*enginev1.ExecuteEvent, error) { return &enginev1.ExecuteEvent{}, nil }

// TestSameNode: only an engine of the node that says it does not hold the
// execution takes up the schedule; one that is going away (it answers
// Info, then refuses calls while it drains) is looked at again later, not
// the end of the wait; one that cannot say ends it.
func TestSameNode(t *testing.T) {
	r := &runner{opts: testOptions()}
	c := &call{backendName: "node-b", id: "x", ctx: context.Background()}
	tests := []struct {
		name   string
		stub   nodeStub
		want   error // a sentinel, or nil
		others bool  // any error that is not a sentinel: the wait ends
	}{
		{"came back", nodeStub{node: "node-b", attach: status.Error(codes.NotFound, "no such execution")}, nil, false},
		{"still holds it", nodeStub{node: "node-b"}, errHolds, false},
		{"another node", nodeStub{node: "node-a", attach: status.Error(codes.NotFound, "")}, errNotNode, false},
		{"draining", nodeStub{node: "node-b", attach: status.Error(codes.Unavailable, "transport is closing")}, errNotNode, false},
		{"slow", nodeStub{node: "node-b", attach: status.Error(codes.DeadlineExceeded, "")}, errNotNode, false},
		{"cannot say", nodeStub{node: "node-b", attach: status.Error(codes.Unimplemented, "unknown method Attach")}, nil, true},
	}
	for _, tt := range tests {
		err := r.sameNode(c, c.id, tt.stub)
		switch {
		case tt.others:
			if err == nil || errors.Is(err, errNotNode) || errors.Is(err, errHolds) {
				t.Errorf("%s: %v, want an error that ends the wait", tt.name, err)
			}
		case !errors.Is(err, tt.want) || (tt.want == nil && err != nil):
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}
