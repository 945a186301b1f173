// Package teardown is `soak teardown`: it removes the release of a run that
// `soak run` (package kickoff) installed, named by the run directory's
// run.env, and refuses while the run's verdict is not saved (no SAVED).
package teardown

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
	"github.com/sortie-soak/sortie/saver"
)

// TeardownOptions configure `soak teardown`.
type TeardownOptions struct {
	// Dir is the run directory (required).
	Dir string
	// Force tears down a run whose verdict was not saved (no SAVED).
	Force bool
	// Purge deletes the report PVC too.
	Purge bool
	// Kubeconfig, Context, Namespace and Release default to run.env's; they
	// are needed only for a run that aborted before run.env was written.
	Kubeconfig, Context, Namespace, Release string
}

// Validate returns every problem at once.
func (o TeardownOptions) Validate() error {
	if o.Dir == "" {
		return errors.New("--dir is required")
	}
	return nil
}

const teardownUsage = `Usage: soak teardown --dir DIR [--force] [--purge]

Tears down the run of DIR (its run.env names the context, namespace and
release): uninstalls the release (engines, driver Job, plan ConfigMap,
Service, ServiceAccount, NetworkPolicy) and keeps the report PVC, which
holds the report and the results stream, unless --purge. The PriorityClass
is cluster-wide and shared by runs: it is kept.

It refuses a run whose verdict was not saved (DIR/SAVED, written by the
saver only once the report is copied out): save it first with
sortie-save --dir DIR, or give it up with --force. A run that aborted before
run.env was written is named with --context, --namespace and --release.

Lines (stdout):
  REFUSED <why>
  TEARDOWN <what was done or kept> | TEARDOWN FAILED <what>: <why>

Exit: 0 torn down, 1 refused or failed, 2 unusable flags or run.env.

Flags:
`

