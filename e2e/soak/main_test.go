package soak

import (
	"flag"
	"os"
	"testing"
)

// TestMain lets the end-to-end runs overlap: they mostly wait (a 20 s load
// at 60 rps per node, frozen processes, deadlines), so running them one or
// two at a time, as -parallel's default of GOMAXPROCS would, only adds
// minutes. An explicit -parallel is kept.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}
