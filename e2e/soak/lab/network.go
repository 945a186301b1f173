package lab

import (
	"bufio"
	"context"
	"fmt"
	"strings"
)

// Rule is one iptables rule the lab adds.
type Rule struct {
	// IPv6 selects ip6tables.
	IPv6  bool
	Table string
	Chain string
	// Spec is the rule's match and target, without table and chain.
	Spec []string
}

// Command returns the iptables command line for op (-C, -I, -D) on r.
func (r Rule) Command(op string) []string {
	cmd := "iptables"
	if r.IPv6 {
		cmd = "ip6tables"
	}
	args := []string{cmd, "-w", "-t", r.Table, op, r.Chain}
	if op == "-I" {
		args = append(args, "1")
	}
	return append(args, r.Spec...)
}

func (r Rule) String() string { return strings.Join(r.Command("-A"), " ") }

// Rules are the iptables rules the lab adds: the pod network is closed off
// from every interface the lab did not make. Pods have no default route;
// these rules drop what would still be forwarded between a pod bridge and
// any other interface, both ways, and every forwarded IPv6 packet of a pod
// bridge (pods have no IPv6 addresses). There is no NAT rule among them:
// pod traffic is never masqueraded. Traffic between pods, between pods and
// the host's own addresses (the API server, the lab's bridge), and to
// Services (which kube-proxy turns into traffic to pods) stays allowed.
//
// They are in the mangle table's FORWARD chain, which a forwarded packet
// passes before the filter table's: kube-proxy puts its jumps at the top
// of filter's FORWARD, and its KUBE-FORWARD chain accepts marked and
// established traffic there before a drop below it would be reached.
func Rules() []Rule {
	bridges := PodBridgePrefix + "+"
	mark := []string{"-m", "comment", "--comment", RuleComment}
	drop := func(v6 bool, spec ...string) Rule {
		return Rule{IPv6: v6, Table: "mangle", Chain: "FORWARD", Spec: append(append(spec, mark...), "-j", "DROP")}
	}
	return []Rule{
		drop(false, "-s", ClusterCIDR, "!", "-o", bridges),
		drop(false, "-d", ClusterCIDR, "!", "-i", bridges),
		drop(true, "-i", bridges),
		drop(true, "-o", bridges),
	}
}

// Sysctls are the kernel settings the lab's processes may change, by
// /proc/sys path: up saves them before it starts anything and down puts
// them back. ip_forward comes first: writing it resets every interface's
// forwarding setting, which the rest then restore.
var Sysctls = []string{
	"net/ipv4/ip_forward",
	"net/ipv4/conf/all/forwarding",
	"net/ipv4/conf/default/forwarding",
	"net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	// The kubelet's tunables.
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// LabSysctls are the settings up itself makes: forwarding, which the pod
// bridges need (the rules above confine it), and bridged traffic through
// iptables, without which kube-proxy's Service rules miss pods that share
// a bridge.
var LabSysctls = map[string]string{
	"net/ipv4/ip_forward":                "1",
	"net/bridge/bridge-nf-call-iptables": "1",
}

// BridgeCommands are the ip commands that make the lab's bridge with the
// API server's and every node's address (/32 each: the host answers them
// itself and routes nothing through the bridge).
func BridgeCommands(l Layout) [][]string {
	cmds := [][]string{
		{"ip", "link", "add", LabBridge, "type", "bridge"},
		{"ip", "link", "set", LabBridge, "up"},
	}
	seen := map[string]bool{}
	for _, ip := range append([]string{APIServerIP}, nodeIPs(l)...) {
		if !seen[ip] {
			seen[ip] = true
			cmds = append(cmds, []string{"ip", "addr", "add", ip + "/32", "dev", LabBridge})
		}
	}
	return cmds
}

func nodeIPs(l Layout) []string {
	var ips []string
	for _, n := range l.NodeList() {
		ips = append(ips, n.IP)
	}
	return ips
}

// LabLinks are the interfaces the lab makes (the pod bridges are made by
// the CNI bridge plugin at the first pod; down removes them all).
func LabLinks(l Layout) []string {
	links := []string{LabBridge}
	for _, n := range l.NodeList() {
		links = append(links, n.Bridge)
	}
	return links
}

// KubeChainCleanup returns the iptables commands that remove what the
// cluster's own components left in one table of `iptables -S` output:
// every rule of a built-in chain that jumps to a KUBE- or CNI- chain, then
// those chains, flushed first and deleted after (a chain cannot be deleted
// while another still jumps to it).
func KubeChainCleanup(cmd, table, listing string) [][]string {
	var del, flush, drop [][]string
	sc := bufio.NewScanner(strings.NewReader(listing))
	for sc.Scan() {
		f := SplitRule(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "-N" && clusterChain(f[1]):
			flush = append(flush, []string{cmd, "-w", "-t", table, "-F", f[1]})
			drop = append(drop, []string{cmd, "-w", "-t", table, "-X", f[1]})
		case len(f) > 2 && f[0] == "-A" && !clusterChain(f[1]) && jumpsToCluster(f):
			del = append(del, append([]string{cmd, "-w", "-t", table, "-D"}, f[1:]...))
		}
	}
	return append(append(del, flush...), drop...)
}

func clusterChain(name string) bool {
	return strings.HasPrefix(name, "KUBE-") || strings.HasPrefix(name, "CNI-")
}

func jumpsToCluster(f []string) bool {
	for i := 0; i+1 < len(f); i++ {
		if (f[i] == "-j" || f[i] == "-g") && clusterChain(f[i+1]) {
			return true
		}
	}
	return false
}

// ensureRule inserts r unless it is there.
func ensureRule(ctx context.Context, x Exec, r Rule) error {
	if _, err := x.Run(ctx, r.Command("-C")...); err == nil {
		return nil
	}
	if out, err := x.Run(ctx, r.Command("-I")...); err != nil {
		return fmt.Errorf("add rule %s: %w: %s", r, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeRule deletes every copy of r.
func removeRule(ctx context.Context, x Exec, r Rule) {
	for range 16 {
		if _, err := x.Run(ctx, r.Command("-D")...); err != nil {
			return
		}
	}
}

// SplitRule splits a line of `iptables -S` output into its words: iptables
// quotes a word with spaces ("a comment") and escapes a quote inside it.
func SplitRule(line string) []string {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
		case c == '"':
			quoted, inWord = !quoted, true
		case !quoted && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
