package lab

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMissingFrom(t *testing.T) {
	pkgs := []Package{{"containerd", "1.6.20~ds1-1+deb12u3"}, {"runc", "1.1.5+ds1-1+deb12u1"}, {"iptables", "1.8.9-2"}, {"etcd-server", "3.4.23-4+b4"}}
	status := "containerd installed 1.6.20~ds1-1+deb12u3\n" +
		"runc installed 1.1.6\n" + // another version
		"iptables config-files 1.8.9-2\n" // removed, config left
	// etcd-server: not known to dpkg at all
	got := missingFrom(status, pkgs)
	want := []Package{pkgs[1], pkgs[2], pkgs[3]}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if len(missingFrom(status, pkgs[:1])) != 0 {
		t.Error("an installed pinned package counted as missing")
	}
}

func TestPackagesPinned(t *testing.T) {
	names := map[string]bool{}
	for _, p := range Packages {
		if p.Version == "" {
			t.Errorf("%s has no version", p.Name)
		}
		names[p.Name] = true
	}
	for _, n := range []string{"containerd", "runc", "containernetworking-plugins", "etcd-server", "iptables", "conntrack"} {
		if !names[n] {
			t.Errorf("%s is not among the pinned packages", n)
		}
	}
}
