package lab

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// The lab's names and addresses. They are fixed, not flags: the network
// rules, the certificates and the cleanup all derive from them, and one lab
// per machine is what the tests need.
const (
	// ContextName is the kubeconfig context (and cluster) name.
	ContextName = "sortie-lab"
	// LabBridge carries the control plane's and the nodes' addresses. It has
	// no port: nothing but the host's own stack reaches it.
	LabBridge = "sortie0"
	// LabNet is the network of LabBridge's addresses; the API server is on
	// its first, node i on its (i+1)th.
	LabNet = "10.245.0.0/24"
	// APIServerIP is the control plane's address (on LabBridge).
	APIServerIP = "10.245.0.1"
	// PodBridgePrefix names the nodes' pod bridges: sortiebr0, sortiebr1, ...
	PodBridgePrefix = "sortiebr"
	// ClusterCIDR holds every node's pod /24 (10.244.<i>.0/24).
	ClusterCIDR = "10.244.0.0/16"
	// ServiceCIDR is the Service cluster IP range.
	ServiceCIDR = "10.96.0.0/24"
	// APIServiceIP is the kubernetes Service's cluster IP.
	APIServiceIP = "10.96.0.1"
	// DNSServiceIP is kube-dns's cluster IP.
	DNSServiceIP = "10.96.0.10"
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain = "cluster.local"
	// DefaultRegistry is the loopback registry's address.
	DefaultRegistry = "127.0.0.1:5000"
	// CgroupPrefix names the nodes' cgroup roots: /sortie-lab-1, ...
	CgroupPrefix = "sortie-lab-"
	// RuleComment marks every iptables rule the lab adds.
	RuleComment = "sortie-lab"
	// MaxNodes bounds --nodes: each node takes one /24 of ClusterCIDR and
	// one address of LabNet, and every node shares two cores.
	MaxNodes = 4
)

// Layout is where the lab keeps its files under the state directory.
type Layout struct {
	// State is the state directory (absolute).
	State string
	// Nodes is how many nodes run.
	Nodes int
}

// Path joins elements under the state directory.
func (l Layout) Path(elem ...string) string {
	return filepath.Join(append([]string{l.State}, elem...)...)
}

// PKI is the directory of keys, certificates and component kubeconfigs.
func (l Layout) PKI() string { return l.Path("pki") }

// Etc is the directory of rendered configuration.
func (l Layout) Etc() string { return l.Path("etc") }

// Var holds the cluster's data (etcd, containerd roots, kubelet roots, IPAM,
// volumes); `down` removes it, so each `up` starts empty.
func (l Layout) Var() string { return l.Path("var") }

// Run holds sockets and containerd's state; `down` removes it.
func (l Layout) Run() string { return l.Path("run") }

// Pids holds one pid file per started process.
func (l Layout) Pids() string { return l.Path("pids") }

// Logs holds one log file per started process.
func (l Layout) Logs() string { return l.Path("logs") }

// Kubeconfig is the admin kubeconfig `up` writes for users and tests.
func (l Layout) Kubeconfig() string { return l.Path("kubeconfig") }

// Manifest is the file that describes a running lab (see Manifest).
func (l Layout) Manifest() string { return l.Path("lab.json") }

// Saved is the baseline up records before it changes anything (Baseline).
func (l Layout) Saved() string { return l.Path("baseline.json") }

// ReportVolume is the directory of the i-th report PersistentVolume.
func (l Layout) ReportVolume(i int) string {
	return l.Path("var", "volumes", "report-"+strconv.Itoa(i))
}

// NodeList returns every node of the lab.
func (l Layout) NodeList() []Node {
	out := make([]Node, l.Nodes)
	for i := range out {
		out[i] = l.Node(i)
	}
	return out
}

// Node is one node of the lab: its own containerd and kubelet.
type Node struct {
	// Index is 0 for the first node.
	Index int
	// Name is the node's name, sortie-lab-1, sortie-lab-2, ...
	Name string
	// IP is the node's address on LabBridge; the first node shares the API
	// server's.
	IP string
	// Bridge is the pod bridge, PodCIDR its pods' /24, Gateway the bridge's
	// address in it.
	Bridge, PodCIDR, Gateway string
	// HealthzPort is the kubelet's loopback healthz port.
	HealthzPort int
	// CgroupRoot is the kubelet's cgroup root, /sortie-lab-<n>.
	CgroupRoot string

	// Files of this node, under the state directory.
	ContainerdConfig, ContainerdRoot, ContainerdState, Socket string
	CNIConfDir, IPAMDir                                       string
	KubeletConfig, KubeletRoot, PodLogs                       string
	KubeletKubeconfig, ServingCert, ServingKey                string
}

// Node returns node i (0-based).
func (l Layout) Node(i int) Node {
	n := strconv.Itoa(i + 1)
	name := "sortie-lab-" + n
	return Node{
		Index:             i,
		Name:              name,
		IP:                fmt.Sprintf("10.245.0.%d", i+1),
		Bridge:            PodBridgePrefix + strconv.Itoa(i),
		PodCIDR:           fmt.Sprintf("10.244.%d.0/24", i),
		Gateway:           fmt.Sprintf("10.244.%d.1", i),
		HealthzPort:       10248 + 20*i,
		CgroupRoot:        "/" + CgroupPrefix + n,
		ContainerdConfig:  l.Path("etc", "containerd-"+n+".toml"),
		ContainerdRoot:    l.Path("var", "containerd-"+n),
		ContainerdState:   l.Path("run", "containerd-"+n),
		Socket:            l.Path("run", "containerd-"+n, "containerd.sock"),
		CNIConfDir:        l.Path("etc", "cni-"+n),
		IPAMDir:           l.Path("var", "cni-ipam-"+n),
		KubeletConfig:     l.Path("etc", "kubelet-"+n+".yaml"),
		KubeletRoot:       l.Path("var", "kubelet-"+n),
		PodLogs:           l.Path("var", "pod-logs-"+n),
		KubeletKubeconfig: l.Path("pki", "kubelet-"+n+".kubeconfig"),
		ServingCert:       l.Path("pki", "kubelet-"+n+"-serving.crt"),
		ServingKey:        l.Path("pki", "kubelet-"+n+"-serving.key"),
	}
}
