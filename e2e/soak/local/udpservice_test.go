package local

import (
	"net"
	"testing"
	"time"
)

// datagramServer answers each datagram with its own name and the datagram.
func datagramServer(t *testing.T, name string) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte(name+" "), buf[:n]...), from)
		}
	}()
	return pc
}

func askUDP(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no answer to %q: %v", msg, err)
	}
	return string(buf[:n])
}

// TestUDPServiceFlows: each client address is a flow to one endpoint,
// picked round robin when it starts, whose answers come back from the
// service's address; a removed endpoint's flows are forgotten, so their
// clients' next datagrams go to a ready endpoint.
func TestUDPServiceFlows(t *testing.T) {
	a, b := datagramServer(t, "a"), datagramServer(t, "b")
	s, err := newUDPService("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Add(a.LocalAddr().String())
	s.Add(b.LocalAddr().String())
	dial := func() net.Conn {
		c, err := net.Dial("udp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1, c2 := dial(), dial()
	for i := range 3 {
		if got := askUDP(t, c1, "x"); got != "a x" {
			t.Fatalf("client 1, datagram %d: %q, want the first endpoint's \"a x\"", i, got)
		}
		if got := askUDP(t, c2, "y"); got != "b y" {
			t.Fatalf("client 2, datagram %d: %q, want the second endpoint's \"b y\"", i, got)
		}
	}
	s.Remove(a.LocalAddr().String())
	if got := askUDP(t, c1, "z"); got != "b z" {
		t.Errorf("client 1 after its endpoint left: %q, want \"b z\"", got)
	}
}