// Run is `soak teardown`: args are what follows "teardown" on the command line.
func Run(ctx context.Context, env cluster.Env, args []string, stdout, stderr io.Writer) error {
	var o TeardownOptions
	fs := flag.NewFlagSet("soak teardown", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, teardownUsage); fs.PrintDefaults() }
	fs.StringVar(&o.Dir, "dir", "", "run `DIR` (required)")
	fs.BoolVar(&o.Force, "force", false, "tear down although DIR has no SAVED: the run's verdict is given up")
	fs.BoolVar(&o.Purge, "purge", false, "delete the report PVC too")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig `file` (default: run.env's KUBECONFIG, else the default rules)")
	fs.StringVar(&o.Context, "context", "", "kubeconfig `context` (default: run.env's CONTEXT)")
	fs.StringVar(&o.Namespace, "namespace", "", "namespace (default: run.env's NAMESPACE)")
	fs.StringVar(&o.Release, "release", "", "Helm release (default: run.env's RELEASE)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return cli.Usage(err)
	}
	if fs.NArg() > 0 {
		return cli.Usage(fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if err := o.Validate(); err != nil {
		return cli.Usage(err)
	}
	return Teardown(ctx, env, o, stdout)
}

// Teardown removes a run's release, and its report PVC with Purge.
func Teardown(ctx context.Context, env cluster.Env, o TeardownOptions, stdout io.Writer) error {
	line := func(format string, args ...any) { fmt.Fprintf(stdout, format+"\n", args...) }
	if st, err := os.Stat(o.Dir); err != nil || !st.IsDir() {
		return cli.Usage(fmt.Errorf("--dir %s is not a run directory", o.Dir))
	}
	vals, err := record.ReadEnvFile(filepath.Join(o.Dir, cluster.RunEnvFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return cli.Usage(fmt.Errorf("--dir %s: %w", o.Dir, err))
	}
	pick := func(flagValue, key string) string {
		if flagValue != "" {
			return flagValue
		}
		return vals.Get(key)
	}
	kubeconfig := pick(o.Kubeconfig, "KUBECONFIG")
	kctx := pick(o.Context, "CONTEXT")
	ns := pick(o.Namespace, "NAMESPACE")
	release := pick(o.Release, "RELEASE")
	var missing []string
	for _, m := range []struct{ name, v string }{{"--context (CONTEXT)", kctx}, {"--namespace (NAMESPACE)", ns}, {"--release (RELEASE)", release}} {
		if m.v == "" {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return cli.Usage(fmt.Errorf("%s has no usable run.env: pass %s", o.Dir, strings.Join(missing, ", ")))
	}
	pvc := vals.Get("PVC")
	if pvc == "" {
		pvc = chart.NamesFor(release).ReportClaim
	}

	if _, err := os.Stat(filepath.Join(o.Dir, saver.FileSaved)); err != nil {
		if !o.Force {
			line("REFUSED %s has no %s: the run's verdict is not saved. Save it first (sortie-save --dir %s), or give it up with --force",
				o.Dir, saver.FileSaved, o.Dir)
			return cli.Silent(cli.ExitFail)
		}
		line("TEARDOWN forced: %s has no %s, the run's verdict is given up", o.Dir, saver.FileSaved)
	}

	cs, err := env.NewClient(kubeconfig, kctx, "teardown")
	if err != nil {
		return cli.Usage(err)
	}
	h, err := env.NewHelm(kubeconfig, kctx)
	if err != nil {
		return cli.Usage(err)
	}
	switch status, err := h.Status(ctx, release, ns); {
	case errors.Is(err, cluster.ErrNoRelease):
		line("TEARDOWN release %s is not in %s (already gone)", release, ns)
	case err != nil:
		line("TEARDOWN FAILED status of release %s: %s", release, cluster.OneLine(err))
		return cli.Silent(cli.ExitFail)
	default:
		if err := h.Uninstall(ctx, release, ns); err != nil {
			line("TEARDOWN FAILED uninstall release %s (status %s): %s", release, status, cluster.OneLine(err))
			return cli.Silent(cli.ExitFail)
		}
		line("TEARDOWN release %s uninstalled from %s (engines, driver Job, plan ConfigMap, Service)", release, ns)
	}

	// The run's CA and certificates are not the release's: the kickoff
	// made the Secret before the install. Once the engines are gone
	// nothing needs them.
	secret := vals.Get("TLS_SECRET")
	if secret == "" {
		secret = chart.NamesFor(release).TLSSecret
	}
	switch err := cs.CoreV1().Secrets(ns).Delete(ctx, secret, metav1.DeleteOptions{}); {
	case apierrors.IsNotFound(err):
	case err != nil:
		line("TEARDOWN FAILED delete secret/%s (the run's CA): %s", secret, cluster.OneLine(err))
		return cli.Silent(cli.ExitFail)
	default:
		line("TEARDOWN secret/%s deleted (the run's CA and certificates)", secret)
	}

	// The saver's reader pod outlives a saver that was stopped mid-copy.
	reader := vals.Get("READER_POD")
	if reader == "" && vals.Get("JOB") != "" {
		reader = vals.Get("JOB") + "-reader"
	}
	if reader != "" {
		err := cs.CoreV1().Pods(ns).Delete(ctx, reader, metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			line("TEARDOWN FAILED delete pod/%s (the saver's reader): %s", reader, cluster.OneLine(err))
			return cli.Silent(cli.ExitFail)
		default:
			line("TEARDOWN pod/%s deleted (the saver's reader, left by a stopped copy)", reader)
		}
	}

	if !o.Purge {
		line("TEARDOWN pvc/%s kept: it holds the reports and streams of the runs (--purge deletes it)", pvc)
	} else {
		err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, pvc, metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
			line("TEARDOWN pvc/%s is not in %s (already gone)", pvc, ns)
		case err != nil:
			line("TEARDOWN FAILED delete pvc/%s: %s", pvc, cluster.OneLine(err))
			return cli.Silent(cli.ExitFail)
		default:
			line("TEARDOWN pvc/%s deleted (--purge)", pvc)
		}
	}
	if pc := vals.Get("PRIORITY_CLASS"); pc != "" {
		line("TEARDOWN priorityclass/%s kept: cluster-wide, shared by runs", pc)
	}
	line("TEARDOWN done dir=%s", o.Dir)
	return nil
}
