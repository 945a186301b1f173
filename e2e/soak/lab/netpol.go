package lab

import (
	"bufio"
	"context"
	"strings"
)

// The NetworkPolicy enforcer's names. kube-router's chains all begin with
// KUBE- (KUBE-ROUTER-INPUT, -FORWARD, -OUTPUT, KUBE-NWPLCY-*, KUBE-POD-FW-*),
// so the cleanup and the leftover check of the cluster's chains cover
// them; its ipsets are the lab's own concern.
const (
	// NetpolChain is the chain kube-router's FORWARD jump leads to; up
	// waits for that jump.
	NetpolChain = "KUBE-ROUTER-FORWARD"
	// ProbeImage is the image of netpol-probe in the lab's registry
	// (Manifest.Images), which the tests run in pods.
	ProbeImage = "netpol-probe"
)

// ipsetPrefixes are the prefixes of the ipsets kube-router makes: its
// policies' source and destination sets (KUBE-SRC-, KUBE-DST-), the
// temporary sets of a sync (TMP-), and the IPv6 forms of each.
var ipsetPrefixes = []string{"KUBE-SRC-", "KUBE-DST-", "TMP-", "inet6:KUBE-SRC-", "inet6:KUBE-DST-", "inet6:TMP-"}

// labIPSets returns the names of `ipset list -n` output that the lab's
// enforcer made.
func labIPSets(listing string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(listing))
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		for _, p := range ipsetPrefixes {
			if strings.HasPrefix(name, p) {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// removeIPSets destroys the enforcer's ipsets that are left (after a
// SIGKILL, say). It runs after the chains that match them are gone: a set
// a rule still names cannot be destroyed. Without the ipset command there
// is no set to remove.
func (b *lab) removeIPSets(ctx context.Context) {
	out, err := b.x.Run(ctx, "ipset", "list", "-n")
	if err != nil {
		return
	}
	for _, name := range labIPSets(string(out)) {
		if _, err := b.x.Run(ctx, "ipset", "destroy", name); err == nil {
			b.line("REMOVED ipset %s", name)
		}
	}
}
