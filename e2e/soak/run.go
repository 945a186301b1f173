package soak

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sortie-soak/sortie/e2e/soak/ca"
	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/e2e/soak/kickoff"
	"github.com/sortie-soak/sortie/e2e/soak/lab"
	"github.com/sortie-soak/sortie/e2e/soak/local"
	"github.com/sortie-soak/sortie/e2e/soak/teardown"
	"github.com/sortie-soak/sortie/internal/cli"
)

const usage = `Usage: soak <command> [flags]

Commands:
  local    run the whole soak loop on this machine (see soak local --help)
  run      launch a run on a Kubernetes cluster: soak run e2e|soak (see soak run --help)
  teardown remove a run's release once its verdict is saved (see soak teardown --help)
  lab      a real Kubernetes cluster on this machine: soak lab up|down|status|build (see soak lab --help)
  ca       make a run's CA and the engines' and driver's certificates (see soak ca --help)

The soak binary also carries the programs a local run starts as its child
processes, so one binary is all a run needs:
  engine   sortie-engine     target   sortie-target
  driver   sortie            gate     sortie-gate
`

// Run is the soak binary's main: it hands each command to the package of
// its job.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.Usage(errors.New("no command"))
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "local":
		return local.Run(ctx, rest, stdout, stderr)
	case "run":
		return kickoff.Run(ctx, cluster.RealEnv(), rest, stdout, stderr)
	case "teardown":
		return teardown.Run(ctx, cluster.RealEnv(), rest, stdout, stderr)
	case "lab":
		return lab.Run(ctx, lab.RealEnv(), rest, stdout, stderr)
	case "ca":
		return ca.Run(rest, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	// The programs soak local starts as its child processes.
	if child, ok := local.Child(cmd); ok {
		return child(ctx, rest, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return cli.Usage(fmt.Errorf("unknown command %q", cmd))
}
