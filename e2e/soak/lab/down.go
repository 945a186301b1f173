package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/kube"
)

// podsTimeout bounds down's wait for the pods to go through their kubelets.
const podsTimeout = 90 * time.Second

// Down stops the lab and removes what it made (soak lab down). It goes on
// past every error, so that one stuck part leaves no more behind than it
// must, and ends with the leftover check: nil only when nothing is left.
func Down(ctx context.Context, env Env, o Options, out io.Writer) error {
	if env.Euid != 0 {
		return errors.New("soak lab down needs root")
	}
	o.Nodes = MaxNodes // every node a lab may have had
	b := newLab(env, o, out)
	b.stopPods(ctx)
	for _, name := range StopOrder(MaxNodes) {
		if strings.HasPrefix(name, "containerd-") {
			b.killTasks(ctx, name)
		}
		if stopped, err := StopDaemon(ctx, b.clk, b.l, name, o.Grace); err != nil {
			b.line("WARNING %v", err)
		} else if stopped {
			b.line("STOPPED %s", name)
		}
	}
	b.killShims(ctx)
	b.killCgroupTasks(ctx)
	b.removeNetwork(ctx)
	b.removeMounts()
	b.removeFiles()
	if base, err := ReadBaseline(b.l); err == nil {
		if err := RestoreSysctls(base); err != nil {
			b.line("WARNING %v", err)
		}
	}
	return b.check(ctx)
}

// stopPods deletes every workload and pod through the API while the
// kubelets still run, so that each pod's sandbox is stopped the normal way
// (CNI DEL removes its veth and network namespace).
func (b *lab) stopPods(ctx context.Context) {
	p, err := readPidFile(b.l, "kube-apiserver")
	if err != nil || !p.alive() {
		return
	}
	cs, err := kube.NewClient(b.l.Kubeconfig(), ContextName, "sortie-lab")
	if err != nil {
		b.line("WARNING %v", err)
		return
	}
	t := b.clk.Now()
	if err := deleteWorkloads(ctx, cs); err != nil {
		b.line("WARNING delete workloads: %v", err)
	}
	_, err = WaitFor(ctx, b.clk, "pods deleted", podsTimeout, noPods(cs))
	if err != nil {
		b.line("WARNING %v", err)
		return
	}
	b.line("STOPPED every pod in %s", b.since(t))
}

// deleteWorkloads deletes the controllers first (so that nothing makes a
// pod anew) and then every pod with a short grace.
func deleteWorkloads(ctx context.Context, cs kubernetes.Interface) error {
	bg := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &bg}
	all := metav1.ListOptions{}
	nss, err := cs.CoreV1().Namespaces().List(ctx, all)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range nss.Items {
		n := ns.Name
		errs = append(errs,
			cs.AppsV1().Deployments(n).DeleteCollection(ctx, del, all),
			cs.AppsV1().DaemonSets(n).DeleteCollection(ctx, del, all),
			cs.AppsV1().StatefulSets(n).DeleteCollection(ctx, del, all),
			cs.AppsV1().ReplicaSets(n).DeleteCollection(ctx, del, all),
			cs.BatchV1().Jobs(n).DeleteCollection(ctx, del, all))
	}
	grace := int64(1)
	for _, ns := range nss.Items {
		errs = append(errs, cs.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, all))
	}
	return errors.Join(errs...)
}

func noPods(cs kubernetes.Interface) Cond {
	return func(ctx context.Context) error {
		pods, err := cs.CoreV1().Pods(corev1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d pods left, e.g. %s/%s", n, pods.Items[0].Namespace, pods.Items[0].Name)
		}
		return nil
	}
}

// killTasks kills and deletes the tasks a containerd still has, so that
// their shims exit before containerd stops.
func (b *lab) killTasks(ctx context.Context, name string) {
	p, err := readPidFile(b.l, name)
	if err != nil || !p.alive() {
		return
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "containerd-"))
	sock := b.l.Node(n - 1).Socket
	ctr := []string{CtrBin, "--address", sock, "--namespace", "k8s.io", "tasks"}
	out, err := b.x.Run(ctx, append(ctr, "ls", "-q")...)
	if err != nil {
		return
	}
	ids := strings.Fields(string(out))
	for _, id := range ids {
		_, _ = b.x.Run(ctx, append(ctr, "kill", "-s", "SIGKILL", id)...)
	}
	for _, id := range ids {
		_, _ = b.x.Run(ctx, append(ctr, "delete", "-f", id)...)
	}
	if len(ids) > 0 {
		b.line("KILLED %d tasks of %s", len(ids), name)
	}
}

