package lab

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeCgroupV1 lays out a hybrid cgroup v1 tree like these machines': a
// directory per hierarchy, cpuset with its CPUs and memory nodes, and the
// unified (v2) mount beside them.
func fakeCgroupV1(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, h := range []string{"cpu", "cpuset", "memory", "systemd", "unified"} {
		if err := os.MkdirAll(filepath.Join(root, h), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, v := range map[string]string{"cpuset.cpus": "0-1\n", "cpuset.mems": "0\n"} {
		if err := os.WriteFile(filepath.Join(root, "cpuset", f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := CgroupFS
	CgroupFS = root
	t.Cleanup(func() { CgroupFS = old })
	return root
}

func TestCgroupRootsV1(t *testing.T) {
	root := fakeCgroupV1(t)
	l := Layout{State: "/s", Nodes: 2}
	if err := MakeCgroupRoots(l); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"cpu", "cpuset", "memory", "systemd"} {
		for _, n := range []string{"sortie-lab-1", "sortie-lab-2"} {
			if _, err := os.Stat(filepath.Join(root, h, n)); err != nil {
				t.Errorf("no cgroup root %s in %s: %v", n, h, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "unified", "sortie-lab-1")); err == nil {
		t.Error("a cgroup root was made in the unified mount of a v1 machine")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "cpuset", "sortie-lab-2", "cpuset.cpus")); string(b) != "0-1\n" {
		t.Errorf("cpuset.cpus of the new cgroup %q, want the parent's", b)
	}
}

// TestLabCgroupsFindsUnified: on a hybrid machine runc also makes the
// pods' cgroups in the unified mount; the leftover check must see them and
// down must remove them.
func TestLabCgroupsFindsUnified(t *testing.T) {
	root := fakeCgroupV1(t)
	made := []string{
		filepath.Join(root, "memory", "sortie-lab-1", "kubepods", "besteffort"),
		filepath.Join(root, "unified", "sortie-lab-1", "kubepods"),
		filepath.Join(root, "cpu", "other", "kubepods"),
	}
	for _, d := range made {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LabCgroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{made[0], made[1], filepath.Join(root, "unified", "sortie-lab-1")} {
		if !slices.Contains(got, want) {
			t.Errorf("LabCgroups lacks %s: %v", want, got)
		}
	}
	if slices.Contains(got, made[2]) {
		t.Errorf("a cgroup that is not the lab's was listed: %v", got)
	}
	if err := RemoveCgroups(); err != nil {
		t.Fatal(err)
	}
	if left, _ := LabCgroups(); len(left) != 0 {
		t.Errorf("left after RemoveCgroups: %v", left)
	}
	if _, err := os.Stat(made[2]); err != nil {
		t.Errorf("another cgroup was removed: %v", err)
	}
}
