package local

import (
	"errors"
	"net"
	"sync"
	"time"
)

// udpService stands in for a Kubernetes Service in front of a udp target's
// replicas, the way kube-proxy's conntrack does it: each client address is
// a flow, sent to the endpoint picked round robin when its first datagram
// came, from a socket of its own, and the endpoint's replies go back to the
// client from the service's address. A flow whose endpoint leaves the list
// is forgotten (kube-proxy clears such entries), so the client's next
// datagram starts a flow to a ready endpoint, while the old flow's socket
// still passes back the replies in flight for staleLinger.
type udpService struct {
	endpoints
	pc net.PacketConn

	mu     sync.Mutex
	flows  map[string]*udpFlow
	all    map[*udpFlow]struct{} // with the forgotten ones still lingering
	closed bool
	wg     sync.WaitGroup
}

type udpFlow struct {
	ep   string
	conn *net.UDPConn
}

// staleLinger is how long a forgotten flow still passes replies back: a
// draining replica's answers to the datagrams it had.
const staleLinger = 5 * time.Second

// newUDPService listens on addr and starts forwarding.
func newUDPService(addr string) (*udpService, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &udpService{pc: pc, flows: map[string]*udpFlow{}, all: map[*udpFlow]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Addr is the service's stable address.
func (s *udpService) Addr() string { return s.pc.LocalAddr().String() }

// Remove takes endpoint out of the list and forgets its flows.
func (s *udpService) Remove(endpoint string) {
	s.endpoints.Remove(endpoint)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, f := range s.flows {
		if f.ep == endpoint {
			delete(s.flows, k)
			f.conn.SetReadDeadline(time.Now().Add(staleLinger))
		}
	}
}

func (s *udpService) serve() {
	defer s.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		f := s.flow(from)
		if f == nil {
			continue // no ready endpoint: the datagram is lost
		}
		if _, err := f.conn.Write(buf[:n]); err != nil {
			s.forget(from.String(), f, false)
		}
	}
}

// flow returns the client's flow, starting one to a ready endpoint when it
// has none; nil when no endpoint is ready or the service is closed.
func (s *udpService) flow(from net.Addr) *udpFlow {
	key := from.String()
	s.mu.Lock()
	f := s.flows[key]
	s.mu.Unlock()
	if f != nil {
		return f
	}
	ep := s.pick()
	if ep == "" {
		return nil
	}
	raddr, err := net.ResolveUDPAddr("udp", ep)
	if err != nil {
		return nil
	}
	conn, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return nil
	}
	f = &udpFlow{ep: ep, conn: conn}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		conn.Close()
		return nil
	}
	s.flows[key] = f
	s.all[f] = struct{}{}
	s.wg.Add(1)
	go s.replies(f, from)
	return f
}

// replies passes the endpoint's datagrams back to the client until the
// flow's socket fails: closed, refused (the endpoint is gone) or, once
// forgotten, quiet for staleLinger.
func (s *udpService) replies(f *udpFlow, to net.Addr) {
	defer s.wg.Done()
	defer f.conn.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.conn.Read(buf)
		if err != nil {
			s.forget(to.String(), f, true)
			return
		}
		s.pc.WriteTo(buf[:n], to)
	}
}

// forget drops the client's flow if it is still f, and with done (its
// socket is closing) f itself.
func (s *udpService) forget(key string, f *udpFlow, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flows[key] == f {
		delete(s.flows, key)
	}
	if done {
		delete(s.all, f)
	}
}

// Close stops forwarding and closes every flow.
func (s *udpService) Close() {
	s.mu.Lock()
	s.closed = true
	for f := range s.all {
		f.conn.Close()
	}
	s.mu.Unlock()
	s.pc.Close()
	s.wg.Wait()
}
