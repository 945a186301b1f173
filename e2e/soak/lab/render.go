package lab

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"text/template"

	"github.com/sortie-soak/sortie/record"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

var templates = template.Must(template.New("lab").Option("missingkey=error").ParseFS(templateFS, "templates/*.tmpl"))

// RegistryHosts are the registry names containerd may be asked to pull
// from. Each gets a hosts.toml that sends it to the loopback registry. The
// lab's own images are all named 127.0.0.1:5000/...; the others are there
// so that an image named by a public registry resolves here too and fails
// (it is not in the loopback registry) rather than being fetched.
var RegistryHosts = []string{"docker.io", "registry-1.docker.io", "ghcr.io", "gcr.io", "quay.io", "registry.k8s.io", "k8s.gcr.io", "mcr.microsoft.com", "public.ecr.aws"}

// CNIBinDir is where Debian's containernetworking-plugins installs the
// plugins.
const CNIBinDir = "/usr/lib/cni"

// Config is what the templates read.
type Config struct {
	Layout
	// Node is the node a per-node file is for.
	Node Node
	// Registry is the loopback registry's host:port; Host the registry name
	// a hosts.toml is for.
	Registry, Host string
	// PauseImage is the pod sandbox image, by digest in the registry.
	PauseImage string
}

// Template fields that are the lab's constants.
func (Config) ClusterCIDR() string   { return ClusterCIDR }
func (Config) ServiceCIDR() string   { return ServiceCIDR }
func (Config) LabNet() string        { return LabNet }
func (Config) ClusterDomain() string { return ClusterDomain }
func (Config) DNSServiceIP() string  { return DNSServiceIP }
func (Config) CNIBinDir() string     { return CNIBinDir }
func (c Config) PKI() string         { return c.Layout.PKI() }
func (c Config) CertsDir() string    { return c.Layout.Path("etc", "certs.d") }
func (c Config) ResolvConf() string  { return c.Layout.Path("etc", "resolv.conf") }
func (c Config) FirstNode() string   { return c.Layout.Node(0).Name }

// Render executes the named template for c.
func Render(name string, c Config) ([]byte, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, c); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// File is one rendered configuration file.
type File struct {
	Path string
	Data []byte
}

// Files renders every configuration file of the lab: per node a
// containerd config, a CNI network and a kubelet config; one kube-proxy
// config; a hosts.toml per registry name; the kubelet's resolv.conf and
// CoreDNS's Corefile.
func Files(c Config) ([]File, error) {
	var out []File
	add := func(path, tmpl string, c Config) error {
		data, err := Render(tmpl, c)
		if err == nil {
			out = append(out, File{Path: path, Data: data})
		}
		return err
	}
	for _, n := range c.NodeList() {
		nc := c
		nc.Node = n
		if err := add(n.ContainerdConfig, "containerd.toml.tmpl", nc); err != nil {
			return nil, err
		}
		if err := add(filepath.Join(n.CNIConfDir, "10-sortie-lab.conflist"), "cni.conflist.tmpl", nc); err != nil {
			return nil, err
		}
		if err := add(n.KubeletConfig, "kubelet.yaml.tmpl", nc); err != nil {
			return nil, err
		}
	}
	if err := add(c.Path("etc", "kube-proxy.yaml"), "kube-proxy.yaml.tmpl", c); err != nil {
		return nil, err
	}
	for _, h := range append([]string{c.Registry}, RegistryHosts...) {
		hc := c
		hc.Host = h
		if err := add(filepath.Join(c.CertsDir(), h, "hosts.toml"), "hosts.toml.tmpl", hc); err != nil {
			return nil, err
		}
	}
	if err := add(c.Path("etc", "Corefile"), "Corefile.tmpl", c); err != nil {
		return nil, err
	}
	out = append(out, File{Path: c.ResolvConf(), Data: []byte("nameserver 127.0.0.1\n")})
	return out, nil
}

// WriteFiles writes files, making their directories.
func WriteFiles(files []File) error {
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
			return err
		}
		if err := record.WriteFile(f.Path, f.Data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
	}
	return nil
}
