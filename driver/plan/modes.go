package plan

// The protocol modes of a scenario beyond plain HTTP/1.1: protocol http2 (and
// the http3 spelling the sortie + Nighthawk schema accepts), its
// max_concurrent_streams, and the grpc and websocket blocks. Their fields and
// rules are those of that schema, so that its plans validate unchanged: grpc
// means an HTTP/2 POST, websocket an HTTP/1.1 GET upgrade, and a stream count
// is spread evenly over the workers.

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Protocols a plan may name.
const (
	ProtocolHTTP1 = "http1"
	ProtocolHTTP2 = "http2"
	ProtocolHTTP3 = "http3"
)

// gRPC modes.
const (
	GRPCUnary      = "unary"
	GRPCBidiStream = "bidi-stream"
)

// DefaultStreams is the number of streams (bidi-stream) or connections
// (websocket) per backend when a plan sets none: the older engine's default,
// which the divisibility rule is checked against when streams is unset.
const DefaultStreams = 20

// GRPC is a scenario's grpc block.
type GRPC struct {
	// Mode is unary or bidi-stream.
	Mode string
	// Streams per backend (bidi-stream); DefaultStreams when unset.
	Streams uint32
	// MaxInflightPerStream: unanswered messages a stream may hold
	// (bidi-stream); 0 when unset.
	MaxInflightPerStream uint32
	// DrainDuration: how long to wait for outstanding echoes at the end
	// (bidi-stream); 0 when unset.
	DrainDuration time.Duration
}

// WebSocket is a scenario's websocket block.
type WebSocket struct {
	// Streams is the connections to upgrade per backend; DefaultStreams
	// when unset.
	Streams              uint32
	MaxInflightPerStream uint32
	DrainDuration        time.Duration
	// Binary sends the message as binary frames rather than text.
	Binary bool
}

type rawGRPC struct {
	at                   loc
	mode                 val[string]
	streams, maxInflight val[int64]
	drain                val[time.Duration]
}

type rawWebSocket struct {
	at                   loc
	streams, maxInflight val[int64]
	drain                val[time.Duration]
	binary               val[bool]
}

var grpcKeys = []string{"mode", "streams", "max_inflight_per_stream", "drain_duration"}

func (d *decoder) grpcBlock(n *yaml.Node, path string) val[*rawGRPC] {
	n = d.resolve(n)
	if isNull(n) {
		return val[*rawGRPC]{}
	}
	out := val[*rawGRPC]{set: true, at: d.at(n, path)}
	fs, ok := d.fields(n, path)
	if !ok {
		return out
	}
	g := &rawGRPC{at: out.at}
	for _, f := range fs {
		v, p := f.valueNode, path+"."+f.key
		switch f.key {
		case "mode":
			g.mode = d.str(v, p)
		case "streams":
			g.streams = d.integer(v, p)
		case "max_inflight_per_stream":
			g.maxInflight = d.integer(v, p)
		case "drain_duration":
			g.drain = d.duration(v, p)
		default:
			d.unknown(f, path, grpcKeys)
		}
	}
	out.v, out.ok = g, true
	return out
}

var websocketKeys = []string{"streams", "max_inflight_per_stream", "drain_duration", "binary"}

func (d *decoder) websocketBlock(n *yaml.Node, path string) val[*rawWebSocket] {
	n = d.resolve(n)
	if isNull(n) {
		return val[*rawWebSocket]{}
	}
	out := val[*rawWebSocket]{set: true, at: d.at(n, path)}
	fs, ok := d.fields(n, path)
	if !ok {
		return out
	}
	w := &rawWebSocket{at: out.at}
	for _, f := range fs {
		v, p := f.valueNode, path+"."+f.key
		switch f.key {
		case "streams":
			w.streams = d.integer(v, p)
		case "max_inflight_per_stream":
			w.maxInflight = d.integer(v, p)
		case "drain_duration":
			w.drain = d.duration(v, p)
		case "binary":
			w.binary = d.boolean(v, p)
		default:
			d.unknown(f, path, websocketKeys)
		}
	}
	out.v, out.ok = w, true
	return out
}

