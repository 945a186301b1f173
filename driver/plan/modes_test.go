package plan

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
)

// TestUndriven: the scenarios of valid-protocols.yaml with a grpc
// bidi-stream block or protocol http3 are named by Undriven, each at its
// place, and the http2, grpc unary and websocket ones are not; a plan of plain HTTP/1.1 has nothing undriven.
func TestUndriven(t *testing.T) {
	file := filepath.Join("testdata", "plans", "valid-protocols.yaml")
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Undriven()
	if err == nil {
		t.Fatal("Undriven() = nil for a plan with grpc bidi-stream scenarios")
	}
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var pe *Error
		if !errors.As(e, &pe) || pe.File != file || pe.Line < 1 || pe.Col < 1 {
			t.Fatalf("error without a position: %q", e)
		}
		got = append(got, strings.SplitN(pe.Msg, ":", 2)[0])
	}
	// grpc unary is driven; bidi-stream is not yet.
	want := []string{"scenario grpc-bidi", "scenario grpc-bidi-default-streams", "scenario h3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("undriven scenarios (-want +got):\n%s", diff)
	}
	if !strings.Contains(err.Error(), "valid-protocols.yaml:36:11: scenario grpc-bidi: the grpc block (mode bidi-stream) is valid, but this engine drives gRPC unary only") {
		t.Errorf("message: %v", err)
	}

	plain, err := Load(filepath.Join("testdata", "plans", "valid-defaults.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Undriven(); err != nil {
		t.Errorf("Undriven() of an http1 plan = %v", err)
	}
}

// TestProtocolRequests: protocol http2 reaches the engine request with its
// max_concurrent_streams; grpc implies http2 and POST; http1 leaves both
// unset.
func TestProtocolRequests(t *testing.T) {
	p, err := Load(filepath.Join("testdata", "plans", "valid-protocols.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(p.Placeholders())
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Proto   enginev1.Protocol
		Streams uint32
		Method  string
	}
	want := map[string]got{
		"h2":         {enginev1.Protocol_HTTP2, 100, "GET"},
		"h2-tls":     {enginev1.Protocol_HTTP2, 0, "GET"},
		"grpc-unary": {enginev1.Protocol_HTTP2, 0, "POST"},
		"ws":         {enginev1.Protocol_HTTP1, 0, "GET"},
	}
	for _, cs := range c.Scenarios {
		w, ok := want[cs.Name]
		if !ok {
			continue
		}
		for _, req := range cs.Stages[0].Executions[0].Requests {
			g := got{req.GetProtocol(), req.GetMaxConcurrentStreams(), req.GetMethod()}
			if g != w {
				t.Errorf("%s: request %+v, want %+v", cs.Name, g, w)
			}
		}
	}
}
