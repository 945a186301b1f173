package bench

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/sortie-soak/sortie/internal/cli"
)

// TestMain lets the test binary serve as the bench's own binary: the bench
// starts its target and engines by running os.Executable with a hidden
// subcommand, which is this test binary under go test.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == cmdTarget || os.Args[1] == cmdEngine || os.Args[1] == cmdFloor) {
		ctx, stop := cli.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(cli.Code(err))
	}
	os.Exit(m.Run())
}
