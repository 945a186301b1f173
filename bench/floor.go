package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
)

// cmdFloor is the hidden subcommand of the floor client (runFloorLoop): the
// least a client can do per request on this machine, open loop, batched
// like the engine: a write, a read, and a share of one timer wake. It
// parses nothing and records no latency, so it is a reference for what the
// machine allows, not a peer.
const cmdFloor = "__floor"

// floorReport is the floor client's report, one JSON object on stdout.
type floorReport struct {
	Sent    uint64        `json:"sent"`
	OK      uint64        `json:"ok"`
	Errors  uint64        `json:"errors"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// runFloor runs the floor client against --url.
func runFloor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmdFloor, flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "", "http://host:port/ of the target")
	rate := fs.Int("rate", 1000, "requests per second")
	d := fs.Duration("duration", 10*time.Second, "how long to send")
	conns := fs.Int("connections", 32, "keep-alive connections")
	if err := fs.Parse(args); err != nil {
		return cli.Usage(err)
	}
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return cli.Usage(fmt.Errorf("--url %q: want http://host:port/", *target))
	}
	rep, err := runFloorLoop(ctx, u.Host, u.Host, *rate, *d, 5*time.Second, *conns)
	if err != nil {
		return cli.Fail(err)
	}
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		return cli.Fail(fmt.Errorf("write report: %w", err))
	}
	return nil
}

// parseFloor reads the floor client's report.
func parseFloor(b []byte) (peerReport, error) {
	var f floorReport
	if err := json.Unmarshal(b, &f); err != nil {
		return peerReport{}, fmt.Errorf("floor report: %w", err)
	}
	r := peerReport{Sent: f.Sent, OK: f.OK, Errors: f.Errors, Elapsed: f.Elapsed}
	if f.Elapsed > 0 {
		r.Rate = float64(f.OK+f.Errors) / f.Elapsed.Seconds()
	}
	return r, nil
}
