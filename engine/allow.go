package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
)

// Limits of --allow-targets.
const (
	maxAllowEntries = 1024
	maxAllowLen     = 64 << 10
)

// Allowlist is where an engine may send load and statsd datagrams
// (--allow-targets), checked when an execution is asked for, before
// anything of it is built: a caller that holds a driver certificate still
// cannot aim the engine at an address outside it.
//
// An entry is a host name (matched whole, case-insensitively: the name in
// the target URL, never what it resolves to), a wildcard *.domain
// (any name under domain, not domain itself), an IP address, or a CIDR
// prefix (for IP literals in a URL and the statsd address, which is always
// one). A name never matches an IP literal nor a prefix a name. "*" alone
// allows every target. The zero Allowlist allows nothing.
type Allowlist struct {
	any      bool
	names    map[string]bool
	suffixes []string // ".domain"
	prefixes []netip.Prefix
	text     string
}

// ParseAllowlist reads --allow-targets: entries separated by commas
// (spaces around them ignored). Every bad entry is named.
func ParseAllowlist(s string) (*Allowlist, error) {
	if len(s) > maxAllowLen {
		return nil, fmt.Errorf("--allow-targets is %d bytes, more than %d", len(s), maxAllowLen)
	}
	a := &Allowlist{names: map[string]bool{}}
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--allow-targets is empty: name the targets' hosts or CIDRs, or * for any")
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxAllowEntries {
		return nil, fmt.Errorf("--allow-targets has %d entries, more than %d", len(parts), maxAllowEntries)
	}
	var errs []error
	var kept []string
	for i, raw := range parts {
		e := strings.TrimSpace(raw)
		if err := a.add(e); err != nil {
			errs = append(errs, fmt.Errorf("--allow-targets entry %d %q: %w", i+1, e, err))
			continue
		}
		kept = append(kept, e)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if a.any && len(kept) > 1 {
		return nil, errors.New("--allow-targets: * allows any target; give it alone")
	}
	a.text = strings.Join(kept, ",")
	return a, nil
}

func (a *Allowlist) add(e string) error {
	switch {
	case e == "":
		return errors.New("empty entry")
	case e == "*":
		a.any = true
	case strings.Contains(e, "/"):
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return fmt.Errorf("not a CIDR prefix: %w", err)
		}
		if m := p.Masked(); m != p {
			return fmt.Errorf("has host bits set: write %s", m)
		}
		a.prefixes = append(a.prefixes, p)
	case strings.HasPrefix(e, "*."):
		d := strings.ToLower(e[2:])
		if err := checkName(d); err != nil {
			return err
		}
		a.suffixes = append(a.suffixes, "."+d)
	default:
		if ip, err := netip.ParseAddr(e); err == nil {
			if ip.Zone() != "" {
				return errors.New("an address with a zone is not a target address")
			}
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			return nil
		}
		if strings.Contains(e, ":") {
			return errors.New("a port is not part of an entry: name the host only")
		}
		if err := checkName(strings.ToLower(e)); err != nil {
			return err
		}
		a.names[strings.ToLower(e)] = true
	}
	return nil
}

// checkName accepts a DNS name as a target URL carries it: labels of
// letters, digits, '-' and '_', 1 to 63 bytes each, 253 in all. A name
// of digits and dots alone would read as an address in some resolvers
// and is refused.
func checkName(n string) error {
	if n == "" || len(n) > 253 {
		return fmt.Errorf("a host name is 1 to 253 bytes, not %d", len(n))
	}
	digits := true
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("label %q: a label is 1 to 63 bytes", label)
		}
		for _, c := range []byte(label) {
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return fmt.Errorf("byte %q is not part of a host name", c)
			}
			if c < '0' || c > '9' {
				digits = false
			}
		}
	}
	if digits {
		return errors.New("digits and dots only: not an address Go reads, and not a name")
	}
	return nil
}

// String is the list as given, normalised (spaces trimmed).
func (a *Allowlist) String() string { return a.text }

// Any reports whether every target is allowed.
func (a *Allowlist) Any() bool { return a.any }

// AllowsHost reports whether a target URL's host (no brackets, no port)
// is in the list.
func (a *Allowlist) AllowsHost(host string) bool {
	if a.any {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return a.allowsAddr(ip)
	}
	h := strings.ToLower(host)
	if a.names[h] {
		return true
	}
	for _, s := range a.suffixes {
		if len(h) > len(s) && strings.HasSuffix(h, s) {
			return true
		}
	}
	return false
}

func (a *Allowlist) allowsAddr(ip netip.Addr) bool {
	if a.any {
		return true
	}
	ip = ip.WithZone("").Unmap()
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// check refuses a spec whose target or statsd address is outside the
// list, with the typed refusal naming it.
func (a *Allowlist) check(s *spec, host string, backendName string) error {
	if a == nil {
		return nil
	}
	if !a.AllowsHost(host) {
		return enginev1.TargetRefusal(enginev1.FieldURL, host, fmt.Sprintf(
			"execution %q: target host %q is not in engine %s--allow-targets (%s)", s.label, host, nameForMsg(backendName), a))
	}
	if s.stats != nil {
		ap := netip.MustParseAddrPort(s.stats.addr)
		if !a.allowsAddr(ap.Addr()) {
			return enginev1.TargetRefusal(enginev1.FieldStatsAddress, s.stats.addr, fmt.Sprintf(
				"execution %q: statsd address %s is not in engine %s--allow-targets (%s)", s.label, s.stats.addr, nameForMsg(backendName), a))
		}
	}
	return nil
}

// describe is the list for the log: "any" for nil.
func (a *Allowlist) describe() string {
	if a == nil || a.any {
		return "*"
	}
	return a.text
}
