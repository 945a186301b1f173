package local

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lineServer answers each line with its own name and the line, on 127.0.0.1.
func lineServer(t *testing.T, name string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					io.WriteString(c, name+" "+l)
				}
			}()
		}
	}()
	return ln
}

func ask(t *testing.T, c net.Conn, line string) (string, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestServiceRoutesEachConnectionToOneEndpoint(t *testing.T) {
	a, b := lineServer(t, "a"), lineServer(t, "b")
	s, err := newService("svc", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Add(a.Addr().String())
	s.Add(b.Addr().String())

	var got []string
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		first, err := ask(t, c, "x")
		if err != nil {
			t.Fatal(err)
		}
		// The same connection keeps its endpoint.
		second, err := ask(t, c, "y")
		if err != nil {
			t.Fatal(err)
		}
		if first[:1] != second[:1] {
			t.Errorf("connection %d moved from %q to %q", i, first, second)
		}
		got = append(got, first[:1])
		c.Close()
	}
	if strings.Join(got, "") != "abab" {
		t.Errorf("endpoints chosen %v, want round robin abab", got)
	}

	s.Remove(a.Addr().String())
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		l, err := ask(t, c, "z")
		c.Close()
		if err != nil || !strings.HasPrefix(l, "b ") {
			t.Errorf("after removing a: %q, %v", l, err)
		}
	}
}

func TestServiceClosesClientWhenEndpointIsGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens here any more: dials are refused

	s, err := newService("svc", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Add(dead)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if l, err := ask(t, c, "x"); err == nil {
		t.Fatalf("a connection routed to a dead endpoint answered %q", l)
	}
}

// dialThrough dials a Service whose one endpoint is ln.
func dialThrough(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	s, err := newService("svc", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.Add(ln.Addr().String())
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestServicePassesServerCloseOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.WriteString(c, "bye\n")
			c.Close()
		}
	}()
	c := dialThrough(t, ln)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "bye\n" {
		t.Fatalf("read %q, %v; want the server's line then EOF", b, err)
	}
}

// TestServicePassesResetOn: an endpoint that aborts a connection with a
// TCP reset is seen by the client as a reset too, as through kube-proxy's
// NAT, not as a clean close.
func TestServicePassesResetOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		bufio.NewReader(c).ReadString('\n')
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}()
	c := dialThrough(t, ln)
	if _, err := ask(t, c, "x"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %v, want the endpoint's reset", err)
	}
}
