package local

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// service stands in for a Kubernetes Service in front of a target's
// replicas: it accepts TCP connections on one stable address and forwards
// each to one ready endpoint, chosen round robin when the connection is
// made, the way kube-proxy does. A connection stays with its endpoint for
// its whole life, so a replica that goes away takes its connections with
// it, and an endpoint removed from the list late (the propagation lag of a
// real cluster) still receives new connections until it is removed.
type service struct {
	endpoints
	name string
	ln   net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// frontend is a target's stable address in front of its replicas: a TCP
// service, or a UDP one for udp targets.
type frontend interface {
	Addr() string
	Add(endpoint string)
	Remove(endpoint string)
	Close()
}

// endpoints is a Service's list of ready endpoints, picked round robin.
type endpoints struct {
	mu   sync.Mutex
	list []string
	next int
}

// newService listens on addr and starts forwarding.
func newService(name, addr string) (*service, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &service{name: name, ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the service's stable address.
func (s *service) Addr() string { return s.ln.Addr().String() }

// Add makes endpoint receive new connections.
func (s *endpoints) Add(endpoint string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, endpoint)
}

// Remove stops sending new connections to endpoint; its open connections
// are left alone.
func (s *endpoints) Remove(endpoint string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range s.list {
		if e == endpoint {
			s.list = append(s.list[:i], s.list[i+1:]...)
			return
		}
	}
}

// pick returns the next endpoint, round robin, or "" when none is ready.
func (s *endpoints) pick() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.list) == 0 {
		return ""
	}
	e := s.list[s.next%len(s.list)]
	s.next++
	return e
}

func (s *service) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closed {
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

func (s *service) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		if !s.track(c, true) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go s.forward(c)
	}
}

// forward pipes one client connection to an endpoint. A refused dial
// closes the client connection at once, which is what a client of a
// Service sees when the endpoint it was routed to is gone.
func (s *service) forward(client net.Conn) {
	defer s.wg.Done()
	defer s.track(client, false)
	defer client.Close()
	ep := s.pick()
	if ep == "" {
		return
	}
	backend, err := net.Dial("tcp", ep)
	if err != nil {
		return
	}
	if !s.track(backend, true) {
		backend.Close()
		return
	}
	defer s.track(backend, false)
	defer backend.Close()
	done := make(chan struct{}, 2)
	go pipe(backend, client, done)
	go pipe(client, backend, done)
	<-done
	// One side finished: a FIN is passed on as a half-close by pipe; wait
	// for the other direction unless it was an error.
	<-done
}

// pipe copies src to dst and passes the end on: a clean end (FIN) as a
// half-close, an error as a full close of both, and a reset (RST) as a
// reset of both, the way a NAT in the path passes it.
func pipe(dst, src net.Conn, done chan<- struct{}) {
	_, err := io.Copy(dst, src)
	switch {
	case err == nil || errors.Is(err, io.EOF):
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	default:
		if errors.Is(err, syscall.ECONNRESET) {
			for _, c := range []net.Conn{dst, src} {
				if tc, ok := c.(*net.TCPConn); ok {
					tc.SetLinger(0) // Close sends RST, not FIN
				}
			}
		}
		dst.Close()
		src.Close()
	}
	done <- struct{}{}
}

// Close stops accepting and drops every forwarded connection.
func (s *service) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}
