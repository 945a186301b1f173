package plan

// The raw TCP and UDP modes. A target's scheme selects the mode (tcp:// and
// tcps:// raw TCP echo, udp:// UDP echo); the tcp and udp blocks only tune
// it. The spellings and rules are those of the sortie + Nighthawk plan
// schema, so its plans validate unchanged: the target needs an explicit
// port, the message is the body (required for udp, and for tcp unless
// expect_echo is false), and nothing HTTP-shaped goes with these targets.

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sortie-soak/sortie/driver/threshold"
	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
)

// Modes of a scenario, selected by its targets' scheme.
const (
	ModeHTTP = "http"
	ModeTCP  = "tcp"
	ModeUDP  = "udp"
)

// Defaults of the tcp and udp blocks: the engine's own.
const (
	DefaultTCPConnections = enginev1.DefaultTCPConnections
	DefaultTCPMaxInflight = enginev1.DefaultTCPMaxInflight
	DefaultTCPDrain       = enginev1.DefaultTCPDrain
	DefaultUDPMaxInflight = enginev1.DefaultUDPMaxInflight
	DefaultUDPTimeout     = enginev1.DefaultUDPTimeout
	// A datagram is the 16 hex digit sequence number and the body, at
	// most the 65,507 bytes of a UDP payload over IPv4.
	udpSequencePrefix = 16
	maxUDPBody        = 65507 - udpSequencePrefix

	tcpSchemes      = "tcp:// or tcps://"
	udpSchemePrefix = "udp://"
)

// TCP tunes a raw TCP scenario, with its defaults applied.
type TCP struct {
	// Connections each worker keeps open.
	Connections uint32
	// MaxInflightPerConnection is how many unanswered messages a
	// connection may hold before a message due on it is dropped
	// (benchmark.tcp_deferred).
	MaxInflightPerConnection uint32
	// ExpectEcho says the peer echoes every message.
	ExpectEcho bool
	// DrainDuration is how long a worker waits for outstanding echoes.
	DrainDuration time.Duration
}

// UDP tunes a UDP scenario, with its defaults applied.
type UDP struct {
	// MaxInflight is how many unanswered datagrams a worker may hold
	// before a message due is dropped (benchmark.udp_deferred).
	MaxInflight uint32
	// Timeout is how long a datagram may go unanswered before it is lost
	// (benchmark.udp_lost).
	Timeout time.Duration
}

type rawTCP struct {
	connections, maxInflight val[int64]
	expectEcho               val[bool]
	drain                    val[time.Duration]
}

type rawUDP struct {
	maxInflight val[int64]
	timeout     val[time.Duration]
}

var (
	tcpKeys = []string{"connections", "max_inflight_per_connection", "expect_echo", "drain_duration"}
	udpKeys = []string{"max_inflight", "timeout"}
)

func (d *decoder) tcpBlock(n *yaml.Node, path string) val[*rawTCP] {
	n = d.resolve(n)
	out := val[*rawTCP]{set: true, at: d.at(n, path)}
	fs, ok := d.fields(n, path)
	if !ok {
		return out
	}
	t := &rawTCP{}
	for _, f := range fs {
		v, p := f.valueNode, path+"."+f.key
		switch f.key {
		case "connections":
			t.connections = d.integer(v, p)
		case "max_inflight_per_connection":
			t.maxInflight = d.integer(v, p)
		case "expect_echo":
			t.expectEcho = d.boolean(v, p)
		case "drain_duration":
			t.drain = d.duration(v, p)
		default:
			d.unknown(f, path, tcpKeys)
		}
	}
	out.v, out.ok = t, true
	return out
}

func (d *decoder) udpBlock(n *yaml.Node, path string) val[*rawUDP] {
	n = d.resolve(n)
	out := val[*rawUDP]{set: true, at: d.at(n, path)}
	fs, ok := d.fields(n, path)
	if !ok {
		return out
	}
	u := &rawUDP{}
	for _, f := range fs {
		v, p := f.valueNode, path+"."+f.key
		switch f.key {
		case "max_inflight":
			u.maxInflight = d.integer(v, p)
		case "timeout":
			u.timeout = d.duration(v, p)
		default:
			d.unknown(f, path, udpKeys)
		}
	}
	out.v, out.ok = u, true
	return out
}

// messageDrain is how long a TCP or UDP execution may wait for its last
// messages beyond the scenario's timeout (which bounds its connects): the
// tcp drain, or the udp timeout of the last datagram.
func (s *Scenario) messageDrain() time.Duration {
	switch {
	case s.Mode == ModeTCP && s.TCP != nil:
		return s.TCP.DrainDuration
	case s.Mode == ModeUDP && s.UDP != nil:
		return s.UDP.Timeout
	}
	return 0
}

// modeOf is the mode a target URL selects.
func modeOf(target string) string {
	switch {
	case strings.HasPrefix(target, "tcp://"), strings.HasPrefix(target, "tcps://"):
		return ModeTCP
	case strings.HasPrefix(target, udpSchemePrefix):
		return ModeUDP
	}
	return ModeHTTP
}

