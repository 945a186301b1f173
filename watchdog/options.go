package watchdog

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sortie-soak/sortie/internal/cli"
)

// Options is what a watch needs; flags fill it, DefaultOptions gives the
// soak's values.
type Options struct {
	// Namespaces whose pods are watched. Required.
	Namespaces []string
	// Interval between samples.
	Interval time.Duration
	// Duration of the watch from its start; the last sample is taken at
	// the end, even when that is less than an interval after the one before.
	Duration time.Duration
	// LogPath, when set, receives every line that goes to stdout, appended
	// and synced line by line.
	LogPath string
	// Preflight checks that every namespace can be listed, and stops.
	Preflight bool
	// Kubeconfig and Context select the cluster (empty: the default
	// loading rules, then in-cluster).
	Kubeconfig string
	Context    string
	// BaselineAttempts is how many times the baseline is tried, and
	// BaselineRetry the wait between two tries.
	BaselineAttempts int
	BaselineRetry    time.Duration
	// RequestTimeout bounds one list call.
	RequestTimeout time.Duration
}

// DefaultOptions returns the soak's defaults: a sample every 2 minutes for
// the graded 8 hours, a baseline tried 5 times 10 s apart.
func DefaultOptions() Options {
	return Options{
		Interval:         120 * time.Second,
		Duration:         8 * time.Hour,
		BaselineAttempts: 5,
		BaselineRetry:    10 * time.Second,
		RequestTimeout:   20 * time.Second,
	}
}

// Validate returns every problem of o at once.
func (o Options) Validate() error {
	var errs []error
	if len(o.Namespaces) == 0 {
		errs = append(errs, errors.New("--namespaces is required"))
	}
	seen := map[string]bool{}
	for _, ns := range o.Namespaces {
		if ns == "" {
			errs = append(errs, errors.New("--namespaces has an empty name"))
			continue
		}
		for _, m := range validation.IsDNS1123Label(ns) {
			errs = append(errs, fmt.Errorf("namespace %q: %s", ns, m))
		}
		if seen[ns] {
			errs = append(errs, fmt.Errorf("namespace %q is listed twice", ns))
		}
		seen[ns] = true
	}
	if o.Interval <= 0 {
		errs = append(errs, fmt.Errorf("--interval must be positive, got %v", o.Interval))
	}
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration must be positive, got %v", o.Duration))
	}
	if o.BaselineAttempts < 1 {
		errs = append(errs, fmt.Errorf("baseline attempts must be at least 1, got %d", o.BaselineAttempts))
	}
	if o.BaselineRetry < 0 {
		errs = append(errs, fmt.Errorf("baseline retry wait must not be negative, got %v", o.BaselineRetry))
	}
	if o.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--request-timeout must be positive, got %v", o.RequestTimeout))
	}
	return errors.Join(errs...)
}

// usageText is printed by --help before the flags.
const usageText = `Usage: sortie-watchdog --namespaces a,b,c [--interval 120s] [--duration 8h]
                       [--log FILE] [--preflight] [--kubeconfig FILE] [--context NAME]

Watches the restart counts of every container (init containers included) of
every pod in the namespaces, from a baseline taken at start, and grades the
window: PASS when no container restarted, FAIL when one did, UNPROVEN when
the watch cannot say (no baseline, a failed sample, cut short, no sample).

Containers are keyed by pod UID and container name: a pod created during the
run (every roll makes new ones) starts from zero, so replacing a pod is not a
restart, and any restart the new pod takes is. A restarted container whose pod
later disappears stays listed with seen=gone.

Lines (stdout, and appended to --log; times are RFC 3339 UTC):
  START restart-watch namespaces=a,b interval=<s>s duration=<s>s at=<t>
  ERROR baseline attempt=<i>/<n> ns=<ns>: <error>
      a baseline try failed; every namespace must answer in one try, tried
      5 times 10 s apart
  BASELINE count=<n> containers=<c> pods=<p> at=<t>
      n containers had restarted before the watch: reported, never counted
  BASELINE <ns>/<pod>/<container> restarts=<r> lastReason=<reason> exitCode=<code> finishedAt=<t> state=<state>
  WARN namespace=<ns> has no pods at baseline
  ok count=0 sample=<k> baseline=<n> at=<t>
      every namespace answered sample k and no container restarted since the
      baseline: the only line that means "none"
  RESTARTS count=<n> sample=<k> baseline=<b> at=<t>
  RESTART <ns>/<pod>/<container> restarts=<r> new=<m> lastReason=<reason> exitCode=<code> finishedAt=<t> state=<state> seen=live|gone
      one per restarted container, cumulative over the run; state is
      running, waiting:<reason>, terminated:<reason> or unknown; "-" marks
      an absent field
  ERROR sample=<k> ns=<ns>: <error>
      that namespace did not answer sample k: the sample proves nothing
  SUMMARY RESTART <ns>/<pod>/<container> ...       the restarted containers again
  SUMMARY restart-watch verdict=PASS|FAIL|UNPROVEN [reason=<r>[,<r>]] new_restarts=<m> containers=<n> samples=<k> error_samples=<e> baseline=<b> ended=complete|TERM|INT from=<t> to=<t> namespaces=a,b
      the last line; reason (UNPROVEN only) is no-baseline, cut-short,
      error-samples or no-samples

With --preflight (nothing else is done):
  PREFLIGHT ok namespace=<ns> pods-listable
  PREFLIGHT warn namespace=<ns>: <why the namespace's existence is unverified>
  PREFLIGHT FAIL namespace=<ns>: <problem>
  PREFLIGHT PASS namespaces=<n>  |  PREFLIGHT FAILED problems=<n>

SIGTERM or SIGINT at any moment, also during an API call, prints the summary
(ended=TERM|INT) and exits 143 or 130 at once.

Exit: 0 PASS, 1 FAIL, 2 unusable flags or a failed preflight, 3 UNPROVEN,
143 SIGTERM, 130 SIGINT.

Flags:
`

// parseFlags fills Options from args and validates them. help reports
// --help, which printed the usage.
func parseFlags(args []string, stderr io.Writer) (o Options, help bool, err error) {
	o = DefaultOptions()
	fs := flag.NewFlagSet("sortie-watchdog", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usageText); fs.PrintDefaults() }
	namespaces := fs.String("namespaces", "", "comma-separated `list` of namespaces to watch (required)")
	cli.DurationVar(fs, &o.Interval, "interval", o.Interval, "time between samples (`seconds` as a bare integer, or a duration such as 2m)")
	cli.DurationVar(fs, &o.Duration, "duration", o.Duration, "length of the watch (seconds, or a duration such as 8h30m); the last sample is taken at its end")
	fs.StringVar(&o.LogPath, "log", "", "append every output line to this `file` as well, synced line by line")
	fs.BoolVar(&o.Preflight, "preflight", false, "only check that every namespace can be listed, then exit")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig `file` (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	fs.StringVar(&o.Context, "context", "", "kubeconfig context `name` (default: the file's current context)")
	cli.DurationVar(fs, &o.RequestTimeout, "request-timeout", o.RequestTimeout, "bound of one list call")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, true, nil
		}
		return o, false, err
	}
	if fs.NArg() > 0 {
		return o, false, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *namespaces != "" {
		for _, ns := range strings.Split(*namespaces, ",") {
			o.Namespaces = append(o.Namespaces, strings.TrimSpace(ns))
		}
	}
	return o, false, o.Validate()
}
