package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// which the Linux ABI fixes at 100 on every architecture Go runs on.
const clockTick = 10 * time.Millisecond

// procStat is what the bench reads from /proc/<pid>/stat.
type procStat struct {
	// UserTicks and SysTicks are the CPU time of every thread of the
	// process, alive or exited, in clock ticks.
	UserTicks, SysTicks uint64
	// Nice is the main thread's nice value.
	Nice int
}

// CPU is the process's user+sys time.
func (s procStat) CPU() time.Duration {
	return time.Duration(s.UserTicks+s.SysTicks) * clockTick
}

// parseStat reads utime, stime and nice (fields 14, 15 and 19) from the text of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// itself hold spaces and parentheses, so fields are counted from the last
// ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("stat: no ')' after the command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 17 {
		return procStat{}, fmt.Errorf("stat: %d fields after the command name, want at least 17", len(f))
	}
	u, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("stat: utime: %w", err)
	}
	s, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("stat: stime: %w", err)
	}
	n, err := strconv.Atoi(f[16])
	if err != nil {
		return procStat{}, fmt.Errorf("stat: nice: %w", err)
	}
	return procStat{UserTicks: u, SysTicks: s, Nice: n}, nil
}

// procStatus is what the bench reads from /proc/<pid>/status.
type procStatus struct {
	// HWMKiB is VmHWM, the peak resident set size, in KiB.
	HWMKiB uint64
	// RSSKiB is VmRSS, the resident set size now, in KiB.
	RSSKiB uint64
	// CPUs is Cpus_allowed_list, the cores the main thread may run on.
	CPUs []int
}

// parseStatus reads VmHWM, VmRSS and Cpus_allowed_list from the text of
// /proc/<pid>/status. VmHWM is required; the others may be missing (a
// zombie has no memory lines, for one).
func parseStatus(b []byte) (procStatus, error) {
	var st procStatus
	hwm := false
	for _, line := range strings.Split(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		var err error
		switch key {
		case "VmHWM":
			st.HWMKiB, err = parseKiB(val)
			hwm = err == nil
		case "VmRSS":
			st.RSSKiB, err = parseKiB(val)
		case "Cpus_allowed_list":
			st.CPUs, err = parseCPUList(val)
		}
		if err != nil {
			return procStatus{}, fmt.Errorf("status: %s: %w", key, err)
		}
	}
	if !hwm {
		return procStatus{}, errors.New("status: no VmHWM line")
	}
	return st, nil
}

// parseKiB reads a status value such as "12345 kB".
func parseKiB(s string) (uint64, error) {
	num, unit, _ := strings.Cut(s, " ")
	if strings.TrimSpace(unit) != "kB" {
		return 0, fmt.Errorf("value %q is not in kB", s)
	}
	return strconv.ParseUint(num, 10, 64)
}

// parseCPUList reads a CPU list such as "0-1,4,6-7".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad cpu %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		if b-a > 4096 {
			return nil, fmt.Errorf("cpu list %q: range %q too large", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// parseLoadavg reads the three load averages of /proc/loadavg.
func parseLoadavg(b []byte) ([3]float64, error) {
	var l [3]float64
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return l, fmt.Errorf("loadavg: %d fields, want at least 3", len(f))
	}
	for i := range l {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return l, fmt.Errorf("loadavg: %w", err)
		}
		l[i] = v
	}
	return l, nil
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	return parseStat(b)
}

// readStatus reads /proc/<pid>/status.
func readStatus(pid int) (procStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStatus{}, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	return parseStatus(b)
}

// readLoadavg reads /proc/loadavg; zeros when it cannot.
func readLoadavg() [3]float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return [3]float64{}
	}
	l, _ := parseLoadavg(b)
	return l
}
