package local

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sortie-soak/sortie/driver"
	"github.com/sortie-soak/sortie/engine"
	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/gate"
	"github.com/sortie-soak/sortie/internal/cli"
)

const localUsage = `Usage: soak local [--duration 60s] [--nodes 2] [--targets FILE] [--out DIR]
                  [--rolls] [--no-drain] [--roll-idle] [--fault SPEC]...
                  [--insecure-plaintext] [--protocol http1|h2|grpc|tcp|udp]

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
stderr), sortie.out, rolls.log, faults.log, report.html (the gate's HTML
report: one self-contained page with a chart per target and node, the rolls
and faults marked; --html), and a log per engine and target replica.

The engines' control plane is mutual TLS by default: soak local makes a CA
for the run and writes it with the engine and driver certificates under
DIR/<tag>/tls/ (ca.crt, engine.crt, engine.key, driver.crt, driver.key;
keys 0600; the CA's key is never written), starts every engine with
--tls-cert/--tls-key/--client-ca and --allow-targets 127.0.0.1 (where the
local Services listen), and the driver with --client-cert/--client-key/
--engine-ca. --insecure-plaintext runs both in plaintext instead.

Faults (--fault, repeatable; times after the load start):
  target-down:<target>@<start>+<length>   the target answers 503 for the window
  target-fail:<target>@<start>+<count>    the target resets the next <count>
                                          requests (TCP RST, no answer), 1 to 10000
  target-fail:<target>@<start>+<length>   ... or every request of the window
  engine-kill:<node>@<start>              SIGKILL the node's engine
  engine-freeze:<node>@<start>+<length>   SIGSTOP the engine, SIGCONT after the window
  engine-restart:<node>@<start>+<down>    SIGKILL the node's engine; after <down> start a
                                          new engine of the same node name at the node's
                                          address: the driver gives it the rest of the
                                          schedule and the gate names the node's GAP;
                                          repeat it to restart the node again later
                                          (one GAP line each; down times must not overlap)
  driver-freeze:@<start>+<length>         SIGSTOP the driver, SIGCONT after the window
  driver-kill:@<start>[+<delay>]          SIGKILL the driver; after <delay> (3s) start it
                                          again with --resume
  driver-term:@<start>[+<delay>]          SIGTERM the driver (it detaches, the engines
                                          run on); after <delay> (3s) resume it
Each fault, once over, writes one line to faults.log and stderr:
  FAULT <kind> <target|node|driver> at=<t> end=<t> spec=<SPEC> [failed=<n>] [left=<n>]
at and end bound it (the same time for engine-kill, driver-kill and
driver-term, whose gap the report names in driver_gaps and the gate in its
DRIVER line); failed counts the
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

--protocol picks what the engines speak to the targets:
  http1  HTTP/1.1 (the default)
  h2     HTTP/2 with prior knowledge: targets with --h2c, the plan's
         protocol: http2
  tcp    raw TCP echo: each target replica runs --tcp-echo behind its local
         Service; the plan's targets are tcp://<Service> with a body (the
         message echoed and matched), its thresholds the tcp zero-failure
         set and a floor of tcp_messages_received. A raw TCP connection is
         never reopened, so a draining replica keeps echoing on the
         connections it holds until the engines close them at the end of
         the load (--echo-drain-grace of the load's length): --rolls pass,
         with held_conns the engines' connections. With --no-drain the
         connections close at SIGTERM and every later message is
         tcp_unavailable: FAIL, attributed to the rolled target and node.
  udp    UDP echo: each replica runs --udp-echo behind a UDP stand-in of a
         Service (a flow per client address, kept on one endpoint; a
         removed endpoint's flows are forgotten, as kube-proxy clears their
         conntrack entries); udp:// targets with a body, the udp
         zero-failure set and a floor of udp_datagrams_received. A UDP
         replica holds no connection, so --rolls that lose nothing are
         UNOBSERVED (exit 3); --rolls --no-drain FAIL with udp_lost
         attributed to the rolled target and node.
Target faults (target-down, target-fail) are HTTP answers: tcp and udp
refuse them. grpc takes them: target-down answers UNAVAILABLE
(grpc_status.14, HTTP 200, trailers-only), target-fail resets the stream.

Flags:
`

