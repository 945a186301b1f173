package driver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// resolveDNS resolves a dns pool's host:port once: A and AAAA answers,
// sorted (IPv4 before IPv6, numerically), de-duplicated, each joined with
// the port. An empty answer or a failed lookup is retried every
// ResolveInterval for up to ResolveTimeout: a headless Service has no
// records until its first engine is ready.
func resolveDNS(ctx context.Context, o Options, hostport string) ([]string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("dns pool %q: %w", hostport, err)
	}
	start := o.now()
	var last error
	for attempt := 1; ; attempt++ {
		addrs, err := lookup(ctx, o.resolver(), host, port)
		if err == nil && len(addrs) > 0 {
			return addrs, nil
		}
		if err == nil {
			err = fmt.Errorf("no A or AAAA records")
		}
		last = err
		waited := o.now().Sub(start)
		if waited+o.ResolveInterval > o.ResolveTimeout {
			return nil, fmt.Errorf("dns pool %s never resolved: %d lookups over %v, the last one: %w",
				hostport, attempt, waited.Round(time.Millisecond), last)
		}
		if err := o.clock().Sleep(ctx, o.ResolveInterval); err != nil {
			return nil, fmt.Errorf("dns pool %s: %w", hostport, err)
		}
	}
}

func lookup(ctx context.Context, r Resolver, host, port string) ([]string, error) {
	ips, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for _, ip := range ips {
		a, ok := netip.AddrFromSlice(ip.IP)
		if !ok {
			continue
		}
		// A v4-mapped v6 answer is the same engine as its v4 form.
		a = a.Unmap()
		if ip.Zone != "" && a.Is6() {
			a = a.WithZone(ip.Zone)
		}
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	addrs = slices.Compact(addrs)
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, net.JoinHostPort(a.String(), port))
	}
	return out, nil
}