// protocol checks the protocol and max_concurrent_streams of rs into s.
func (b *builder) protocol(rs *rawScenario, s *Scenario) bool {
	ok := true
	s.Protocol = DefaultProtocol
	if rs.proto.set {
		switch {
		case !rs.proto.ok:
			ok = false
		case rs.proto.v != ProtocolHTTP1 && rs.proto.v != ProtocolHTTP2 && rs.proto.v != ProtocolHTTP3:
			b.fail(rs.proto.at, "protocol must be http1, http2 or http3, got %q", rs.proto.v)
			ok = false
		default:
			s.Protocol = rs.proto.v
		}
	}
	if v, good := b.uint32Field(rs.maxStreams, 1); good {
		s.MaxConcurrentStreams = v
	} else if rs.maxStreams.set {
		ok = false
	}
	return ok
}

// streamFields checks the fields a grpc and a websocket block share.
func (b *builder) streamFields(streams, maxInflight val[int64], drain val[time.Duration]) (uint32, uint32, time.Duration, bool) {
	ok := true
	n := uint32(DefaultStreams)
	if v, good := b.uint32Field(streams, 1); good {
		n = v
	} else if streams.set {
		ok = false
	}
	var inflight uint32
	if v, good := b.uint32Field(maxInflight, 1); good {
		inflight = v
	} else if maxInflight.set {
		ok = false
	}
	var d time.Duration
	switch {
	case !drain.set:
	case !drain.ok:
		ok = false
	case drain.v < 0:
		b.fail(drain.at, "drain_duration must not be negative, got %v", drain.v)
		ok = false
	default:
		d = drain.v
	}
	return n, inflight, d, ok
}

// modes checks the grpc and websocket blocks of rs into s, with the rules
// that tie them to the protocol, the method and the workers. Those rules
// read the scenario as defaults filled it, so they are skipped for the
// defaults on their own (isDefaults).
func (b *builder) modes(rs *rawScenario, s *Scenario, isDefaults bool) bool {
	ok := true
	if rs.grpc.set {
		if !rs.grpc.ok {
			ok = false
		} else if g, good := b.grpc(rs, s, isDefaults); good {
			s.GRPC = g
		} else {
			ok = false
		}
	}
	if rs.websocket.set {
		if !rs.websocket.ok {
			ok = false
		} else if ws, good := b.websocket(rs, s, isDefaults); good {
			s.WebSocket = ws
		} else {
			ok = false
		}
	}
	return ok
}

func (b *builder) grpc(rs *rawScenario, s *Scenario, isDefaults bool) (*GRPC, bool) {
	rg := rs.grpc.v
	g := &GRPC{}
	ok := true
	switch m := rg.mode; {
	case !m.set:
		b.fail(withPath(rg.at, "grpc"), "mode is required: unary or bidi-stream")
		ok = false
	case !m.ok:
		ok = false
	case m.v != GRPCUnary && m.v != GRPCBidiStream:
		b.fail(m.at, "grpc.mode must be unary or bidi-stream, got %q", m.v)
		ok = false
	default:
		g.Mode = m.v
	}
	var good bool
	g.Streams, g.MaxInflightPerStream, g.DrainDuration, good = b.streamFields(rg.streams, rg.maxInflight, rg.drain)
	ok = ok && good
	if g.Mode == GRPCUnary {
		for _, f := range []loc{rg.streams.at, rg.maxInflight.at, rg.drain.at} {
			if f.line != 0 {
				b.fail(f, "streams, max_inflight_per_stream and drain_duration apply to grpc.mode bidi-stream only")
				ok = false
			}
		}
		g.Streams = 0
	}
	if isDefaults {
		return g, ok
	}
	// gRPC is an HTTP/2 POST: left unset they are implied, set to
	// anything else they contradict the block.
	if rs.proto.good() && rs.proto.v != ProtocolHTTP2 {
		b.fail(rs.proto.at, "grpc requires protocol http2 (got %q); leave it unset", rs.proto.v)
		ok = false
	}
	if rs.method.good() && !strings.EqualFold(rs.method.v, "POST") {
		b.fail(rs.method.at, "grpc requires method POST (got %q); leave it unset", rs.method.v)
		ok = false
	}
	s.Protocol, s.Method = ProtocolHTTP2, "POST"
	if g.Mode == GRPCBidiStream && !b.streamsSplit(rs, rg.streams, "grpc.streams", g.Streams, s.Concurrency) {
		ok = false
	}
	return g, ok
}

