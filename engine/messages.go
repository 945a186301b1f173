package engine

// The message modes: raw TCP echo (tcp://, tcps://) and UDP echo (udp://).
// The pacer, the timeline and the counters are the HTTP mode's; what
// differs is what a due message becomes (see tcpConns and udpSocket), each
// behind the messenger interface the worker's pacer calls.

import (
	"errors"
	"net"
	"net/url"
	"time"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
)

// Limits of the message modes (their defaults are enginev1's).
const (
	// maxTCPConnections bounds each worker's connections (two goroutines
	// each).
	maxTCPConnections = 10_000
	// maxInflight bounds the unanswered messages a connection or socket
	// may hold; each is 8 bytes of due time.
	maxInflight = 1 << 20
	// udpSeqLen is the hex sequence number a datagram starts with.
	udpSeqLen = 16
	// maxUDPMessage is the largest body: a UDP payload over IPv4 less the
	// sequence number.
	maxUDPMessage = 65507 - udpSeqLen
)

type tcpSpec struct {
	connections, maxInflight int
	echo                     bool
	drain                    time.Duration
}

type udpSpec struct {
	maxInflight int
	timeout     time.Duration
}

// messenger is what a message mode does for the worker's pacer.
type messenger interface {
	// open sets up connections or the socket before the first message is
	// due at first.
	open(first int64)
	// send hands over the message due at due: its outcome is counted now
	// (dropped) or when it ends.
	send(due int64)
	// drain waits for what is outstanding, at most its drain time (abort
	// ends it at once), counts what is left and closes everything.
	drain(abort <-chan struct{})
}

// parseMessages reads the message mode of a tcp, tcps or udp url into s.
func parseMessages(req *enginev1.ExecuteRequest, u *url.URL, host string, s *spec) error {
	var errs []error
	s.host, s.addr = host, net.JoinHostPort(host, u.Port())
	s.message = req.GetBody()
	if len(req.GetHeaders()) > 0 {
		errs = append(errs, fieldErr("headers", "mean nothing to a %s url", u.Scheme))
	}
	if req.GetWebsocket() != nil {
		errs = append(errs, fieldErr("websocket", "goes with an http or https url, not %s", u.Scheme))
	}
	if u.Scheme == "udp" {
		s.mode = modeUDP
		if req.GetTcp() != nil {
			errs = append(errs, fieldErr("tcp", "goes with a tcp or tcps url, not udp"))
		}
		o := req.GetUdp()
		s.udp = udpSpec{maxInflight: int(o.GetMaxInflight()), timeout: enginev1.DefaultUDPTimeout}
		if s.udp.maxInflight == 0 {
			s.udp.maxInflight = enginev1.DefaultUDPMaxInflight
		}
		if s.udp.maxInflight > maxInflight {
			errs = append(errs, fieldErr("udp.max_inflight", "%d is more than %d", s.udp.maxInflight, maxInflight))
		}
		t, err := durationField("udp.timeout", o.GetTimeout(), enginev1.DefaultUDPTimeout)
		errs = append(errs, err)
		s.udp.timeout = t
		if len(s.message) == 0 || len(s.message) > maxUDPMessage {
			errs = append(errs, fieldErr("body", "is %d bytes; a datagram carries 1 to %d after its sequence number", len(s.message), maxUDPMessage))
		}
		return errors.Join(errs...)
	}
	s.mode = modeTCP
	if req.GetUdp() != nil {
		errs = append(errs, fieldErr("udp", "goes with a udp url, not %s", u.Scheme))
	}
	o := req.GetTcp()
	s.tcp = tcpSpec{connections: int(o.GetConnections()), maxInflight: int(o.GetMaxInflightPerConnection()), echo: o == nil || o.ExpectEcho == nil || o.GetExpectEcho()}
	if s.tcp.connections == 0 {
		s.tcp.connections = enginev1.DefaultTCPConnections
	}
	if s.tcp.maxInflight == 0 {
		s.tcp.maxInflight = enginev1.DefaultTCPMaxInflight
	}
	if s.tcp.connections > maxTCPConnections {
		errs = append(errs, fieldErr("tcp.connections", "%d is more than %d", s.tcp.connections, maxTCPConnections))
	}
	if s.tcp.maxInflight > maxInflight {
		errs = append(errs, fieldErr("tcp.max_inflight_per_connection", "%d is more than %d", s.tcp.maxInflight, maxInflight))
	}
	d, err := durationField("tcp.drain_duration", o.GetDrainDuration(), enginev1.DefaultTCPDrain)
	errs = append(errs, err)
	s.tcp.drain = d
	if s.tcp.echo && len(s.message) == 0 {
		errs = append(errs, fieldErr("body", "must not be empty: it is the message the echo is matched against (or tcp.expect_echo false)"))
	}
	if u.Scheme == "tcps" {
		cfg, err := tlsConfig(req.GetTls(), host)
		errs = append(errs, err)
		s.tls = cfg
	} else if req.GetTls() != nil {
		errs = append(errs, fieldErr("tls", "goes with a tcps url, not tcp"))
	}
	return errors.Join(errs...)
}

// newMessenger is the messenger of w's mode; nil in HTTP mode.
func newMessenger(w *worker) messenger {
	switch w.spec.mode {
	case modeTCP:
		return newTCPConns(w)
	case modeUDP:
		return newUDPSocket(w)
	case modeWS:
		return newWSConns(w)
	}
	return nil
}

// errLocalClose marks a connection the engine closed itself.
var errLocalClose = errors.New("closed by the engine")