// Run is `soak local`: args are what follows "local" on the command line.
// The soak binary itself (os.Executable) is started again as each child
// process, so it must answer to the commands Child names.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := DefaultLocalOptions()
	fs := flag.NewFlagSet("soak local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, localUsage)
		fs.PrintDefaults()
	}
	cli.DurationVar(fs, &o.Duration, "duration", o.Duration, "how long the load runs (whole seconds)")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "engines, one per simulated node")
	fs.IntVar(&o.Rate, "rate", o.Rate, "requests per second per node over all targets")
	fs.StringVar(&o.TargetsFile, "targets", o.TargetsFile, "targets `FILE` (name url weight); default: the built-in 8-target shape")
	fs.StringVar(&o.Out, "out", o.Out, "`DIR` that receives the run directory")
	fs.StringVar(&o.Tag, "tag", o.Tag, "name of the run directory (default local-<UTC time>)")
	fs.BoolVar(&o.Rolls, "rolls", o.Rolls, "restart every target once during the run, like a rolling update")
	fs.BoolVar(&o.NoDrain, "no-drain", o.NoDrain, "run the targets as naive servers that exit at once on SIGTERM")
	fs.BoolVar(&o.RollIdle, "roll-idle", o.RollIdle, "with --rolls, roll a spare replica of each target that receives no traffic (must exit 3 UNOBSERVED)")
	fs.Var((*faultList)(&o.Faults), "fault", "inject a fault `SPEC` (repeatable; see above)")
	fs.BoolVar(&o.NoResume, "no-resume", o.NoResume, "leave a driver that driver-kill or driver-term stopped stopped: the negative control of the resume, which must never PASS")
	cli.DurationVar(fs, &o.Progress, "progress", o.Progress, "interval of the driver's progress lines per target and node")
	cli.DurationVar(fs, &o.DeadlineGrace, "deadline-grace", o.DeadlineGrace, "the driver's slack before a silent engine's deadline")
	cli.DurationVar(fs, &o.AnswerWindow, "answer-window", o.AnswerWindow, "the driver's wait for an answer after a deadline")
	cli.DurationVar(fs, &o.CancelWait, "cancel-wait", o.CancelWait, "the driver's wait for a cancelled execution's answer before it names the engine silent")
	fs.StringVar(&o.HTML, "html", o.HTML, "file `NAME` of the gate's HTML report in the run directory (\"\" writes none)")
	cli.DurationVar(fs, &o.Lag, "lag", o.Lag, "how long a replica that leaves the endpoints still receives new connections")
	fs.StringVar(&o.Protocol, "protocol", o.Protocol, "what the engines speak to the targets: http1, h2 (HTTP/2 with prior knowledge: targets with --h2c, the plan's protocol: http2), grpc (gRPC unary calls to the targets' echo service over h2c: the plan's grpc: {mode: unary}), tcp or udp (echo load; see above)")
	fs.BoolVar(&o.InsecurePlaintext, "insecure-plaintext", o.InsecurePlaintext, "run the engines' control plane in plaintext instead of the run's mTLS (debugging only)")
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

// Child returns the main of one of the programs a local run starts as its
// child processes ("engine": sortie-engine, "target": sortie-target,
// "driver": sortie, "gate": sortie-gate), and false for any other name. The
// binary that runs Run dispatches these names to them, so one binary is all
// a run needs.
func Child(name string) (func(ctx context.Context, args []string, stdout, stderr io.Writer) error, bool) {
	switch name {
	case "engine":
		return engine.Run, true
	case "target":
		return fixture.Run, true
	case "driver":
		return driver.Run, true
	case "gate":
		return gate.Run, true
	}
	return nil, false
}
