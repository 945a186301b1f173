package engine

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/internal/cli"
)

// TestRunOneshot: the word oneshot hands the rest of the arguments to the
// client mode, whose flags are its own.
func TestRunOneshot(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"oneshot", "--step", "s"}, &stdout, &stderr)
	if cli.Code(err) != cli.ExitUsage || !strings.Contains(err.Error(), "--target") {
		t.Errorf("exit %d: %v", cli.Code(err), err)
	}
}