// killShims stops the containerd shims that outlived their containerd: a
// shim names its containerd's socket, under the state directory, so only
// the lab's match.
func (b *lab) killShims(ctx context.Context) {
	var pids []int
	for _, p := range readProcs() {
		if strings.HasPrefix(filepath.Base(p.Cmdline[0]), "containerd-shim") && labProcess(p.Cmdline, b.o.State, b.o.Cache) {
			pids = append(pids, p.PID)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(pids) > 0 {
		b.line("KILLED %d containerd shims", len(pids))
		_ = b.clk.Sleep(ctx, 500*time.Millisecond)
	}
}

// killCgroupTasks SIGKILLs whatever still runs in the lab's cgroups (a
// container or shim its containerd did not take down): every process there
// was started by the lab.
func (b *lab) killCgroupTasks(ctx context.Context) {
	for range 10 {
		pids := cgroupPids()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		b.line("KILLED %d processes left in the lab's cgroups", len(pids))
		_ = b.clk.Sleep(ctx, 200*time.Millisecond)
	}
}

func cgroupPids() []int {
	cgs, _ := LabCgroups()
	seen := map[int]bool{}
	var out []int
	for _, c := range cgs {
		data, _ := os.ReadFile(filepath.Join(c, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// removeNetwork removes the cluster's iptables chains, the lab's rules,
// the NetworkPolicy enforcer's ipsets, the veths still on a pod bridge, the bridges and the pods' network
// namespaces.
func (b *lab) removeNetwork(ctx context.Context) {
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, t := range RuleTables {
			out, err := b.x.Run(ctx, cmd, "-w", "-t", t, "-S")
			if err != nil {
				continue
			}
			for _, c := range KubeChainCleanup(cmd, t, string(out)) {
				_, _ = b.x.Run(ctx, c...)
			}
		}
	}
	for _, r := range Rules() {
		removeRule(ctx, b.x, r)
	}
	b.removeIPSets(ctx)
	if out, err := b.x.Run(ctx, "ip", "-o", "link"); err == nil {
		for _, name := range labLinks(string(out)) {
			if _, err := b.x.Run(ctx, "ip", "link", "del", name); err == nil {
				b.line("REMOVED link %s", name)
			}
		}
	}
	base, _ := ReadBaseline(b.l)
	for _, n := range readNetns() {
		if strings.HasPrefix(n, "cni-") && !base.hasNetns(n) {
			p := filepath.Join(NetnsDir, n)
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			if err := os.Remove(p); err == nil {
				b.line("REMOVED netns %s", n)
			}
		}
	}
}

// removeMounts unmounts everything under the state directory, deepest
// first, then removes the lab's cgroups.
func (b *lab) removeMounts() {
	mounts, err := readMounts()
	if err != nil {
		b.line("WARNING %v", err)
		return
	}
	um := mountsUnder(mounts, b.o.State)
	for _, m := range um {
		if err := syscall.Unmount(m, 0); err != nil {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if len(um) > 0 {
		b.line("UNMOUNTED %d mounts under %s", len(um), b.o.State)
	}
	if err := RemoveCgroups(); err != nil {
		b.line("WARNING %v", err)
	}
}

// removeFiles removes the cluster's data (each up starts empty) once
// nothing is mounted there any more, and the kubelets' log links.
func (b *lab) removeFiles() {
	mounts, err := readMounts()
	if err != nil || len(mountsUnder(mounts, b.o.State)) > 0 {
		b.line("WARNING mounts remain under %s: its data is kept", b.o.State)
		return
	}
	for _, d := range []string{b.l.Var(), b.l.Run()} {
		if err := os.RemoveAll(d); err != nil {
			b.line("WARNING %v", err)
		}
	}
	_ = os.Remove(b.l.Manifest())
	links, _ := filepath.Glob(filepath.Join(ContainerLogLinks, "*"))
	for _, p := range links {
		if t, err := os.Readlink(p); err == nil && under(t, b.o.State) {
			_ = os.Remove(p)
		}
	}
	b.removeHostPaths(mounts)
}

// removeHostPaths removes the HostPaths the cluster made (those the
// baseline did not find), unless something is mounted below one.
func (b *lab) removeHostPaths(mounts []string) {
	base, err := ReadBaseline(b.l)
	if err != nil {
		return
	}
	for _, p := range existingHostPaths() {
		if slices.Contains(base.HostPaths, p) {
			continue
		}
		if len(mountsUnder(mounts, p)) > 0 {
			b.line("WARNING mounts remain under %s: it is kept", p)
			continue
		}
		if err := os.RemoveAll(p); err == nil {
			b.line("REMOVED %s", p)
		}
	}
}

// check runs the leftover check and prints its verdict.
func (b *lab) check(ctx context.Context) error {
	s, err := ReadSystem(ctx, b.x, b.l)
	if err != nil {
		return fmt.Errorf("leftover check: %w", err)
	}
	left := FindLeftovers(s, b.o.State, b.o.Cache)
	for _, l := range left {
		b.line("LEFTOVER %s", l)
	}
	if len(left) > 0 {
		b.line("LAB DOWN leftovers=%d in %s", len(left), b.since(b.t0))
		return cli.Silent(cli.ExitFail)
	}
	_ = os.Remove(b.l.Saved())
	b.line("LAB DOWN clean in %s", b.since(b.t0))
	return nil
}