// checkStreamURL checks a tcp, tcps or udp target: a host and an explicit
// port, nothing else but an empty path.
func checkStreamURL(u *url.URL, s string) error {
	if u.Hostname() == "" {
		return fmt.Errorf("url %q has no host", s)
	}
	if u.User != nil {
		return fmt.Errorf("url %q carries user information, which means nothing to a %s target", u.Redacted(), u.Scheme)
	}
	if u.Port() == "" {
		return fmt.Errorf("a %s target needs an explicit port (got %q)", modeOf(s), s)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("url %q: a %s target is host:port only, no path, query or fragment", s, u.Scheme)
	}
	return nil
}

// transport sets s.Mode from its targets and checks what goes with it:
// the tcp and udp blocks only with their targets, nothing HTTP-shaped with
// them, and a message to echo. The targets are already checked.
func (b *builder) transport(rs *rawScenario, s *Scenario, isDefaults bool) bool {
	ok := true
	s.Mode = ModeHTTP
	for i, t := range s.Targets {
		m := modeOf(t.URL)
		if i == 0 {
			s.Mode = m
		} else if m != s.Mode {
			b.fail(b.targetAt(rs), "targets of one scenario are all http(s), all %s or all %s: %q is %s, %q is %s",
				tcpSchemes, udpSchemePrefix, s.Targets[0].URL, s.Mode, t.URL, m)
			return false
		}
	}
	if !isDefaults && len(s.Targets) == 0 {
		return false // the targets are reported already
	}
	if isDefaults && len(s.Targets) == 0 {
		// Defaults without a target: the scenarios that inherit the
		// blocks are judged with their own targets.
		ok = b.tcpOptions(rs, s) && ok
		return b.udpOptions(rs, s) && ok
	}
	where := ""
	if len(s.Targets) > 0 {
		where = s.Targets[0].URL
	}
	if rs.tcp.set && s.Mode != ModeTCP {
		b.fail(rs.tcp.at, "tcp applies to a %s target (got %q)", tcpSchemes, where)
		ok = false
	}
	if rs.udp.set && s.Mode != ModeUDP {
		b.fail(rs.udp.at, "udp applies to a %s target (got %q)", udpSchemePrefix, where)
		ok = false
	}
	if s.Mode == ModeHTTP {
		return ok
	}
	ok = b.notHTTP(rs, s) && ok
	switch s.Mode {
	case ModeTCP:
		ok = b.tcpOptions(rs, s) && ok
		bodyBad := rs.body.set && !rs.body.ok || rs.bodyFile.set && !rs.bodyFile.ok
		if !isDefaults && !bodyBad && s.TCP != nil && s.TCP.ExpectEcho && len(s.Body) == 0 {
			b.fail(b.targetAt(rs), "a tcp target needs a body or body_file: the message is what gets echoed and matched (or tcp.expect_echo: false)")
			ok = false
		}
	case ModeUDP:
		ok = b.udpOptions(rs, s) && ok
		switch {
		case isDefaults, rs.body.set && !rs.body.ok, rs.bodyFile.set && !rs.bodyFile.ok:
		case len(s.Body) == 0:
			b.fail(b.targetAt(rs), "a udp target needs a body or body_file: the datagram is what gets echoed and matched")
			ok = false
		case len(s.Body) > maxUDPBody:
			b.fail(b.bodyAt(rs), "the body is %d bytes; a datagram carries at most %d after its %d byte sequence number", len(s.Body), maxUDPBody, udpSequencePrefix)
			ok = false
		}
	}
	return ok
}

func (b *builder) targetAt(rs *rawScenario) loc {
	if rs.target.set {
		return rs.target.at
	}
	if rs.targets.set {
		return rs.targets.at
	}
	return rs.at
}

func (b *builder) bodyAt(rs *rawScenario) loc {
	if rs.bodyFile.set {
		return rs.bodyFile.at
	}
	return rs.body.at
}