func (b *builder) websocket(rs *rawScenario, s *Scenario, isDefaults bool) (*WebSocket, bool) {
	rw := rs.websocket.v
	ws := &WebSocket{Binary: rw.binary.v}
	var ok bool
	ws.Streams, ws.MaxInflightPerStream, ws.DrainDuration, ok = b.streamFields(rw.streams, rw.maxInflight, rw.drain)
	if rw.binary.set && !rw.binary.ok {
		ok = false
	}
	if isDefaults {
		return ws, ok
	}
	if rs.grpc.set {
		b.fail(withPath(rw.at, "websocket"), "websocket and grpc are mutually exclusive")
		ok = false
	}
	// The upgrade is an HTTP/1.1 GET.
	if rs.proto.good() && rs.proto.v != ProtocolHTTP1 {
		b.fail(rs.proto.at, "websocket requires protocol http1 (got %q): the upgrade is an HTTP/1.1 request; leave it unset", rs.proto.v)
		ok = false
	}
	if rs.method.good() && !strings.EqualFold(rs.method.v, "GET") {
		b.fail(rs.method.at, "websocket requires method GET (got %q); leave it unset", rs.method.v)
		ok = false
	}
	s.Protocol, s.Method = ProtocolHTTP1, "GET"
	if !b.streamsSplit(rs, rw.streams, "websocket.streams", ws.Streams, s.Concurrency) {
		ok = false
	}
	return ws, ok
}

// streamsSplit checks that streams spread evenly over the workers: each
// worker holds the same number of them.
func (b *builder) streamsSplit(rs *rawScenario, streams val[int64], name string, n, workers uint32) bool {
	if workers == 0 || n%workers == 0 {
		return true
	}
	at, dflt := streams.at, ""
	if !streams.set {
		at, dflt = rs.concurrency.at, ", the default"
		if at.line == 0 {
			at = rs.at
		}
	}
	b.fail(at, "%s (%d%s) must be a multiple of concurrency (%d): the streams are divided over the workers", name, n, dflt, workers)
	return false
}

// withPath is at, named path when it has no name of its own.
func withPath(at loc, path string) loc {
	if at.path == "" {
		at.path = path
	}
	return at
}

// Undriven says which scenarios of the plan this driver's engine cannot
// drive yet (grpc bidi-stream, protocol http3), each at its place in the
// file; nil when every scenario can run. validate and compile accept such a
// plan, as the schema does; a run refuses it before any load.
func (p *Plan) Undriven() error {
	errs := &errList{file: p.File}
	for i := range p.Scenarios {
		s := &p.Scenarios[i]
		switch {
		case s.GRPC != nil && s.GRPC.Mode != GRPCUnary:
			errs.addMsg(s.pos.grpc, fmt.Sprintf("scenario %s: the grpc block (mode %s) is valid, but this engine drives gRPC unary only", s.Name, s.GRPC.Mode))
		case s.Protocol == ProtocolHTTP3:
			errs.addMsg(s.pos.protocol, fmt.Sprintf("scenario %s: protocol http3 is valid, but this engine does not speak HTTP/3 yet", s.Name))
		}
	}
	return errs.err()
}
