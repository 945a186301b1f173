// Command kube-router-netpol enforces NetworkPolicy on every node of the
// sortie lab: kube-router's network policy controller, run on its own, as
// `kube-router --run-firewall=true --run-router=false
// --run-service-proxy=false` would run it, with two differences the lab
// needs.
//
// The lab's nodes share the host's network namespace, so one filter table
// holds every node's pod rules. kube-router enforces policy only for the
// pods whose host IP is its own node's, and every instance removes the pod
// chains it does not know as stale: one instance per node would delete the
// other's rules on each sync. This program runs one instance for all of
// them: each pod's host IP is read as the IP of the node named by --node
// (a transform of the pod informer), so every pod of the lab is local to
// it.
//
// It serves nothing: kube-router's health and metrics servers (the health
// server binds every interface) are not started, and its heartbeats are
// drained here. On SIGINT or SIGTERM it stops the controller and removes
// its iptables chains and ipsets (kube-router itself leaves them).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/cloudnativelabs/kube-router/v2/pkg/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "kube-router-netpol: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig `file` of the cluster")
	node := flag.String("node", "", "`name` of the node whose IP every pod's host IP is read as")
	serviceCIDR := flag.String("service-cluster-ip-range", "", "the Services' cluster IP `range`")
	syncPeriod := flag.Duration("iptables-sync-period", time.Minute, "`interval` of full syncs between the event-driven ones")
	flag.Parse()
	if *kubeconfig == "" || *node == "" || *serviceCIDR == "" {
		return fmt.Errorf("--kubeconfig, --node and --service-cluster-ip-range are required")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	config := options.NewKubeRouterConfig()
	config.Kubeconfig = *kubeconfig
	config.HostnameOverride = *node
	config.ClusterIPCIDRs = []string{*serviceCIDR}
	config.IPTablesSyncPeriod = *syncPeriod
	config.RunFirewall, config.RunRouter, config.RunServiceProxy = true, false, false
	config.EnableIPv4, config.EnableIPv6 = true, false
	config.MetricsEnabled, config.MetricsPort, config.HealthPort = false, 0, 0
	nodeObj, err := utils.GetNodeObject(cs, *node)
	if err != nil {
		return err
	}
	nodeIP, err := utils.GetPrimaryNodeIP(nodeObj)
	if err != nil {
		return err
	}
	return serve(cs, config, nodeIP.String())
}

// serve runs the controller until SIGINT or SIGTERM, then cleans up.
func serve(cs kubernetes.Interface, config *options.KubeRouterConfig, nodeIP string) error {
	stop := make(chan struct{})
	factory := informers.NewSharedInformerFactory(cs, 0)
	pods := factory.Core().V1().Pods().Informer()
	if err := pods.SetTransform(localTo(nodeIP)); err != nil {
		return err
	}
	nss := factory.Core().V1().Namespaces().Informer()
	nps := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stop)
	for typ, ok := range factory.WaitForCacheSync(stop) {
		if !ok {
			return fmt.Errorf("informer cache of %v did not sync", typ)
		}
	}
	ipt, ipsets, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return err
	}
	var ipsetMu sync.Mutex
	npc, err := netpol.NewNetworkPolicyController(cs, config, pods, nps, nss, &ipsetMu, ipt, ipsets)
	if err != nil {
		return err
	}
	if _, err := pods.AddEventHandler(npc.PodEventHandler); err != nil {
		return err
	}
	if _, err := nss.AddEventHandler(npc.NamespaceEventHandler); err != nil {
		return err
	}
	if _, err := nps.AddEventHandler(npc.NetworkPolicyEventHandler); err != nil {
		return err
	}
	// The controller blocks on its heartbeats; nothing here reads them.
	beats := make(chan *healthcheck.ControllerHeartbeat, 10)
	go func() {
		for range beats {
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go npc.Run(beats, stop, &wg)
	klog.Infof("enforcing NetworkPolicy for every pod, as local to %s", nodeIP)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	close(stop)
	wg.Wait()
	npc.Cleanup()
	close(beats)
	return nil
}

// localTo returns the pod informer's transform: every pod that runs on a
// node (has a host IP) is made local to nodeIP. The pod's own IP, which
// the rules match, is left as it is.
func localTo(nodeIP string) func(any) (any, error) {
	return func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Status.HostIP != "" {
			p.Status.HostIP = nodeIP
			p.Status.HostIPs = []corev1.HostIP{{IP: nodeIP}}
		}
		return obj, nil
	}
}
