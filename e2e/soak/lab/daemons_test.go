package lab

import (
	"net"
	"net/url"
	"strings"
	"testing"
)

// addressFlags are the flags by which the lab's servers are told where to
// listen or what to advertise.
var addressFlags = []string{
	"--listen", "--listen-client-urls", "--advertise-client-urls", "--listen-peer-urls",
	"--initial-advertise-peer-urls", "--listen-metrics-urls", "--bind-address", "--advertise-address", "--node-ip",
}

// labAddress reports whether ip is loopback or on the lab's bridge.
func labAddress(t *testing.T, ip string) bool {
	t.Helper()
	p := net.ParseIP(ip)
	_, labNet, _ := net.ParseCIDR(LabNet)
	return p != nil && (p.IsLoopback() || labNet.Contains(p))
}

func hostOf(v string) string {
	if u, err := url.Parse(v); err == nil && u.Host != "" {
		return u.Hostname()
	}
	if h, _, err := net.SplitHostPort(v); err == nil {
		return h
	}
	return v
}

func TestDaemonsListenOnLabAddressesOnly(t *testing.T) {
	l := Layout{State: "/lab/state", Nodes: 2}
	bins := Binaries{}
	for _, c := range Components {
		for _, b := range c.Binaries {
			bins[b] = "/cache/bin/x/" + b
		}
	}
	ds := Daemons(l, bins, DefaultRegistry)
	checked := 0
	for _, d := range ds {
		if d.Path == "" {
			t.Errorf("%s: no binary", d.Name)
		}
		for i, a := range d.Args {
			name, val, ok := strings.Cut(a, "=")
			if !ok && i+1 < len(d.Args) {
				val = d.Args[i+1]
			}
			for _, f := range addressFlags {
				if name != f {
					continue
				}
				for _, v := range strings.Split(val, ",") {
					checked++
					if h := hostOf(v); !labAddress(t, h) {
						t.Errorf("%s %s: %q is neither loopback nor on %s", d.Name, f, h, LabNet)
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d addresses checked: the flag list no longer matches the daemons", checked)
	}
}

func TestDaemonsStartOrderAndNames(t *testing.T) {
	ds := Daemons(Layout{State: "/s", Nodes: 2}, Binaries{}, DefaultRegistry)
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
	}
	want := "registry etcd containerd-1 containerd-2 kube-apiserver kube-controller-manager kube-scheduler kubelet-1 kubelet-2 kube-proxy kube-router"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("daemons %q, want %q", got, want)
	}
	stop := StopOrder(MaxNodes)
	for _, n := range names {
		found := false
		for _, s := range stop {
			found = found || s == n
		}
		if !found {
			t.Errorf("%s is started but never stopped", n)
		}
	}
}

func TestContainerdProxyIsClosedLoopback(t *testing.T) {
	ds := Daemons(Layout{State: "/s", Nodes: 1}, Binaries{}, DefaultRegistry)
	env := strings.Join(daemonByName(ds, "containerd-1").Env, " ")
	for _, want := range []string{"HTTPS_PROXY=" + ClosedProxy, "HTTP_PROXY=" + ClosedProxy} {
		if !strings.Contains(env, want) {
			t.Errorf("containerd env %q lacks %s", env, want)
		}
	}
	if h := hostOf(ClosedProxy); !net.ParseIP(h).IsLoopback() {
		t.Errorf("closed proxy %s is not loopback", ClosedProxy)
	}
}
