package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// Package is a pinned Debian package.
type Package struct {
	Name, Version string
}

func (p Package) String() string { return p.Name + "=" + p.Version }

// Packages are the Debian 12 packages the lab runs, pinned: containerd
// 1.6 (the kubelet falls back to its own cgroup driver with it), runc, the
// CNI plugins (bridge, host-local, loopback), etcd 3.4, iptables (nft) and
// conntrack (kube-proxy flushes stale UDP entries with it) and ipset
// (kube-router's NetworkPolicy rules match pod sets). The PKI is made
// in Go, so openssl is not among them.
var Packages = []Package{
	{"containerd", "1.6.20~ds1-1+deb12u3"},
	{"runc", "1.1.5+ds1-1+deb12u1"},
	{"containernetworking-plugins", "1.1.1+ds1-3+b5"},
	{"etcd-server", "3.4.23-4+b4"},
	{"iptables", "1.8.9-2"},
	{"conntrack", "1:1.4.7-1+b2"},
	{"ipset", "7.17-1"},
}

// MissingPackages returns the packages not installed at their pinned
// version, reading dpkg's status with x.
func MissingPackages(ctx context.Context, x Exec, pkgs []Package) ([]Package, error) {
	args := []string{"dpkg-query", "-W", "-f=${Package} ${db:Status-Status} ${Version}\n"}
	for _, p := range pkgs {
		args = append(args, p.Name)
	}
	// dpkg-query exits 1 when a package is unknown; its output still lists
	// the others, so the error alone means nothing here.
	out, _ := x.Run(ctx, args...)
	return missingFrom(string(out), pkgs), nil
}

// missingFrom compares dpkg-query's lines with the pins.
func missingFrom(status string, pkgs []Package) []Package {
	have := map[string]string{}
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == "installed" {
			have[f[0]] = f[2]
		}
	}
	var missing []Package
	for _, p := range pkgs {
		if have[p.Name] != p.Version {
			missing = append(missing, p)
		}
	}
	return missing
}

// EnsurePackages installs the pinned packages that are missing (with
// install) or fails naming them (without).
func EnsurePackages(ctx context.Context, x Exec, install bool, out io.Writer) error {
	missing, err := MissingPackages(ctx, x, Packages)
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		fmt.Fprintf(out, "PACKAGES ok %s\n", joinPackages(Packages))
		return nil
	}
	if !install {
		return fmt.Errorf("Debian packages not installed at their pinned versions: %s (run soak lab up --packages install, or apt-get install them)", joinPackages(missing))
	}
	// No question may wait for an answer: there is no one to give it.
	apt := []string{"env", "DEBIAN_FRONTEND=noninteractive", "apt-get"}
	if out, err := x.Run(ctx, append(apt, "update", "-q")...); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(out, 20))
	}
	args := append(apt, "install", "-y", "-q", "--no-install-recommends", "--allow-downgrades")
	for _, p := range missing {
		args = append(args, p.String())
	}
	if out, err := x.Run(ctx, args...); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(out, 20))
	}
	fmt.Fprintf(out, "PACKAGES installed %s\n", joinPackages(missing))
	return nil
}

func joinPackages(ps []Package) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, " ")
}
