package lab

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// testConfig is a two-node lab in a fixed state directory, so that the
// rendered files are stable.
func testConfig() Config {
	return Config{
		Layout:     Layout{State: "/lab/state", Nodes: 2},
		Registry:   DefaultRegistry,
		PauseImage: DefaultRegistry + "/pause@sha256:" + strings.Repeat("ab", 32),
	}
}

func renderedFiles(t *testing.T) map[string]string {
	t.Helper()
	files, err := Files(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, f := range files {
		rel, err := filepath.Rel("/lab/state", f.Path)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("file %s outside the state directory", f.Path)
		}
		m[rel] = string(f.Data)
	}
	return m
}

// TestFilesGolden holds every rendered file to testdata/render/ (refresh
// with go test -run TestFilesGolden -update).
func TestFilesGolden(t *testing.T) {
	for rel, got := range renderedFiles(t) {
		golden := filepath.Join("testdata", "render", rel+".golden")
		if *update {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if d := cmp.Diff(string(want), got); d != "" {
			t.Errorf("%s differs from %s (-want +got):\n%s", rel, golden, d)
		}
	}
}

func TestCorefileForwardsNothing(t *testing.T) {
	got := renderedFiles(t)["etc/Corefile"]
	if got == "" {
		t.Fatal("no Corefile rendered")
	}
	for _, plugin := range []string{"forward", "proxy"} {
		for _, line := range strings.Split(got, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == plugin {
				t.Errorf("Corefile uses %s: %q", plugin, line)
			}
		}
	}
	if !strings.Contains(got, "kubernetes "+ClusterDomain) {
		t.Errorf("Corefile serves no %s:\n%s", ClusterDomain, got)
	}
}

// cniConf is the part of the CNI network the rules depend on.
type cniConf struct {
	Plugins []struct {
		Type   string `json:"type"`
		Bridge string `json:"bridge"`
		IPMasq *bool  `json:"ipMasq"`
		IPAM   struct {
			Routes []struct {
				Dst string `json:"dst"`
			} `json:"routes"`
		} `json:"ipam"`
	} `json:"plugins"`
}

func TestCNINoMasqueradeNoDefaultRoute(t *testing.T) {
	files := renderedFiles(t)
	for i, n := range testConfig().NodeList() {
		data := files[filepath.Join("etc", "cni-"+nodeNum(n), "10-sortie-lab.conflist")]
		var c cniConf
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("node %d: CNI config does not parse: %v\n%s", i, err, data)
		}
		if len(c.Plugins) != 1 || c.Plugins[0].Type != "bridge" {
			t.Fatalf("node %d: want the bridge plugin alone (no portmap: it masquerades), got %+v", i, c.Plugins)
		}
		p := c.Plugins[0]
		if p.IPMasq == nil || *p.IPMasq {
			t.Errorf("node %d: ipMasq must be false, got %v", i, p.IPMasq)
		}
		if p.Bridge != n.Bridge || !strings.HasPrefix(p.Bridge, PodBridgePrefix) {
			t.Errorf("node %d: bridge %q, want %q", i, p.Bridge, n.Bridge)
		}
		var dsts []string
		for _, r := range p.IPAM.Routes {
			dsts = append(dsts, r.Dst)
		}
		if d := cmp.Diff([]string{ServiceCIDR, LabNet, ClusterCIDR}, dsts); d != "" {
			t.Errorf("node %d: pod routes (-want +got):\n%s", i, d)
		}
	}
}

func TestRuntimeAndKubeletSettings(t *testing.T) {
	files := renderedFiles(t)
	for _, n := range testConfig().NodeList() {
		num := nodeNum(n)
		ctd := files["etc/containerd-"+num+".toml"]
		for _, want := range []string{
			"restrict_oom_score_adj = true",
			`address = "/lab/state/run/containerd-` + num + `/containerd.sock"`,
			`conf_dir = "/lab/state/etc/cni-` + num + `"`,
			`sandbox_image = "` + testConfig().PauseImage + `"`,
			`stream_server_address = "127.0.0.1"`,
		} {
			if !strings.Contains(ctd, want) {
				t.Errorf("containerd-%s.toml lacks %q", num, want)
			}
		}
		kl := files["etc/kubelet-"+num+".yaml"]
		for _, want := range []string{"failCgroupV1: false", "address: " + n.IP, "healthzBindAddress: 127.0.0.1", "readOnlyPort: 0", "cgroupRoot: " + n.CgroupRoot} {
			if !strings.Contains(kl, want+"\n") {
				t.Errorf("kubelet-%s.yaml lacks %q", num, want)
			}
		}
	}
	if files["etc/resolv.conf"] != "nameserver 127.0.0.1\n" {
		t.Errorf("the kubelet's resolv.conf must name the loopback only, got %q", files["etc/resolv.conf"])
	}
}

// TestEveryRegistryNameIsLoopback: each hosts.toml sends its registry name
// to the loopback registry and names no other host.
func TestEveryRegistryNameIsLoopback(t *testing.T) {
	files := renderedFiles(t)
	hosts := append([]string{DefaultRegistry}, RegistryHosts...)
	for _, h := range hosts {
		data, ok := files[filepath.Join("etc", "certs.d", h, "hosts.toml")]
		if !ok {
			t.Errorf("no hosts.toml for %s", h)
			continue
		}
		for _, line := range strings.Split(data, "\n") {
			if strings.Contains(line, "http") && !strings.Contains(line, "http://"+DefaultRegistry) {
				t.Errorf("hosts.toml of %s names another host: %q", h, line)
			}
		}
		if !strings.Contains(data, `server = "http://`+DefaultRegistry+`"`) {
			t.Errorf("hosts.toml of %s has no loopback server:\n%s", h, data)
		}
	}
	for _, h := range []string{"docker.io", "registry.k8s.io", "ghcr.io", "quay.io"} {
		if _, ok := files[filepath.Join("etc", "certs.d", h, "hosts.toml")]; !ok {
			t.Errorf("no hosts.toml for %s", h)
		}
	}
}
