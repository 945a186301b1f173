package lab

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Socket is a listening TCP socket or a bound UDP socket of the host's
// network namespace.
type Socket struct {
	Proto string // tcp, tcp6, udp, udp6
	Addr  netip.AddrPort
	Inode uint64
}

// ParseProcNet reads /proc/net/{tcp,tcp6,udp,udp6} content: the TCP
// sockets in state LISTEN and every UDP socket (UDP has no listening
// state; a bound one receives).
func ParseProcNet(proto, data string) ([]Socket, error) {
	var out []Socket
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] == "sl" {
			continue
		}
		if strings.HasPrefix(proto, "tcp") && f[3] != "0A" {
			continue
		}
		ap, err := parseHexAddr(f[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", proto, f[1], err)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: inode %q: %w", proto, f[9], err)
		}
		out = append(out, Socket{Proto: proto, Addr: ap, Inode: inode})
	}
	return out, nil
}

// parseHexAddr parses the kernel's "ADDR:PORT" in hex, the address as
// 32-bit words in the machine's (little-endian) byte order.
func parseHexAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no port")
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("bad address")
	}
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port")
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// LabAddr reports whether a server may bind a: a loopback address or one
// on the lab's bridge. The unspecified address (0.0.0.0, ::) is neither:
// it would answer on every interface of the machine.
func LabAddr(a netip.Addr) bool {
	return a.IsLoopback() || netip.MustParsePrefix(LabNet).Contains(a)
}

// Listener is a socket of a lab process.
type Listener struct {
	Process string
	PID     int
	Socket
}

func (l Listener) String() string {
	return fmt.Sprintf("%s (pid %d) %s %s", l.Process, l.PID, l.Proto, l.Addr)
}

// Listeners returns the listening sockets of the lab's live processes, in
// the host's network namespace.
func Listeners(procs []Proc) ([]Listener, error) {
	byInode := map[uint64]Socket{}
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		data, err := os.ReadFile(filepath.Join("/proc/net", proto))
		if err != nil {
			continue // no IPv6, say
		}
		socks, err := ParseProcNet(proto, string(data))
		if err != nil {
			return nil, err
		}
		for _, s := range socks {
			byInode[s.Inode] = s
		}
	}
	var out []Listener
	for _, p := range procs {
		if !p.Alive {
			continue
		}
		for _, inode := range socketInodes(p.PidFile.PID) {
			if s, ok := byInode[inode]; ok {
				out = append(out, Listener{Process: p.Name, PID: p.PidFile.PID, Socket: s})
			}
		}
	}
	return out, nil
}

// socketInodes lists the inodes of the sockets pid holds open.
func socketInodes(pid int) []uint64 {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, _ := os.ReadDir(dir)
	var out []uint64
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if s, ok := strings.CutPrefix(t, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// OffLab returns the listeners that break the rule: bound to an address
// that is neither loopback nor on the lab's bridge.
func OffLab(ls []Listener) []Listener {
	var out []Listener
	for _, l := range ls {
		if !LabAddr(l.Addr.Addr()) {
			out = append(out, l)
		}
	}
	return out
}
