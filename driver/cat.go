package driver

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

const usageCat = `Usage: sortie cat FILE
       sortie cat --offset N --length M [--sum] FILE

Prints FILE on stdout. The saver copies the report, the results stream and
the live record off the report volume through a short-lived pod that
prints them to its log; with this command that pod runs the driver's own
image, which has no shell and no cat.

With --offset and --length it prints one chunk: M bytes of FILE from byte
N (fewer where the file ends; M at most 8 MiB), then a newline and a
trailer line

  SORTIE_CHUNK offset=<N> length=<K> size=<S> sha256=<hex>

K being the bytes printed, S the file's size when the chunk was read and
sha256 that of the K bytes: the saver checks each chunk against its
trailer, so a file larger than the kubelet's log rotation (10 MiB) is
copied whole, one pod per chunk. With --sum it prints only the trailer,
SORTIE_SUM, of the range (M then has no bound), to check a copy the saver
holds without printing it again.

Flags:
`

// catCommand prints one file, or one chunk of it with its trailer
// (record.WriteChunk), on stdout.
func catCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sortie cat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	offset := fs.Int64("offset", -1, "print one chunk from byte `N` (with --length)")
	length := fs.Int64("length", -1, "the chunk's length: at most `M` bytes, 1 to 8 MiB (with --offset)")
	sum := fs.Bool("sum", false, "print only the chunk's trailer, SORTIE_SUM, with the SHA-256 of the range")
	fs.Usage = func() {
		io.WriteString(stderr, usageCat)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cli.Usage(errors.New("usage: sortie cat FILE"))
		}
		return cli.Usage(err)
	}
	chunked := *offset >= 0 || *length >= 0 || *sum
	switch {
	case fs.NArg() != 1 || fs.Arg(0) == "":
		return cli.Usage(errors.New("usage: sortie cat [--offset N --length M [--sum]] FILE"))
	case chunked && (*offset < 0 || *length < 0):
		return cli.Usage(errors.New("cat: --offset and --length go together, each >= 0"))
	case chunked && !*sum && (*length == 0 || *length > record.MaxChunkBytes):
		return cli.Usage(fmt.Errorf("cat: --length %d: want 1 to %d", *length, record.MaxChunkBytes))
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("cat: %w", err)
	}
	defer f.Close()
	if chunked {
		if _, err := record.WriteChunk(stdout, f, *offset, *length, *sum); err != nil {
			return fmt.Errorf("cat %s: %w", fs.Arg(0), err)
		}
		return nil
	}
	if _, err := io.Copy(stdout, f); err != nil {
		return fmt.Errorf("cat %s: %w", fs.Arg(0), err)
	}
	return nil
}
