package lab

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRulesNoNAT: the lab adds no NAT, and its drops are in mangle's
// FORWARD, which every forwarded packet passes before filter's: kube-proxy
// inserts its own FORWARD jumps at the top of filter, and its KUBE-FORWARD
// chain accepts marked and established traffic, which would otherwise get
// past a drop in filter.
func TestRulesNoNAT(t *testing.T) {
	for _, r := range Rules() {
		s := r.String()
		if r.Table != "mangle" || r.Chain != "FORWARD" {
			t.Errorf("rule in %s %s, want mangle FORWARD: %s", r.Table, r.Chain, s)
		}
		for _, target := range []string{"MASQUERADE", "SNAT", "DNAT", "ACCEPT"} {
			if slices.Contains(r.Spec, target) {
				t.Errorf("rule with %s: %s", target, s)
			}
		}
		if !hasComment(r.Spec, RuleComment) {
			t.Errorf("rule without the lab's comment (down could not find it): %s", s)
		}
	}
}

// TestForwardDropsPodTrafficLeaving: a FORWARD rule drops IPv4 from the
// pod network that leaves by an interface that is not a pod bridge, and
// one drops what comes in to it by one.
func TestForwardDropsPodTrafficLeaving(t *testing.T) {
	want := map[string]bool{
		"iptables -w -t mangle -A FORWARD -s 10.244.0.0/16 ! -o sortiebr+ -m comment --comment sortie-lab -j DROP": false,
		"iptables -w -t mangle -A FORWARD -d 10.244.0.0/16 ! -i sortiebr+ -m comment --comment sortie-lab -j DROP": false,
	}
	for _, r := range Rules() {
		if _, ok := want[r.String()]; ok {
			want[r.String()] = true
		}
	}
	for rule, found := range want {
		if !found {
			t.Errorf("missing rule %s", rule)
		}
	}
}

func TestRuleCommandInsertsFirst(t *testing.T) {
	r := Rules()[0]
	got := r.Command("-I")
	if d := cmp.Diff([]string{"iptables", "-w", "-t", "mangle", "-I", "FORWARD", "1"}, got[:7]); d != "" {
		t.Errorf("insert (-want +got):\n%s", d)
	}
	if got := Rules()[2].Command("-D")[0]; got != "ip6tables" {
		t.Errorf("IPv6 rule runs %s", got)
	}
}

func TestBridgeCommands(t *testing.T) {
	got := BridgeCommands(Layout{State: "/s", Nodes: 2})
	want := [][]string{
		{"ip", "link", "add", "sortie0", "type", "bridge"},
		{"ip", "link", "set", "sortie0", "up"},
		{"ip", "addr", "add", "10.245.0.1/32", "dev", "sortie0"},
		{"ip", "addr", "add", "10.245.0.2/32", "dev", "sortie0"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestSplitRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`-A INPUT -j KUBE-FIREWALL`, []string{"-A", "INPUT", "-j", "KUBE-FIREWALL"}},
		{`-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS`,
			[]string{"-A", "INPUT", "-m", "comment", "--comment", "kubernetes health check service ports", "-j", "KUBE-NODEPORTS"}},
		{`-A X -m comment --comment "say \"hi\""  -j DROP`, []string{"-A", "X", "-m", "comment", "--comment", `say "hi"`, "-j", "DROP"}},
		{`-A X -m comment --comment ""`, []string{"-A", "X", "-m", "comment", "--comment", ""}},
		{"", nil},
	} {
		if d := cmp.Diff(tc.want, SplitRule(tc.in)); d != "" {
			t.Errorf("SplitRule(%q) (-want +got):\n%s", tc.in, d)
		}
	}
}

const sampleFilter = `-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N KUBE-FIREWALL
-N KUBE-FORWARD
-N OTHER
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -j KUBE-FIREWALL
-A INPUT -j OTHER
-A FORWARD -s 10.244.0.0/16 ! -o sortiebr+ -m comment --comment sortie-lab -j DROP
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP
-A OTHER -j ACCEPT
`

func TestKubeChainCleanup(t *testing.T) {
	got := KubeChainCleanup("iptables", "filter", sampleFilter)
	want := [][]string{
		{"iptables", "-w", "-t", "filter", "-D", "INPUT", "-m", "comment", "--comment", "kubernetes health check service ports", "-j", "KUBE-NODEPORTS"},
		{"iptables", "-w", "-t", "filter", "-D", "INPUT", "-j", "KUBE-FIREWALL"},
		{"iptables", "-w", "-t", "filter", "-D", "FORWARD", "-m", "comment", "--comment", "kubernetes forwarding rules", "-j", "KUBE-FORWARD"},
		{"iptables", "-w", "-t", "filter", "-F", "KUBE-FIREWALL"},
		{"iptables", "-w", "-t", "filter", "-F", "KUBE-FORWARD"},
		{"iptables", "-w", "-t", "filter", "-X", "KUBE-FIREWALL"},
		{"iptables", "-w", "-t", "filter", "-X", "KUBE-FORWARD"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestLabRules(t *testing.T) {
	got := labRules(sampleFilter)
	var other []string
	for _, line := range strings.Split(strings.TrimSpace(sampleFilter), "\n") {
		if !slices.Contains(got, line) {
			other = append(other, line)
		}
	}
	want := []string{"-P INPUT ACCEPT", "-P FORWARD ACCEPT", "-P OUTPUT ACCEPT", "-N OTHER", "-A INPUT -j OTHER", "-A OTHER -j ACCEPT"}
	if d := cmp.Diff(want, other); d != "" {
		t.Errorf("lines not taken for the lab's (-want +got):\n%s", d)
	}
}
