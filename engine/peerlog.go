package engine

import (
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// maxLoggedPeers bounds the peers whose refusal is remembered: a scan from
// many addresses costs this many entries and one more line, no more.
const maxLoggedPeers = 4096

// loggedCreds are the control plane's TLS credentials, which say when a
// peer is refused: once per peer address, whatever number of connections
// it tries (a driver without the run's certificate retries, a port
// scanner comes back), so a refusal is seen in the log without flooding
// it.
type loggedCreds struct {
	credentials.TransportCredentials
	peers *peerLog
}

var _ credentials.TransportCredentials = (*loggedCreds)(nil)

// ServerHandshake is the TLS handshake, which fails for a peer without a
// client certificate of the run's CA (runca.ServerConfig requires one).
func (c *loggedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.peers.refused(conn.RemoteAddr(), err)
	}
	return out, info, err
}

// Clone keeps the log: a clone refuses for the same engine.
func (c *loggedCreds) Clone() credentials.TransportCredentials {
	return &loggedCreds{TransportCredentials: c.TransportCredentials.Clone(), peers: c.peers}
}

// peerLog remembers the peers refused so far.
type peerLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]uint64 // peer host -> refusals
	full bool
}

func newPeerLog(log *slog.Logger) *peerLog {
	return &peerLog{log: log, seen: map[string]uint64{}}
}

// refused counts a refusal of addr and logs the first of its host.
func (p *peerLog) refused(addr net.Addr, err error) {
	host := "unknown"
	if addr != nil {
		host = addr.String()
		if h, _, splitErr := net.SplitHostPort(host); splitErr == nil {
			host = h
		}
	}
	p.mu.Lock()
	var first, full bool
	if n, known := p.seen[host]; known {
		p.seen[host] = n + 1
	} else if len(p.seen) < maxLoggedPeers {
		p.seen[host] = 1
		first = true
	} else if !p.full {
		p.full, full = true, true
	}
	p.mu.Unlock()
	switch {
	case first:
		p.log.Warn("control plane refused a peer without a valid client certificate; further refusals of this peer are not logged",
			"peer", host, "error", err)
	case full:
		p.log.Warn("control plane refused more peers than it remembers; further new peers are not logged", "peers", maxLoggedPeers)
	}
}

// count is how often host was refused.
func (p *peerLog) count(host string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[host]
}
