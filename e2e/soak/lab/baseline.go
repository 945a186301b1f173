package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sortie-soak/sortie/record"
)

// SysctlRoot is where kernel settings are read and written.
var SysctlRoot = "/proc/sys"

func readSysctl(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join(SysctlRoot, key))
	return strings.TrimSpace(string(b)), err
}

func writeSysctl(key, value string) error {
	return os.WriteFile(filepath.Join(SysctlRoot, key), []byte(value+"\n"), 0o644)
}

// Baseline is what the machine had before `up` changed it: the values of
// the kernel settings the lab's processes may change, the network
// namespaces and the HostPaths that existed already (down removes only
// the others).
type Baseline struct {
	Sysctls   map[string]string `json:"sysctls"`
	Netns     []string          `json:"netns"`
	HostPaths []string          `json:"host_paths"`
}

func (b Baseline) hasNetns(name string) bool { return slices.Contains(b.Netns, name) }

// HostPaths are the directories outside the state directory that the
// cluster's components make whatever they are told: the kubelet's
// device-plugin socket directory (a constant of the kubelet), its log links,
// the CNI plugins' result cache, containerd's shim socket directory and the
// directory of the pods' network namespaces.
var HostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns"}

// existingHostPaths returns the HostPaths that exist.
func existingHostPaths() []string {
	var out []string
	for _, p := range HostPaths {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// SaveBaseline records the baseline, unless a record exists already: a
// record left by an `up` whose `down` never finished holds the machine's
// values, and the lab's own must not replace them.
func SaveBaseline(l Layout) error {
	if _, err := os.Stat(l.Saved()); err == nil {
		return nil
	}
	b := Baseline{Sysctls: map[string]string{}, Netns: readNetns(), HostPaths: existingHostPaths()}
	for _, k := range Sysctls {
		if v, err := readSysctl(k); err == nil {
			b.Sysctls[k] = v
		}
	}
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return record.WriteFile(l.Saved(), append(data, '\n'), 0o644)
}

// ReadBaseline reads the baseline; a lab that never came up has none.
func ReadBaseline(l Layout) (Baseline, error) {
	data, err := os.ReadFile(l.Saved())
	if err != nil {
		return Baseline{}, err
	}
	var b Baseline
	if err := json.Unmarshal(data, &b); err != nil {
		return Baseline{}, fmt.Errorf("%s: %w", l.Saved(), err)
	}
	return b, nil
}

// RestoreSysctls puts the saved values back, in the order of Sysctls.
func RestoreSysctls(b Baseline) error {
	var errs []error
	for _, k := range Sysctls {
		v, ok := b.Sysctls[k]
		if !ok {
			continue
		}
		if cur, err := readSysctl(k); err == nil && cur != v {
			if err := writeSysctl(k, v); err != nil {
				errs = append(errs, fmt.Errorf("sysctl %s=%s: %w", k, v, err))
			}
		}
	}
	return errors.Join(errs...)
}
