package lab

import (
	"fmt"
	"path/filepath"
)

// Debian's binaries the lab runs.
const (
	EtcdBin       = "/usr/bin/etcd"
	ContainerdBin = "/usr/bin/containerd"
	CtrBin        = "/usr/bin/ctr"
)

// ClosedProxy is the HTTP(S) proxy containerd is given: a loopback port
// nothing listens on. Pulls from the loopback registry bypass proxies
// (Go never proxies a loopback address); any other pull fails here
// instead of leaving the machine.
const ClosedProxy = "http://127.0.0.1:9"

// Daemons returns the lab's processes in the order they start: the
// registry, etcd, each node's containerd, the API server, the controller
// manager and the scheduler, each node's kubelet, kube-proxy and the
// NetworkPolicy enforcer. Every address they listen on is loopback or the
// lab's bridge.
func Daemons(l Layout, bins Binaries, registry string) []Daemon {
	pki := func(f string) string { return filepath.Join(l.PKI(), f) }
	ds := []Daemon{
		{Name: "registry", Path: bins["registry"], Args: []string{"--listen", registry}},
		{Name: "etcd", Path: EtcdBin, Args: []string{
			"--name", "sortie-lab", "--data-dir", l.Path("var", "etcd"),
			"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
			"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
			"--initial-cluster", "sortie-lab=http://127.0.0.1:2380", "--listen-metrics-urls", "http://127.0.0.1:2381",
		}},
	}
	for _, n := range l.NodeList() {
		ds = append(ds, Daemon{Name: containerdName(n), Path: ContainerdBin, Args: []string{"--config", n.ContainerdConfig},
			Env: []string{"HTTP_PROXY=" + ClosedProxy, "HTTPS_PROXY=" + ClosedProxy, "NO_PROXY=127.0.0.1,localhost"}})
	}
	ds = append(ds,
		Daemon{Name: "kube-apiserver", Path: bins["kube-apiserver"], Args: []string{
			"--etcd-servers=http://127.0.0.1:2379",
			"--bind-address=" + APIServerIP, "--advertise-address=" + APIServerIP, "--secure-port=6443",
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--client-ca-file=" + pki("ca.crt"), "--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
			"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + pki("ca.crt"), "--kubelet-preferred-address-types=InternalIP",
			"--service-account-issuer=https://kubernetes.default.svc." + ClusterDomain,
			"--service-account-key-file=" + pki("sa.pub"), "--service-account-signing-key-file=" + pki("sa.key"),
			"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
			"--allow-privileged=true", "--profiling=false",
		}},
		Daemon{Name: "kube-controller-manager", Path: bins["kube-controller-manager"], Args: append(componentAuth(pki("controller-manager.kubeconfig")),
			"--bind-address=127.0.0.1", "--leader-elect=false", "--use-service-account-credentials=true",
			"--service-account-private-key-file="+pki("sa.key"), "--root-ca-file="+pki("ca.crt"),
			"--cluster-signing-cert-file="+pki("ca.crt"), "--cluster-signing-key-file="+pki("ca.key"),
			"--profiling=false")},
		Daemon{Name: "kube-scheduler", Path: bins["kube-scheduler"], Args: append(componentAuth(pki("scheduler.kubeconfig")),
			"--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false")},
	)
	for _, n := range l.NodeList() {
		ds = append(ds, Daemon{Name: kubeletName(n), Path: bins["kubelet"], Args: []string{
			"--config=" + n.KubeletConfig, "--kubeconfig=" + n.KubeletKubeconfig,
			"--hostname-override=" + n.Name, "--node-ip=" + n.IP, "--root-dir=" + n.KubeletRoot,
		}})
	}
	ds = append(ds, Daemon{Name: "kube-proxy", Path: bins["kube-proxy"], Args: []string{"--config=" + l.Path("etc", "kube-proxy.yaml")}})
	return append(ds, NetpolDaemon(l, bins))
}

// NetpolName is the NetworkPolicy enforcer's process name.
const NetpolName = "kube-router"

// NetpolDaemon is the NetworkPolicy enforcer: kube-router's firewall, one
// for every node (they share the host's filter table), which listens on
// nothing. It reads the cluster with the admin kubeconfig: it lists pods,
// namespaces and policies and reads its node.
func NetpolDaemon(l Layout, bins Binaries) Daemon {
	return Daemon{Name: NetpolName, Path: bins["kube-router-netpol"], Args: []string{
		"--kubeconfig=" + l.Kubeconfig(), "--node=" + l.Node(0).Name,
		"--service-cluster-ip-range=" + ServiceCIDR, "--iptables-sync-period=1m",
	}}
}

func componentAuth(kubeconfig string) []string {
	return []string{"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig}
}

func containerdName(n Node) string { return fmt.Sprintf("containerd-%d", n.Index+1) }
func kubeletName(n Node) string    { return fmt.Sprintf("kubelet-%d", n.Index+1) }

// StopOrder is the order down stops the lab's processes in: the
// NetworkPolicy enforcer (on SIGTERM it removes its own rules and sets),
// the node agents and the control plane (so nothing restarts a pod that goes),
// the container runtimes after the pods' tasks are gone, the data last.
func StopOrder(maxNodes int) []string {
	names := []string{NetpolName, "kube-proxy"}
	for i := range maxNodes {
		names = append(names, fmt.Sprintf("kubelet-%d", i+1))
	}
	names = append(names, "kube-scheduler", "kube-controller-manager", "kube-apiserver")
	for i := range maxNodes {
		names = append(names, fmt.Sprintf("containerd-%d", i+1))
	}
	return append(names, "etcd", "registry")
}

func daemonByName(ds []Daemon, name string) Daemon {
	for _, d := range ds {
		if d.Name == name {
			return d
		}
	}
	panic("lab: no daemon " + name)
}
