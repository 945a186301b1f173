package lab

import (
	"bytes"
	"context"
	"fmt"
	"strings"
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

// recordExec answers dpkg-query with status and records every command.
type recordExec struct {
	status string
	cmds   []string
}

func (r *recordExec) Run(_ context.Context, args ...string) ([]byte, error) {
	r.cmds = append(r.cmds, strings.Join(args, " "))
	if args[0] == "dpkg-query" {
		return []byte(r.status), nil
	}
	return nil, nil
}

func TestEnsurePackages(t *testing.T) {
	var all strings.Builder
	for _, p := range Packages {
		fmt.Fprintf(&all, "%s installed %s\n", p.Name, p.Version)
	}
	x := &recordExec{status: all.String()}
	var out bytes.Buffer
	if err := EnsurePackages(context.Background(), x, true, &out); err != nil {
		t.Fatal(err)
	}
	if len(x.cmds) != 1 || !strings.HasPrefix(out.String(), "PACKAGES ok ") {
		t.Errorf("all installed: ran %q, said %q; want one dpkg-query and PACKAGES ok", x.cmds, out.String())
	}

	x = &recordExec{status: strings.Replace(all.String(), "runc installed", "runc deinstall", 1)}
	out.Reset()
	if err := EnsurePackages(context.Background(), x, false, &out); err == nil || !strings.Contains(err.Error(), "runc=") {
		t.Errorf("check with runc missing: %v; want an error naming runc's pin", err)
	}
	if len(x.cmds) != 1 {
		t.Errorf("check ran %q; want dpkg-query only", x.cmds)
	}
	x.cmds = nil
	if err := EnsurePackages(context.Background(), x, true, &out); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"env DEBIAN_FRONTEND=noninteractive apt-get update -q",
		"env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --allow-downgrades runc=1.1.5+ds1-1+deb12u1",
	}
	if d := cmp.Diff(want, x.cmds[1:]); d != "" {
		t.Errorf("install (-want +got):\n%s", d)
	}
}
