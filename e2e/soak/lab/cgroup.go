package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// CgroupFS is the cgroup mount root.
var CgroupFS = "/sys/fs/cgroup"

// cgroupHierarchies returns the directories the kubelet's cgroup root must
// exist in: on cgroup v2 the root itself; on v1 every mounted hierarchy
// (cpu, memory, ..., and the named systemd one), but not the empty unified
// mount of a hybrid layout, and each hierarchy once (cpu,cpuacct may be
// mounted once and linked twice).
func cgroupHierarchies() ([]string, error) {
	if _, err := os.Stat(filepath.Join(CgroupFS, "cgroup.controllers")); err == nil {
		return []string{CgroupFS}, nil
	}
	ents, err := os.ReadDir(CgroupFS)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "unified" {
			continue // a symlink (cpu -> cpu,cpuacct) is the same hierarchy
		}
		out = append(out, filepath.Join(CgroupFS, e.Name()))
	}
	return out, nil
}

// MakeCgroupRoots makes every node's cgroup root in every hierarchy. A new
// cpuset cgroup starts with no CPUs and no memory nodes, and no task can
// join it: copy its parent's.
func MakeCgroupRoots(l Layout) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, n := range l.NodeList() {
		for _, h := range hs {
			dir := filepath.Join(h, n.CgroupRoot)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
			if filepath.Base(h) == "cpuset" {
				if err := copyCpuset(h, dir); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func copyCpuset(parent, dir string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		b, err := os.ReadFile(filepath.Join(parent, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return fmt.Errorf("cgroup %s/%s: %w", dir, f, err)
		}
	}
	return nil
}

// cgroupMounts returns every cgroup mount: the hierarchies and, on a
// hybrid machine, the unified mount too, where runc makes the containers'
// cgroups besides the v1 ones.
func cgroupMounts() ([]string, error) {
	hs, err := cgroupHierarchies()
	if err != nil || len(hs) == 1 && hs[0] == CgroupFS {
		return hs, err
	}
	if st, err := os.Stat(filepath.Join(CgroupFS, "unified")); err == nil && st.IsDir() {
		hs = append(hs, filepath.Join(CgroupFS, "unified"))
	}
	return hs, nil
}

// LabCgroups lists the cgroups of the lab that exist: the nodes' roots and
// everything below them (kubepods, its QoS classes, pods, containers), in
// every cgroup mount.
func LabCgroups() ([]string, error) {
	hs, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hs {
		roots, _ := filepath.Glob(filepath.Join(h, CgroupPrefix+"*"))
		for _, r := range roots {
			_ = filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					out = append(out, p)
				}
				return nil
			})
		}
	}
	return out, nil
}

// RemoveCgroups removes the lab's cgroups, deepest first. A cgroup that
// still holds a task cannot be removed; it stays and is reported.
func RemoveCgroups() error {
	cgs, err := LabCgroups()
	if err != nil {
		return err
	}
	sort.Slice(cgs, func(i, j int) bool { return strings.Count(cgs[i], "/") > strings.Count(cgs[j], "/") })
	var errs []error
	for _, c := range cgs {
		if err := os.Remove(c); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", c, err))
		}
	}
	return errors.Join(errs...)
}
