package watchdog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/kube"
)

// Env is what Run takes from outside the process: how to reach the cluster
// and the time. Tests replace both.
type Env = kube.Env

// RealEnv is the environment of the binary: a client from the kubeconfig
// and the wall clock.
func RealEnv() Env { return kube.RealEnv("sortie-watchdog") }

// Run is sortie-watchdog's entry point (see the package documentation and
// --help).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return RunEnv(ctx, RealEnv(), args, stdout, stderr)
}

// RunEnv is Run in the environment env.
func RunEnv(ctx context.Context, env Env, args []string, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "watchdog")
	o, help, err := parseFlags(args, stderr)
	if help {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	client, err := env.NewClient(o.Kubeconfig, o.Context)
	if err != nil {
		return cli.Usage(err)
	}
	if o.Preflight {
		return preflight(ctx, client, o, stdout)
	}

	out := stdout
	if o.LogPath != "" {
		f, err := os.OpenFile(o.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return cli.Usage(fmt.Errorf("open log: %w", err))
		}
		defer f.Close()
		out = io.MultiWriter(stdout, syncWriter{f})
	}
	w := &Watcher{Client: client, Clock: env.Clock, Opts: o, Out: out}
	res := w.Run(ctx, func() string { return endedBy(ctx) })
	if w.writeFailed != nil {
		log.Error("writing output failed; the log may be incomplete", "err", w.writeFailed)
	}
	switch {
	case res.Ended == EndedINT:
		return cli.Silent(cli.ExitInterrupted)
	case res.Ended == EndedTERM:
		return cli.Silent(cli.ExitTerminated)
	case res.Verdict == Pass:
		return nil
	case res.Verdict == Fail:
		return cli.Silent(cli.ExitFail)
	default:
		return cli.Silent(cli.ExitUnproven)
	}
}

// endedBy names the signal that cancelled ctx. A cancellation without a
// signal (a parent context) is taken as a TERM: the run was stopped from
// outside either way.
func endedBy(ctx context.Context) string {
	if cli.Signal(ctx) == os.Interrupt {
		return EndedINT
	}
	return EndedTERM
}

// syncWriter syncs a file after every write, so the log holds every line
// that was printed even if the node dies right after.
type syncWriter struct{ f *os.File }

func (s syncWriter) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	if err != nil {
		return n, err
	}
	return n, s.f.Sync()
}

// preflight checks that every namespace's pods can be listed (and that the
// namespace exists, when the account may read namespaces: listing the pods
// of a namespace that does not exist succeeds with nothing).
func preflight(ctx context.Context, c kubernetes.Interface, o Options, stdout io.Writer) error {
	problems := 0
	for _, ns := range o.Namespaces {
		rctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
		_, err := c.CoreV1().Namespaces().Get(rctx, ns, metav1.GetOptions{})
		cancel()
		if ctx.Err() != nil {
			return interrupted(ctx)
		}
		switch {
		case err == nil:
		case apierrors.IsNotFound(err):
			fmt.Fprintf(stdout, "PREFLIGHT FAIL namespace=%s: namespace does not exist\n", ns)
			problems++
			continue
		case apierrors.IsForbidden(err):
			fmt.Fprintf(stdout, "PREFLIGHT warn namespace=%s: may not get namespaces, so its existence is unverified\n", ns)
		default:
			fmt.Fprintf(stdout, "PREFLIGHT FAIL namespace=%s: get namespace: %s\n", ns, oneLine(err))
			problems++
			continue
		}
		rctx, cancel = context.WithTimeout(ctx, o.RequestTimeout)
		_, err = c.CoreV1().Pods(ns).List(rctx, metav1.ListOptions{Limit: 1})
		cancel()
		if ctx.Err() != nil {
			return interrupted(ctx)
		}
		if err != nil {
			fmt.Fprintf(stdout, "PREFLIGHT FAIL namespace=%s: list pods: %s\n", ns, oneLine(err))
			problems++
			continue
		}
		fmt.Fprintf(stdout, "PREFLIGHT ok namespace=%s pods-listable\n", ns)
	}
	if problems > 0 {
		fmt.Fprintf(stdout, "PREFLIGHT FAILED problems=%d\n", problems)
		return cli.Silent(cli.ExitUsage)
	}
	fmt.Fprintf(stdout, "PREFLIGHT PASS namespaces=%d\n", len(o.Namespaces))
	return nil
}

// interrupted is the error of a run a signal stopped.
func interrupted(ctx context.Context) error {
	if endedBy(ctx) == EndedINT {
		return cli.Silent(cli.ExitInterrupted)
	}
	return cli.Silent(cli.ExitTerminated)
}
