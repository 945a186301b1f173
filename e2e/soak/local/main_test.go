package local

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
)

// update rewrites the golden files under testdata/ (and the README's
// screenshot of the report).
var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// childEnv makes the test binary the soak binary: a test that runs soak
// local in-process passes the test binary as its self, and every child it
// starts (target, engine, driver, gate) is this binary again, which runs
// the Child of its first argument, as the soak binary does. The value replaces the driver with a fake one (see
// fakeDriver); empty keeps the real one.
const childEnv = "SOAK_TEST_CHILD"

// TestMain lets the end-to-end runs overlap: they mostly wait (a 20 s load
// at 60 rps per node, frozen processes, deadlines), so running them one or
// two at a time, as -parallel's default of GOMAXPROCS would, only adds
// minutes. An explicit -parallel is kept.
func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(childEnv); ok {
		cli.Main("soak", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			if len(args) > 0 && args[0] == "driver" && mode != "" {
				return fakeDriver(ctx, mode, args[1:], stderr)
			}
			if len(args) > 0 {
				if child, ok := Child(args[0]); ok {
					return child(ctx, args[1:], stdout, stderr)
				}
			}
			return cli.Usage(fmt.Errorf("not a child of soak local: %q", args))
		})
	}
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}

// Fake drivers, by the value of childEnv.
const (
	// driverRefuses refuses the plan as the real driver does a bad one.
	driverRefuses = "refuse"
	// driverEndsEarly starts its load and ends at once, long before the
	// faults it was given are due.
	driverEndsEarly = "early"
	// driverWritesOnStop starts its load and runs until SIGTERM, then
	// writes the report named by reportEnv to its -o and exits 1, as the
	// real driver does with the report of a cancelled run.
	driverWritesOnStop = "stop"
)

// reportEnv names the report driverWritesOnStop writes.
const reportEnv = "SOAK_TEST_REPORT"

func fakeDriver(ctx context.Context, mode string, args []string, stderr io.Writer) error {
	switch mode {
	case driverRefuses:
		return cli.Usage(errors.New("plan.yaml:1:1: refused by the test's driver"))
	case driverEndsEarly:
		fmt.Fprintln(stderr, "running mesh/svc-1 on 1 backend")
		time.Sleep(200 * time.Millisecond)
		return nil
	case driverWritesOnStop:
		fmt.Fprintln(stderr, "running mesh/svc-1 on 2 backends")
		<-ctx.Done()
		b, err := os.ReadFile(os.Getenv(reportEnv))
		if err != nil {
			return err
		}
		for i, a := range args {
			if a == "-o" && i+1 < len(args) {
				if err := os.WriteFile(args[i+1], b, 0o644); err != nil {
					return err
				}
			}
		}
		return cli.Fail(errors.New("run cancelled"))
	}
	return cli.Usage(fmt.Errorf("unknown fake driver %q", mode))
}
