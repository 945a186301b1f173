// Package lab builds, starts and stops a real Kubernetes cluster on this
// machine, for the tests of record of the cluster path (`soak lab up |
// down | status | build`).
//
// What it builds: kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet, kube-proxy and kubectl from k8s.io/kubernetes; CoreDNS, the
// pause program and a loopback OCI registry; and the NetworkPolicy enforcer
// (kube-router's firewall, build/netpol) with the probe its tests run in
// pods; each from the pinned module versions of a module of its own under
// build/ (never the product's go.mod). The binaries are cached under --cache by a key of their module
// files and the Go toolchain, so a second `up` on the same machine builds
// nothing. etcd, containerd, runc, the CNI plugins, iptables and conntrack
// are pinned Debian packages. The PKI is made here, in Go.
//
// What it starts: etcd, the control plane, one containerd and one kubelet
// per node (two nodes by default, each with its own containerd root, state,
// socket, CNI bridge and pod /24, and its own kubelet node IP, root dir and
// cgroup root), one kube-proxy for all of them in the host's network
// namespace, kube-router's network policy controller (one for every node:
// the nodes share one filter table; it serves no port), CoreDNS, the
// registry, a default StorageClass with local
// volumes for the report PVC, and two fixture target Deployments. It
// writes a kubeconfig with the context sortie-lab and pushes this
// checkout's images (`sortie-images build --push`), so that the chart pulls
// them by digest from the loopback registry.
//
// The network rules it keeps, which its unit tests hold its configuration
// and rule set to, and its tests of record (lab_test.go, build tag lab) the
// running lab:
//   - every server binds 127.0.0.1 or an address on a bridge the lab made;
//   - the pod network has no default route, only routes to the Service
//     range, the lab's bridge and the other nodes' pods, and it is not
//     masqueraded off the machine: the CNI's ipMasq is off and the lab adds
//     no NAT rule (kube-proxy's own masquerade, of a pod reaching itself
//     through a Service, rewrites to a pod bridge's address);
//   - a FORWARD rule (in the mangle table, which forwarded packets pass
//     before kube-proxy's filter rules) drops pod traffic that would leave
//     by an interface the lab did not make, and traffic to the pods that
//     comes in by one;
//   - CoreDNS has no forward plugin: no name is looked up off the machine;
//   - every registry name containerd may be asked for resolves to the
//     loopback registry, and containerd's own proxy is a closed loopback
//     port, so no pull leaves the machine.
//
// Every process it starts is recorded in a pid file under --state with its
// start time; `down` stops exactly those, then removes the bridges, the
// iptables rules and chains, the enforcer's ipsets, the mounts, the network namespaces and the
// cgroups the cluster made, restores the kernel settings it changed, and
// checks that nothing is left (FindLeftovers), exiting non-zero if
// anything is. up checks the first rule on the running lab as well: every
// socket its processes listen on (Listeners).
package lab
