package churn

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/kube"
)

// Env is what Run takes from outside the process: how to reach the cluster
// and the time. Tests replace both.
type Env = kube.Env

// RealEnv is the environment of the binary: a client from the kubeconfig
// and the wall clock.
func RealEnv() Env { return kube.RealEnv("sortie-churn") }

// Run is sortie-churn's entry point (see the package documentation and
// --help).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return RunEnv(ctx, RealEnv(), args, stdout, stderr)
}

// RunEnv is Run in the environment env.
func RunEnv(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "churn")
	o, help, err := parseFlags(args, stderr)
	if help {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	sched, err := readSchedule(o.Schedule, o.Namespace)
	if err != nil {
		return cli.Usage(err)
	}
	if !o.DryRun || o.Preflight {
		if err := o.ForSchedule(sched); err != nil {
			return cli.Usage(err)
		}
	}
	c := &Churner{Clock: env.Clock, Opts: o, Schedule: sched, Out: stdout, Log: log}
	needClient := !o.DryRun || o.Preflight
	if needClient {
		if c.Client, err = env.NewClient(o.Kubeconfig, o.Context); err != nil {
			return cli.Usage(err)
		}
	}
	if o.Preflight || !o.DryRun {
		problems, err := c.Preflight(ctx)
		if err != nil {
			c.line("CHURN STOPPED: %s during the preflight -- nothing was changed", signalName(cli.Signal(ctx)))
			return stopped(ctx)
		}
		if problems > 0 {
			return cli.Silent(cli.ExitUsage)
		}
		if !o.DryRun && o.Preflight {
			return nil
		}
	}
	if o.DryRun {
		c.plan()
		return nil
	}
	if err := c.checkLate(); err != nil {
		return cli.Usage(err)
	}
	if o.MemoryTSV != "" {
		f, fresh, err := openAppend(o.MemoryTSV)
		if err != nil {
			return cli.Usage(fmt.Errorf("--memory-tsv: %w", err))
		}
		defer f.Close()
		c.MemoryOut, c.memoryHeader = syncWriter{f}, !fresh
	}
	switch c.Run(ctx) {
	case Complete:
		return nil
	case Aborted:
		return cli.Silent(cli.ExitFail)
	default:
		return stopped(ctx)
	}
}

// readSchedule parses the schedule file; errors name it by its base name
// and line.
func readSchedule(path, ns string) (*Schedule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read schedule: %w", err)
	}
	defer f.Close()
	return ParseSchedule(filepath.Base(path), f, ns)
}

// stopped is the error of a run a signal stopped: exit 130 for SIGINT, 143
// otherwise.
func stopped(ctx context.Context) error {
	if cli.Signal(ctx) == os.Interrupt {
		return cli.Silent(cli.ExitInterrupted)
	}
	return cli.Silent(cli.ExitTerminated)
}

// checkLate refuses a run whose schedule has already begun: a step more
// than MaxLate past its time means T0 is stale, and running the rest would
// make a schedule with holes.
func (c *Churner) checkLate() error {
	now := c.Clock.Now()
	var late []string
	for _, st := range c.Schedule.Steps {
		if d := now.Sub(st.At(c.Opts.T0)); d > c.Opts.MaxLate {
			late = append(late, fmt.Sprintf("line %d (%s)", st.Line, offset(st.At(c.Opts.T0).Sub(c.Opts.T0))))
		}
	}
	if len(late) == 0 {
		return nil
	}
	return fmt.Errorf("%d steps are already past their time at %s (T0 %s): %s; relaunch with a fresh T0",
		len(late), stamp(now), stamp(c.Opts.T0), strings.Join(late, ", "))
}

// plan prints the dry run: every step, its time, and what it would do.
func (c *Churner) plan() {
	t0 := c.Opts.T0
	at := func(off int) string {
		if t0.IsZero() {
			return "-"
		}
		return stamp(t0.Add(minutes(off)))
	}
	for _, st := range c.Schedule.Steps {
		head := fmt.Sprintf("PLAN %s at=%s", offset(minutes(st.Minute)), at(st.Minute))
		switch st.Kind {
		case StepRoll:
			c.line("%s roll %s", head, st.Target)
		case StepShrink:
			restore := "-"
			if !t0.IsZero() {
				restore = stamp(st.At(t0).Add(seconds(st.Seconds)))
			}
			c.line("%s shrink %s for=%ds restore_at=%s", head, st.Target, st.Seconds, restore)
		case StepNewSA:
			c.line("%s new-serviceaccount %s node=%s hold=%s", head, st.Target.Namespace, st.Node, secs(c.Opts.NewSAHold))
		case StepSample:
			c.line("%s sample %s", head, st.Target)
		case StepOutage:
			c.line("%s daemon-outage %s victim=%s", head, st.Target, st.Victim)
		}
	}
	rolls, shrinks, newSAs := c.Schedule.Counts()
	c.line("PLAN steps=%d rolls=%d shrinks=%d new_serviceaccounts=%d end=%s dry-run: nothing was changed",
		len(c.Schedule.Steps), rolls, shrinks, newSAs, offset(c.Schedule.End()))
}

// openAppend opens path for appending, creating it; fresh reports that it
// was empty (so the header is still to be written).
func openAppend(path string) (f *os.File, fresh bool, err error) {
	f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, false, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, err
	}
	return f, st.Size() == 0, nil
}

// syncWriter syncs each write: a sample is on disk when its line is
// printed, whatever happens to the run afterwards.
type syncWriter struct{ f *os.File }

func (w syncWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err == nil {
		err = w.f.Sync()
	}
	return n, err
}
