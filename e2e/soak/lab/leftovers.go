package lab

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// NetnsDir is where containerd's CRI pins pod network namespaces.
var NetnsDir = "/run/netns"

// ContainerLogLinks is where every kubelet links its containers' logs.
var ContainerLogLinks = "/var/log/containers"

// System is what the leftover check reads of the machine.
type System struct {
	// Self is the pid of the checking process (never a leftover).
	Self int
	// Procs are all processes; LabProcs those of the lab's pid files.
	Procs    []ProcInfo
	LabProcs []Proc
	// Links is `ip -o link` output.
	Links string
	// Mounts are the mount points.
	Mounts []string
	// Netns are the names in NetnsDir; Baseline the lab's record of those
	// that were there before `up`.
	Netns    []string
	Baseline Baseline
	// Rules maps "iptables <table>" and "ip6tables <table>" to `-S` output.
	Rules map[string]string
	// IPSets is `ipset list -n` output (empty without the ipset command).
	IPSets string
	// Cgroups are the lab's cgroups that exist.
	Cgroups []string
	// Sysctls are the current values of the saved keys.
	Sysctls map[string]string
	// LogLinks are the symlinks in ContainerLogLinks with their targets.
	LogLinks map[string]string
	// HostPaths are the HostPaths that exist.
	HostPaths []string
}

// ProcInfo is one process of the machine.
type ProcInfo struct {
	PID     int
	Cmdline []string
}

// Leftover is one thing of the lab that is still there.
type Leftover struct {
	Kind string // process, link, mount, netns, iptables, ipset, cgroup, sysctl, file
	What string
}

func (l Leftover) String() string { return l.Kind + " " + l.What }

// FindLeftovers returns everything of the lab that s still shows, for a
// lab with state directory state and cluster binaries under cache.
func FindLeftovers(s System, state, cache string) []Leftover {
	var out []Leftover
	add := func(kind, format string, args ...any) {
		out = append(out, Leftover{kind, fmt.Sprintf(format, args...)})
	}
	for _, p := range s.LabProcs {
		if p.Alive {
			add("process", "%s pid=%d", p.Name, p.PidFile.PID)
		}
	}
	for _, p := range s.Procs {
		if p.PID != s.Self && labProcess(p.Cmdline, state, cache) {
			add("process", "pid=%d %s", p.PID, strings.Join(p.Cmdline, " "))
		}
	}
	for _, name := range labLinks(s.Links) {
		add("link", "%s", name)
	}
	for _, m := range s.Mounts {
		if under(m, state) || (under(m, NetnsDir) && !s.Baseline.hasNetns(filepath.Base(m))) {
			add("mount", "%s", m)
		}
	}
	for _, n := range s.Netns {
		if strings.HasPrefix(n, "cni-") && !s.Baseline.hasNetns(n) {
			add("netns", "%s", n)
		}
	}
	for _, k := range sortedKeys(s.Rules) {
		for _, r := range labRules(s.Rules[k]) {
			add("iptables", "%s: %s", k, r)
		}
	}
	for _, n := range labIPSets(s.IPSets) {
		add("ipset", "%s", n)
	}
	for _, c := range s.Cgroups {
		add("cgroup", "%s", c)
	}
	for _, k := range Sysctls {
		if v, ok := s.Baseline.Sysctls[k]; ok && s.Sysctls[k] != "" && s.Sysctls[k] != v {
			add("sysctl", "%s=%s (was %s)", k, s.Sysctls[k], v)
		}
	}
	for _, k := range sortedKeys(s.LogLinks) {
		if under(s.LogLinks[k], state) {
			add("file", "%s -> %s", k, s.LogLinks[k])
		}
	}
	if s.Baseline.Sysctls != nil { // a lab came up: its baseline was saved
		for _, p := range s.HostPaths {
			if !slices.Contains(s.Baseline.HostPaths, p) {
				add("file", "%s (made by the cluster)", p)
			}
		}
	}
	return out
}

