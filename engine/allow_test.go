package engine

import (
	"net/netip"
	"strings"
	"testing"
)

func TestAllowlist(t *testing.T) {
	list, err := ParseAllowlist(" svc-1.aether-test.mesh, *.Example.COM,10.0.0.0/8 , 192.0.2.7, fd00::/8, 2001:db8::1 ")
	if err != nil {
		t.Fatal(err)
	}
	if got := list.String(); got != "svc-1.aether-test.mesh,*.Example.COM,10.0.0.0/8,192.0.2.7,fd00::/8,2001:db8::1" {
		t.Errorf("String() = %q", got)
	}
	tests := []struct {
		host string
		want bool
	}{
		{"svc-1.aether-test.mesh", true},
		{"SVC-1.aether-test.mesh", true},
		{"svc-2.aether-test.mesh", false},
		{"aether-test.mesh", false},
		{"a.example.com", true},
		{"a.b.example.com", true},
		{"example.com", false},
		{"aexample.com", false},
		{"10.1.2.3", true},
		{"11.0.0.1", false},
		{"192.0.2.7", true},
		{"192.0.2.8", false},
		{"::ffff:10.0.0.1", true}, // a mapped IPv4 is that IPv4
		{"fd12::1", true},
		{"fe80::1%eth0", false},
		{"2001:db8::1", true},
		{"2001:db8::2", false},
		// A name that resolves inside a prefix is still a name.
		{"localhost", false},
		// Forms some resolvers read as 10.0.0.1 are names, not in the list.
		{"012.0.0.1", false},
		{"167772161", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := list.AllowsHost(tt.host); got != tt.want {
			t.Errorf("AllowsHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
	anyList, err := ParseAllowlist("*")
	if err != nil || !anyList.Any() || !anyList.AllowsHost("anything.at.all") || !anyList.allowsAddr(netip.MustParseAddr("8.8.8.8")) {
		t.Errorf("* = %v, %v: want every target", anyList, err)
	}
	var none Allowlist
	if none.AllowsHost("127.0.0.1") {
		t.Error("the zero Allowlist allowed a host")
	}
}

func TestParseAllowlistRefuses(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "empty"},
		{"  ", "empty"},
		{"a,,b", `entry 2 ""`},
		{"10.0.0.1/8", "write 10.0.0.0/8"},
		{"10.0.0.0/33", "not a CIDR"},
		{"host:80", "a port"},
		{"[::1]:80", "a port"},
		{"fe80::1%eth0", "zone"},
		{"a b", "not part of a host name"},
		{"*.", "1 to 253"},
		{"a..b", "label"},
		{"x." + strings.Repeat("a", 64), "label"},
		{"1.2.3", "digits and dots"},
		{"*,10.0.0.0/8", "alone"},
		{"ok.example,http://x", "entry 2"},
		{strings.Repeat("a,", 2000) + "a", "entries"},
	}
	for _, tt := range tests {
		_, err := ParseAllowlist(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseAllowlist(%.40q) = %v, want an error with %q", tt.in, err, tt.want)
		}
	}
}

// FuzzParseAllowlist: any input is refused or gives a list whose text
// parses to the same list; a list never allows an IP literal it does not
// name, nor panics on any host.
func FuzzParseAllowlist(f *testing.F) {
	for _, s := range []string{"*", "10.0.0.0/8", "svc.ns.mesh,*.mesh", "::1,127.0.0.1", "a,,b", "1.2.3.4/33", "*.", "x:1", "\xff", "Ä.de"} {
		f.Add(s, "10.1.2.3")
	}
	f.Fuzz(func(t *testing.T, in, host string) {
		a, err := ParseAllowlist(in)
		if err != nil {
			return
		}
		again, err := ParseAllowlist(a.String())
		if err != nil {
			t.Fatalf("the list's own text %q does not parse: %v", a.String(), err)
		}
		if again.String() != a.String() {
			t.Fatalf("text %q parses to %q", a.String(), again.String())
		}
		allowed := a.AllowsHost(host)
		if again.AllowsHost(host) != allowed {
			t.Fatalf("the reparsed list disagrees on %q", host)
		}
		if ip, err := netip.ParseAddr(host); err == nil && allowed && !a.Any() {
			named := false
			for _, p := range a.prefixes {
				named = named || p.Contains(ip.WithZone("").Unmap())
			}
			if !named {
				t.Fatalf("%q allowed %s outside its prefixes", in, host)
			}
		}
	})
}
