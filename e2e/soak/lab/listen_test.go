package lab

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseProcNet(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0A2B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0100F50A:192B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 100 0 0 10 0
   2: 0100007F:0A2B 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1004 1 0000000000000000 100 0 0 10 0
`
	got, err := ParseProcNet("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	want := []Socket{
		{"tcp", netip.MustParseAddrPort("127.0.0.1:2603"), 1001},
		{"tcp", netip.MustParseAddrPort("10.245.0.1:6443"), 1002},
		{"tcp", netip.MustParseAddrPort("0.0.0.0:22"), 1004},
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); d != "" {
		t.Errorf("tcp (-want +got):\n%s", d)
	}
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2001 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1389 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2003 1 0000000000000000 100 0 0 10 0
`
	got, err = ParseProcNet("tcp6", tcp6)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Addr.String() != "[::1]:8080" || got[1].Addr.String() != "[::]:80" || got[2].Addr.String() != "127.0.0.1:5001" {
		t.Errorf("tcp6: %v", got)
	}
	udp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3001 2 0000000000000000 0
`
	if got, err := ParseProcNet("udp", udp); err != nil || len(got) != 1 || got[0].Addr.String() != "127.0.0.1:53" {
		t.Errorf("udp: %v, %v", got, err)
	}
	if _, err := ParseProcNet("tcp", "   0: 0100007X:0A2B 00000000:0000 0A 0 0 0 0 0 1 1"); err == nil {
		t.Error("a bad address parsed")
	}
}

func TestOffLab(t *testing.T) {
	ls := []Listener{
		{Process: "etcd", Socket: Socket{Addr: netip.MustParseAddrPort("127.0.0.1:2379")}},
		{Process: "kube-apiserver", Socket: Socket{Addr: netip.MustParseAddrPort("10.245.0.1:6443")}},
		{Process: "kubelet-2", Socket: Socket{Addr: netip.MustParseAddrPort("10.245.0.2:10250")}},
		{Process: "kube-proxy", Socket: Socket{Addr: netip.MustParseAddrPort("[::1]:10249")}},
		{Process: "x", Socket: Socket{Addr: netip.MustParseAddrPort("0.0.0.0:10250")}},
		{Process: "y", Socket: Socket{Addr: netip.MustParseAddrPort("[::]:80")}},
		{Process: "z", Socket: Socket{Addr: netip.MustParseAddrPort("192.0.2.2:22")}},
		{Process: "p", Socket: Socket{Addr: netip.MustParseAddrPort("10.244.0.1:80")}},
	}
	var got []string
	for _, l := range OffLab(ls) {
		got = append(got, l.Process)
	}
	if d := cmp.Diff([]string{"x", "y", "z", "p"}, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestListenersOfThisProcess finds a socket this test holds open.
func TestListenersOfThisProcess(t *testing.T) {
	ln, err := listenLoopback()
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	st, err := readProcStat(selfPID())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := Listeners([]Proc{{Name: "self", PidFile: PidFile{PID: selfPID(), Start: st.Start}, Alive: true}})
	if err != nil {
		t.Fatal(err)
	}
	want := ln.Addr().String()
	for _, l := range ls {
		if l.Addr.String() == want {
			return
		}
	}
	t.Errorf("listener %s not among %v", want, ls)
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func selfPID() int { return os.Getpid() }
