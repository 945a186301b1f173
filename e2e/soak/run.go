package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sortie-soak/sortie/driver"
	"github.com/sortie-soak/sortie/e2e/soak/lab"
	"github.com/sortie-soak/sortie/engine"
	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/gate"
	"github.com/sortie-soak/sortie/internal/cli"
)

const usage = `Usage: soak <command> [flags]

Commands:
  local    run the whole soak loop on this machine (see soak local --help)
  run      launch a run on a Kubernetes cluster: soak run e2e|soak (see soak run --help)
  teardown remove a run's release once its verdict is saved (see soak teardown --help)
  lab      a real Kubernetes cluster on this machine: soak lab up|down|status|build (see soak lab --help)

The soak binary also carries the programs a local run starts as its child
processes, so one binary is all a run needs:
  engine   sortie-engine     target   sortie-target
  driver   sortie            gate     sortie-gate
`

const localUsage = `Usage: soak local [--duration 60s] [--nodes 2] [--targets FILE] [--out DIR]
                  [--rolls] [--no-drain] [--roll-idle] [--fault SPEC]...

Runs a whole soak on this machine: one fixture target process per target,
each behind a local Service address; one engine per node as a child process
on its own loopback address (node-a on 127.0.0.11, node-b on 127.0.0.12, ...);
the plan rendered for them (default: 8 targets, 60 rps per node, 9 x 6 + 3 x 2);
the driver as a child process writing the report and the results stream; and
the gate grading the run per target and per node. It prints the gate's lines
on stdout and exits with the gate's code: 0 PASS, 1 FAIL, 2 unusable input
(a plan the driver refuses too), 3 UNOBSERVED (nothing graded, or rolls that
touched nothing: see --rolls). Every child process is stopped on exit, also
on Ctrl-C. Ctrl-C during the load stops the driver,
which writes the report of the cancelled run; it is graded, and the exit is
the gate's code, or 1 when the gate passed it (never 0).

The run directory DIR/<tag>/ holds plan.yaml, shares.tsv, engines.tsv,
report.json, results.jsonl, live.jsonl (the live record: every timeline
bucket and failure sample, on disk within seconds), sortie.log (the driver's
stderr), sortie.out, rolls.log, faults.log, and a log per engine and target
replica.

Faults (--fault, repeatable; times after the load start):
  target-down:<target>@<start>+<length>   the target answers 503 for the window
  target-fail:<target>@<start>+<count>    the target resets the next <count>
                                          requests (TCP RST, no answer), 1 to 10000
  target-fail:<target>@<start>+<length>   ... or every request of the window
  engine-kill:<node>@<start>              SIGKILL the node's engine
  engine-freeze:<node>@<start>+<length>   SIGSTOP the engine, SIGCONT after the window
  driver-freeze:@<start>+<length>         SIGSTOP the driver, SIGCONT after the window
Each fault, once over, writes one line to faults.log and stderr:
  FAULT <kind> <target|node|driver> at=<t> end=<t> spec=<SPEC> [failed=<n>] [left=<n>]
at and end bound it (the same time for engine-kill); failed counts the
requests a target fault failed; left, what a counted target-fail still had to
fail when the run ended first.

--rolls restarts every target once, spread over the middle of the run, like
a rolling update: a new replica starts and joins the Service, then the old
one leaves the endpoints, waits out the propagation lag (its pre-stop) and
gets SIGTERM, and drains: the soak must PASS with zero failures. Each roll,
once the old replica has exited, writes one line to rolls.log and stderr, in
the format of sortie-churn's (times RFC 3339 UTC to the millisecond):
  ROLLED <target> at=<begin> took=<s>s end=<end> term=<SIGTERM> held_conns=<n> held_inflight=<n> answered_after_term=<n>
  FAILED <target> at=<begin> took=<s>s end=<end>: <why>
held_* are what the old replica held when its SIGTERM landed: open
connections, requests in flight, and the requests it answered after (absent
when it did not say). A run in which no rolled replica held a connection or
a request is UNOBSERVED, not PASS: it proved nothing about draining. After
the gate's lines it prints
  UNOBSERVED rolls=<n> touched=0: no rolled replica held a connection or a request at SIGTERM; the rolls prove nothing about draining
and exits 3 (a FAIL stays a FAIL, exit 1). With --no-drain the replicas are
naive servers: SIGTERM at once, exit at once, while the endpoints still route
to them for the lag: the negative control, which must FAIL with the failures
on the rolled targets. With --roll-idle each roll replaces a spare replica
of its target that no endpoint list holds: the negative control of the
UNOBSERVED rule, which must exit 3.

Flags:
`

// Run is the soak binary's main.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.Usage(errors.New("no command"))
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "local":
		return runLocal(ctx, rest, stdout, stderr)
	case "run":
		return runKube(ctx, RealKubeEnv(), rest, stdout, stderr)
	case "teardown":
		return runTeardown(ctx, RealKubeEnv(), rest, stdout, stderr)
	case "lab":
		return lab.Run(ctx, lab.RealEnv(), rest, stdout, stderr)
	case "engine":
		return engine.Run(ctx, rest, stdout, stderr)
	case "target":
		return fixture.Run(ctx, rest, stdout, stderr)
	case "driver":
		return driver.Run(ctx, rest, stdout, stderr)
	case "gate":
		return gate.Run(ctx, rest, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return cli.Usage(fmt.Errorf("unknown command %q", cmd))
}

func runLocal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := DefaultLocalOptions()
	fs := flag.NewFlagSet("soak local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, localUsage)
		fs.PrintDefaults()
	}
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long the load runs (whole seconds)")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "engines, one per simulated node")
	fs.IntVar(&o.Rate, "rate", o.Rate, "requests per second per node over all targets")
	fs.StringVar(&o.TargetsFile, "targets", o.TargetsFile, "targets `FILE` (name url weight); default: the built-in 8-target shape")
	fs.StringVar(&o.Out, "out", o.Out, "`DIR` that receives the run directory")
	fs.StringVar(&o.Tag, "tag", o.Tag, "name of the run directory (default local-<UTC time>)")
	fs.BoolVar(&o.Rolls, "rolls", o.Rolls, "restart every target once during the run, like a rolling update")
	fs.BoolVar(&o.NoDrain, "no-drain", o.NoDrain, "run the targets as naive servers that exit at once on SIGTERM")
	fs.BoolVar(&o.RollIdle, "roll-idle", o.RollIdle, "with --rolls, roll a spare replica of each target that receives no traffic (must exit 3 UNOBSERVED)")
	fs.Var((*faultList)(&o.Faults), "fault", "inject a fault `SPEC` (repeatable; see above)")
	fs.DurationVar(&o.Progress, "progress", o.Progress, "interval of the driver's progress lines per target and node")
	fs.DurationVar(&o.DeadlineGrace, "deadline-grace", o.DeadlineGrace, "the driver's slack before a silent engine's deadline")
	fs.DurationVar(&o.AnswerWindow, "answer-window", o.AnswerWindow, "the driver's wait for an answer after a deadline")
	fs.DurationVar(&o.CancelWait, "cancel-wait", o.CancelWait, "the driver's wait for a cancelled execution's answer before it names the engine silent")
	fs.DurationVar(&o.Lag, "lag", o.Lag, "how long a replica that leaves the endpoints still receives new connections")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return cli.Usage(err)
	}
	if fs.NArg() > 0 {
		return cli.Usage(fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the soak binary: %w", err)
	}
	return Local(ctx, o, self, stdout, stderr)
}
