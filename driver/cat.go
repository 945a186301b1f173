package driver

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sortie-soak/sortie/internal/cli"
)

// catCommand prints one file on stdout. The saver copies the report and
// the results stream off the report volume through a short-lived pod that
// prints them to its log; with this command that pod can run the driver's
// own image, which has no shell and no cat.
func catCommand(args []string, stdout io.Writer) error {
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		return cli.Usage(errors.New("usage: sortie cat FILE"))
	}
	f, err := os.Open(args[0])
	if err != nil {
		return fmt.Errorf("cat: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(stdout, f); err != nil {
		return fmt.Errorf("cat %s: %w", args[0], err)
	}
	return nil
}