// labProcess reports whether a command line is one the lab or its
// containerds started: a binary of the cache, or an argument naming a file
// under the state directory (a config, a socket, a shim's address).
func labProcess(cmdline []string, state, cache string) bool {
	if len(cmdline) == 0 {
		return false
	}
	if under(cmdline[0], filepath.Join(cache, "bin")) {
		return true
	}
	for _, a := range cmdline[1:] {
		if _, v, ok := strings.Cut(a, "="); ok && under(v, state) {
			return true
		}
		if under(a, state) {
			return true
		}
	}
	return false
}

// under reports whether path is strictly below dir.
func under(path, dir string) bool {
	return strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// labLinks returns the interfaces of `ip -o link` output that are the
// lab's: its bridges and the veths still attached to a pod bridge.
func labLinks(out string) []string {
	var names []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		master := ""
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "master" {
				master = f[i+1]
			}
		}
		if name == LabBridge || strings.HasPrefix(name, PodBridgePrefix) || strings.HasPrefix(master, PodBridgePrefix) {
			names = append(names, name)
		}
	}
	return names
}

// labRules returns the lines of `iptables -S` output that the lab or its
// cluster made: KUBE- and CNI- chains, rules that jump to them, and rules
// with the lab's comment.
func labRules(listing string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(listing))
	for sc.Scan() {
		f := SplitRule(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch {
		case (f[0] == "-N" || f[0] == "-A") && clusterChain(f[1]):
			out = append(out, sc.Text())
		case f[0] == "-A" && (jumpsToCluster(f) || hasComment(f, RuleComment)):
			out = append(out, sc.Text())
		}
	}
	return out
}

func hasComment(f []string, c string) bool {
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "--comment" && f[i+1] == c {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// RuleTables are the iptables tables the cluster writes to.
var RuleTables = []string{"filter", "nat", "mangle", "raw"}

// ReadSystem reads what FindLeftovers needs from this machine.
func ReadSystem(ctx context.Context, x Exec, l Layout) (System, error) {
	s := System{Self: os.Getpid(), Rules: map[string]string{}, Sysctls: map[string]string{}, LogLinks: map[string]string{}}
	var err error
	if s.LabProcs, err = Procs(l); err != nil {
		return s, err
	}
	s.Procs = readProcs()
	out, err := x.Run(ctx, "ip", "-o", "link")
	if err != nil {
		return s, err
	}
	s.Links = string(out)
	if s.Mounts, err = readMounts(); err != nil {
		return s, err
	}
	s.Netns = readNetns()
	s.Baseline, _ = ReadBaseline(l)
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, t := range RuleTables {
			if out, err := x.Run(ctx, cmd, "-w", "-t", t, "-S"); err == nil {
				s.Rules[cmd+" "+t] = string(out)
			}
		}
	}
	if out, err := x.Run(ctx, "ipset", "list", "-n"); err == nil {
		s.IPSets = string(out)
	}
	if s.Cgroups, err = LabCgroups(); err != nil {
		return s, err
	}
	for k := range s.Baseline.Sysctls {
		s.Sysctls[k], _ = readSysctl(k)
	}
	links, _ := filepath.Glob(filepath.Join(ContainerLogLinks, "*"))
	for _, p := range links {
		if t, err := os.Readlink(p); err == nil {
			s.LogLinks[p] = t
		}
	}
	s.HostPaths = existingHostPaths()
	return s, nil
}

// readProcs lists every process with its command line.
func readProcs() []ProcInfo {
	ents, _ := os.ReadDir("/proc")
	var out []ProcInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue // gone, or a kernel thread
		}
		out = append(out, ProcInfo{PID: pid, Cmdline: strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")})
	}
	return out
}

// readMounts lists the mount points of /proc/self/mounts.
func readMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	return parseMounts(string(b)), nil
}

// parseMounts returns the mount points (field 2, with the kernel's octal
// escapes of spaces and tabs undone).
func parseMounts(data string) []string {
	var out []string
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			out = append(out, unescapeMount(f[1]))
		}
	}
	return out
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// mountsUnder returns the mount points below dir, deepest first.
func mountsUnder(mounts []string, dir string) []string {
	var out []string
	for _, m := range mounts {
		if under(m, dir) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func readNetns() []string {
	ents, _ := os.ReadDir(NetnsDir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