// notHTTP refuses the fields that mean something to HTTP only, each where
// it was written, and clears the HTTP defaults.
func (b *builder) notHTTP(rs *rawScenario, s *Scenario) bool {
	ok := true
	what := map[string]string{ModeTCP: "the body is the message", ModeUDP: "the body is the datagram"}[s.Mode]
	refuse := func(set bool, at loc, format string, args ...any) {
		if set {
			b.fail(at, format, args...)
			ok = false
		}
	}
	refuse(rs.method.set, rs.method.at, "method %q has no meaning with a %s target: %s", rs.method.v, s.Mode, what)
	refuse(rs.headers.set, rs.headers.at, "headers have no meaning with a %s target: %s", s.Mode, what)
	refuse(rs.proto.set, rs.proto.at, "protocol %q has no meaning with a %s target", rs.proto.v, s.Mode)
	if s.Mode == ModeTCP {
		refuse(rs.connections.set, rs.connections.at, "connections is the HTTP pool's cap and does nothing for a tcp target; set tcp.connections")
	} else {
		refuse(rs.connections.set, rs.connections.at, "connections has no meaning with a udp target: one socket per worker")
	}
	refuse(rs.maxPending.set, rs.maxPending.at, "max_pending_requests has no meaning with a %s target: a message that finds no room is counted, never queued", s.Mode)
	refuse(rs.requestTimeout.set, rs.requestTimeout.at, "request_timeout has no meaning with a %s target", s.Mode)
	tlsOK := s.Mode == ModeTCP && len(s.Targets) > 0 && strings.HasPrefix(s.Targets[0].URL, "tcps://")
	refuse(rs.tls.set && !tlsOK, rs.tls.at, "tls needs an https or tcps target")
	exprs := rs.thresholds.v
	for _, rt := range rs.targets.v {
		exprs = append(exprs[:len(exprs):len(exprs)], rt.thresholds.v...)
	}
	for _, t := range exprs {
		if other := modeOfValue(t.v); t.ok && other != "" && other != s.Mode {
			b.fail(t.at, "threshold %q reads %s counter or statistic, which a %s target never has", t.v, modeArticle[other], s.Mode)
			ok = false
		}
	}
	s.Method, s.Protocol, s.Headers = "", "", nil
	s.Connections, s.MaxPendingRequests = 0, 0
	return ok
}

var modeArticle = map[string]string{ModeHTTP: "an HTTP", ModeTCP: "a tcp", ModeUDP: "a udp"}

// modeOfValue is the mode whose counter or statistic a threshold reads, or
// "" for one every mode has (late_sends, late_dropped) or one that does
// not parse (reported already).
func modeOfValue(expr string) string {
	th, err := threshold.Parse(expr)
	if err != nil {
		return ""
	}
	for _, f := range []struct{ prefix, mode string }{
		{"benchmark.tcp_", ModeTCP}, {"benchmark_tcp.", ModeTCP},
		{"benchmark.udp_", ModeUDP}, {"benchmark_udp.", ModeUDP},
		{"benchmark.http_", ModeHTTP}, {"benchmark_http_client.latency_", ModeHTTP},
		{"benchmark_http_client.request_to_response", ModeHTTP}, {"benchmark_http_client.queue_to_connect", ModeHTTP},
		{"benchmark.stream_resets", ModeHTTP}, {"benchmark.pool_", ModeHTTP},
		{"benchmark.request_timeout", ModeHTTP}, {"benchmark.connection_protocol_error", ModeHTTP},
	} {
		if strings.HasPrefix(th.Name, f.prefix) {
			return f.mode
		}
	}
	return ""
}

func (b *builder) tcpOptions(rs *rawScenario, s *Scenario) bool {
	if !rs.tcp.set && s.Mode != ModeTCP {
		return true
	}
	t := &TCP{Connections: DefaultTCPConnections, MaxInflightPerConnection: DefaultTCPMaxInflight, ExpectEcho: true, DrainDuration: DefaultTCPDrain}
	s.TCP = t
	if !rs.tcp.set {
		return true
	}
	r := rs.tcp.v
	if !rs.tcp.ok {
		return false
	}
	ok := true
	if v, good := b.uint32Field(r.connections, 1); good {
		t.Connections = v
	} else if r.connections.set {
		ok = false
	}
	if v, good := b.uint32Field(r.maxInflight, 1); good {
		t.MaxInflightPerConnection = v
	} else if r.maxInflight.set {
		ok = false
	}
	if r.expectEcho.good() {
		t.ExpectEcho = r.expectEcho.v
	} else if r.expectEcho.set {
		ok = false
	}
	switch d := r.drain; {
	case !d.set:
	case !d.ok:
		ok = false
	case d.v < 0:
		b.fail(d.at, "tcp.drain_duration must not be negative, got %v", d.v)
		ok = false
	case d.v > 0:
		t.DrainDuration = d.v
	}
	return ok
}

func (b *builder) udpOptions(rs *rawScenario, s *Scenario) bool {
	if !rs.udp.set && s.Mode != ModeUDP {
		return true
	}
	u := &UDP{MaxInflight: DefaultUDPMaxInflight, Timeout: DefaultUDPTimeout}
	s.UDP = u
	if !rs.udp.set {
		return true
	}
	r := rs.udp.v
	if !rs.udp.ok {
		return false
	}
	ok := true
	if v, good := b.uint32Field(r.maxInflight, 1); good {
		u.MaxInflight = v
	} else if r.maxInflight.set {
		ok = false
	}
	switch t := r.timeout; {
	case !t.set:
	case !t.ok:
		ok = false
	case t.v <= 0:
		b.fail(t.at, "udp.timeout must be positive, got %v", t.v)
		ok = false
	default:
		u.Timeout = t.v
	}
	return ok
}
