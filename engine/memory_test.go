package engine

import (
	"runtime/metrics"
	"testing"
)

// gcSettings reads the process's GOGC and soft memory limit.
func gcSettings() (percent, limit uint64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// TestSetGC: SetGC sets the collector's percent and soft limit (0: none),
// refuses settings out of range without touching the process, and its
// restore puts back what was there. Not parallel: the settings are the
// process's.
func TestSetGC(t *testing.T) {
	p0, l0 := gcSettings()
	restore, err := SetGC(40, 32)
	if err != nil {
		t.Fatal(err)
	}
	if p, l := gcSettings(); p != 40 || l != 32<<20 {
		t.Errorf("after SetGC(40, 32): GOGC %d, limit %d; want 40, %d", p, l, 32<<20)
	}
	restore()
	if p, l := gcSettings(); p != p0 || l != l0 {
		t.Errorf("after restore: GOGC %d, limit %d; want %d, %d", p, l, p0, l0)
	}
	restore, err = SetGC(DefaultGCPercent, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, l := gcSettings(); p != DefaultGCPercent || l != 1<<63-1 {
		t.Errorf("after SetGC(%d, 0): GOGC %d, limit %d; want no limit", DefaultGCPercent, p, l)
	}
	restore()
	for _, c := range [][2]int{{0, 64}, {-1, 64}, {25, -1}, {25, 1<<20 + 1}} {
		if _, err := SetGC(c[0], c[1]); err == nil {
			t.Errorf("SetGC(%d, %d) accepted", c[0], c[1])
		}
		if p, l := gcSettings(); p != p0 || l != l0 {
			t.Errorf("a refused SetGC(%d, %d) changed GOGC to %d, the limit to %d", c[0], c[1], p, l)
		}
	}
}
