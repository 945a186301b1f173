package lab

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	testState = "/var/lib/sortie-lab"
	testCache = "/var/cache/sortie-lab"
)

// cleanSystem is a machine on which the lab left nothing: other processes,
// links, mounts, rules and namespaces that are not the lab's.
func cleanSystem() System {
	return System{
		Self: 100,
		Procs: []ProcInfo{
			{PID: 1, Cmdline: []string{"/sbin/init"}},
			{PID: 100, Cmdline: []string{"soak", "lab", "down", "--state", testState}},
			{PID: 101, Cmdline: []string{"/usr/bin/containerd", "--config", "/etc/containerd/config.toml"}},
		},
		Links: "1: lo: <LOOPBACK,UP> mtu 65536 qdisc noqueue state UNKNOWN\n" +
			"4: eth0: <BROADCAST,UP> mtu 1400 qdisc pfifo_fast state UP\n" +
			"5: veth0@if2: <BROADCAST,UP> mtu 1500 master docker0 state UP\n",
		Mounts:   []string{"/", "/proc", "/sys/fs/cgroup", "/run/netns/mine"},
		Netns:    []string{"mine", "cni-before"},
		Baseline: Baseline{Netns: []string{"mine", "cni-before"}, Sysctls: map[string]string{"net/ipv4/ip_forward": "0"}},
		Rules:    map[string]string{"iptables filter": "-P INPUT ACCEPT\n-N OTHER\n-A INPUT -j OTHER\n"},
		IPSets:   "blocklist\nKUBE-LIKE\n",
		Sysctls:  map[string]string{"net/ipv4/ip_forward": "0"},
		LogLinks: map[string]string{"/var/log/containers/x.log": "/var/log/pods/x/0.log"},
	}
}

func TestFindLeftoversClean(t *testing.T) {
	if got := FindLeftovers(cleanSystem(), testState, testCache); len(got) != 0 {
		t.Errorf("leftovers on a clean machine: %v", got)
	}
}

// TestFindLeftoversEveryKind adds one thing of each kind the lab makes and
// expects each named.
func TestFindLeftoversEveryKind(t *testing.T) {
	s := cleanSystem()
	s.LabProcs = []Proc{{Name: "etcd", PidFile: PidFile{PID: 200, Start: 1}, Alive: true}, {Name: "kubelet-1", PidFile: PidFile{PID: 201}, Alive: false}}
	s.Procs = append(s.Procs,
		ProcInfo{PID: 300, Cmdline: []string{testCache + "/bin/kube-v1/kubelet", "--v=2"}},
		ProcInfo{PID: 301, Cmdline: []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", testState + "/run/containerd-1/containerd.sock"}},
		ProcInfo{PID: 302, Cmdline: []string{"/usr/bin/containerd", "--config=" + testState + "/etc/containerd-2.toml"}})
	s.Links += "9: sortie0: <BROADCAST,UP> mtu 1500 state UP\n" +
		"10: sortiebr1: <BROADCAST,UP> mtu 1500 state UP\n" +
		"11: veth1234@if2: <BROADCAST,UP> mtu 1500 master sortiebr0 state UP\n"
	s.Mounts = append(s.Mounts, testState+"/run/containerd-1/io.containerd.runtime.v2.task/k8s.io/abc/rootfs", "/run/netns/cni-1234")
	s.Netns = append(s.Netns, "cni-1234")
	s.Rules["iptables nat"] = "-N KUBE-SERVICES\n-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n"
	s.Rules["iptables filter"] += "-A FORWARD -s 10.244.0.0/16 ! -o sortiebr+ -m comment --comment sortie-lab -j DROP\n"
	// The NetworkPolicy enforcer's chains, its FORWARD jump and its sets.
	s.Rules["iptables filter"] += "-N KUBE-ROUTER-FORWARD\n-A FORWARD -m comment --comment \"kube-router netpol - TEMCG2JMHZYE7H7T\" -j KUBE-ROUTER-FORWARD\n"
	s.IPSets += "KUBE-SRC-3XJ2LM6DIQPH4WGF\nKUBE-DST-AAAA\nTMP-BBBB\ninet6:KUBE-SRC-CCCC\n"
	s.Cgroups = []string{"/sys/fs/cgroup/memory/sortie-lab-1"}
	s.Sysctls["net/ipv4/ip_forward"] = "1"
	s.LogLinks["/var/log/containers/y.log"] = testState + "/var/pod-logs-1/y/0.log"
	s.HostPaths = []string{"/var/lib/kubelet", "/var/lib/cni"}
	s.Baseline.HostPaths = []string{"/var/lib/cni"}

	var got []string
	for _, l := range FindLeftovers(s, testState, testCache) {
		got = append(got, l.String())
	}
	want := []string{
		"process etcd pid=200",
		"process pid=300 " + testCache + "/bin/kube-v1/kubelet --v=2",
		"process pid=301 /usr/bin/containerd-shim-runc-v2 -namespace k8s.io -address " + testState + "/run/containerd-1/containerd.sock",
		"process pid=302 /usr/bin/containerd --config=" + testState + "/etc/containerd-2.toml",
		"link sortie0", "link sortiebr1", "link veth1234",
		"mount " + testState + "/run/containerd-1/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
		"mount /run/netns/cni-1234",
		"netns cni-1234",
		"iptables iptables filter: -A FORWARD -s 10.244.0.0/16 ! -o sortiebr+ -m comment --comment sortie-lab -j DROP",
		"iptables iptables filter: -N KUBE-ROUTER-FORWARD",
		`iptables iptables filter: -A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD`,
		"iptables iptables nat: -N KUBE-SERVICES",
		`iptables iptables nat: -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
		"ipset KUBE-SRC-3XJ2LM6DIQPH4WGF", "ipset KUBE-DST-AAAA", "ipset TMP-BBBB", "ipset inet6:KUBE-SRC-CCCC",
		"cgroup /sys/fs/cgroup/memory/sortie-lab-1",
		"sysctl net/ipv4/ip_forward=1 (was 0)",
		"file /var/log/containers/y.log -> " + testState + "/var/pod-logs-1/y/0.log",
		"file /var/lib/kubelet (made by the cluster)",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestParseMounts(t *testing.T) {
	data := "overlay /var/lib/sortie-lab/run/x/rootfs overlay rw 0 0\n" +
		"tmpfs /var/lib/sortie-lab/var/kubelet-1/pods/a\\040b tmpfs rw 0 0\n" +
		"proc /proc proc rw 0 0\n"
	got := parseMounts(data)
	want := []string{"/var/lib/sortie-lab/run/x/rootfs", "/var/lib/sortie-lab/var/kubelet-1/pods/a b", "/proc"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	under := mountsUnder(got, "/var/lib/sortie-lab")
	if len(under) != 2 || !strings.HasSuffix(under[0], "a b") {
		t.Errorf("mountsUnder = %v, want the two lab mounts deepest first", under)
	}
	if len(mountsUnder([]string{"/var/lib/sortie-lab2/x", "/var/lib/sortie-lab"}, "/var/lib/sortie-lab")) != 0 {
		t.Error("a sibling directory or the state directory itself counted as under it")
	}
}
