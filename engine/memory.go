package engine

import (
	"fmt"
	"math"
	"runtime/debug"
)

// The engine's memory is part of the product: the soak shape (eight
// executions at 60 rps for 8 h 30 min) must fit in 20 MiB of resident
// memory, of which the program's own code is some 13 MiB. Its live heap is
// small and steady (3 MiB of histograms, 16 bytes per timeline bucket), and
// its garbage slow (some 12 KB/s at the soak shape), so Go's default
// (GOGC=100: collect when the heap has doubled) would let minutes of
// garbage pile up to the size of the live heap before the first
// collection, and the timeline's growing heap raise that ceiling with it.
// Collecting at 25 % growth keeps the heap within a quarter of what is
// live, for a collection every minute or so at the soak shape, each of a
// few milliseconds. The soft limit guards the other end: at high rates
// with deep queues, the collector works harder before the engine nears
// the memory its pod asked for (the chart requests 128 MiB).
const (
	// DefaultGCPercent is --gc-percent's default (GOGC).
	DefaultGCPercent = 25
	// DefaultMemoryLimitMiB is --memory-limit-mib's default.
	DefaultMemoryLimitMiB = 64
)

// SetGC sets the process's garbage collector: it collects when the heap
// has grown gcPercent % over what was live after the last collection, and
// harder as the runtime's memory nears memoryLimitMiB (0: no limit). Both
// are settings of the whole process, so only a program's main (Run, the
// bench's engine child) calls it; restore puts back the settings it
// replaced, for a Run called inside a test process.
func SetGC(gcPercent, memoryLimitMiB int) (restore func(), err error) {
	if err := checkGC(gcPercent, memoryLimitMiB); err != nil {
		return nil, err
	}
	limit := int64(math.MaxInt64) // the runtime's "no limit"
	if memoryLimitMiB > 0 {
		limit = int64(memoryLimitMiB) << 20
	}
	oldPercent := debug.SetGCPercent(gcPercent)
	oldLimit := debug.SetMemoryLimit(limit)
	return func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	}, nil
}

// checkGC says what is wrong with the settings SetGC takes.
func checkGC(gcPercent, memoryLimitMiB int) error {
	switch {
	case gcPercent < 1:
		return fmt.Errorf("--gc-percent %d must be at least 1", gcPercent)
	case memoryLimitMiB < 0 || memoryLimitMiB > 1<<20:
		return fmt.Errorf("--memory-limit-mib %d must be between 0 (no limit) and %d", memoryLimitMiB, 1<<20)
	}
	return nil
}
