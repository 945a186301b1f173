package churn

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Options is what a churn run needs; flags fill it, DefaultOptions gives
// the defaults.
type Options struct {
	// Schedule is the path of the schedule file. Required.
	Schedule string
	// T0 is the load start every step's minute counts from. Required
	// unless DryRun.
	T0 time.Time
	// Namespace is the namespace of a step that names none.
	Namespace string
	// DryRun prints the plan and changes nothing.
	DryRun bool
	// Preflight checks the cluster and stops.
	Preflight bool
	// RolloutTimeout bounds the wait for one rollout to complete.
	RolloutTimeout time.Duration
	// Poll is the time between two reads of a rollout's status.
	Poll time.Duration
	// MaxLate is how long past its time a step may be when the run starts;
	// a run whose schedule is already further along is refused.
	MaxLate time.Duration
	// RequestTimeout bounds one API call.
	RequestTimeout time.Duration
	// CleanupTimeout bounds the undo (restore a shrink, delete a
	// new-serviceaccount step's objects) after an abort or a signal.
	CleanupTimeout time.Duration
	// NewSAImage, NewSACommand and NewSAHold shape a new-serviceaccount
	// step's pod: its image, the shell command it runs, and how long it
	// runs once Ready before it is deleted. NewSALabels are added to the
	// pod's labels (a mesh may need one to take the pod in).
	NewSAImage   string
	NewSACommand string
	NewSAHold    time.Duration
	NewSALabels  map[string]string
	// Kubeconfig and Context select the cluster.
	Kubeconfig string
	Context    string
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		Namespace:      "default",
		RolloutTimeout: 10 * time.Minute,
		Poll:           5 * time.Second,
		MaxLate:        time.Minute,
		RequestTimeout: 30 * time.Second,
		CleanupTimeout: 30 * time.Second,
		NewSAImage:     "curlimages/curl:8.22.0",
		NewSACommand:   "exec sleep 86400",
		NewSAHold:      2 * time.Minute,
	}
}

// Validate returns every problem of o at once.
func (o Options) Validate() error {
	var errs []error
	if o.Schedule == "" {
		errs = append(errs, errors.New("--schedule is required"))
	}
	if o.T0.IsZero() && !o.DryRun && !o.Preflight {
		errs = append(errs, errors.New("--t0 is required (the load start, RFC 3339), except with --dry-run or --preflight"))
	}
	for _, msg := range validation.IsDNS1123Label(o.Namespace) {
		errs = append(errs, fmt.Errorf("--namespace %q: %s", o.Namespace, msg))
	}
	for name, d := range map[string]time.Duration{
		"--rollout-timeout": o.RolloutTimeout, "--poll": o.Poll, "--request-timeout": o.RequestTimeout,
		"cleanup timeout": o.CleanupTimeout, "--newsa-hold": o.NewSAHold,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, d))
		}
	}
	if o.MaxLate < 0 {
		errs = append(errs, fmt.Errorf("--max-late must not be negative, got %v", o.MaxLate))
	}
	if o.NewSAImage == "" {
		errs = append(errs, errors.New("--newsa-image must not be empty"))
	}
	if strings.TrimSpace(o.NewSACommand) == "" {
		errs = append(errs, errors.New("--newsa-command must not be empty"))
	}
	for k, v := range o.NewSALabels {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("--newsa-labels key %q: %s", k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("--newsa-labels value %q: %s", v, msg))
		}
	}
	return errors.Join(errs...)
}

// usageText is printed by --help before the flags.
const usageText = `Usage: sortie-churn --schedule FILE --t0 RFC3339 [flags]
       sortie-churn --schedule FILE [--t0 RFC3339] --dry-run
       sortie-churn --schedule FILE --preflight

Runs a soak's churn schedule: at T0 + each step's minute (T0 is the load
start) it rolls workloads, shrinks a deployment, or starts a pod under a brand
new ServiceAccount. The first step that fails aborts the run: a schedule with
holes is not a soak. A run first checks the cluster (as --preflight) and
refuses to start on any problem.

Schedule file: one step per line, "<minutes after T0> <step>"; "#" starts a
comment; blank lines are skipped; minutes never decrease.
  roll <kind>/<name> [-n ns]
      kind deployment, daemonset or statefulset. A rollout restart: the pod
      template's kubectl.kubernetes.io/restartedAt annotation is patched to
      the current time, then the rollout is awaited (--rollout-timeout) until
      the controller has observed it and every replica is updated and
      available (a DaemonSet: every scheduled pod; a StatefulSet: every
      replica ready on the update revision). Several rolls at the same
      minute are started together, in file order, and awaited together.
  shrink <deployment> <seconds> [-n ns]
      reads the deployment's replica count, scales it to 0, and scales it
      back to that count <seconds> later, while later steps go on. The
      restore also happens on an abort and on SIGTERM/SIGINT.
  new-serviceaccount <node> [-n ns]
      creates a ServiceAccount and a 1-replica Deployment of the same name,
      sa-new-<unix time of the step>, whose pod runs under that account on
      <node> (a node name, or auto: the Ready, schedulable, non-control-plane
      nodes in name order, taken in turn by successive steps) with
      --newsa-image running "sh -c --newsa-command"; waits until it is
      available (--rollout-timeout), keeps it --newsa-hold, then deletes both.
      It makes the node's proxy serve an identity it has never seen.
  The steps of one minute run in file order, the rolls first and together.
  -n defaults to --namespace.

Lines (stdout; times are RFC 3339 UTC, durations whole seconds):
  CHURN START schedule=<file> steps=<n> rolls=<r> shrinks=<s> new_serviceaccounts=<k> t0=<t> at=<t>
  ROLLED <ns>/<kind>/<name> at=<t> took=<s>s
  ROLLED <ns>/serviceaccount/<name> node=<node> at=<t> took=<s>s held=<s>s
  FAILED <ns>/<kind>/<name> at=<t> took=<s>s: <why>
  SHRUNK <ns>/deployment/<name> replicas=<n>->0 at=<t> restore_at=<t>
  RESTORED <ns>/deployment/<name> replicas=0-><n> at=<t>
  WARN <what was left behind or could not be undone>
  CHURN COMPLETE steps=<n> rolled=<r> shrunk=<s> new_serviceaccounts=<k> t0=<t> at=<t>
  CHURN ABORTED: <why> -- stop, fix, relaunch with a fresh T0
  CHURN STOPPED: <signal> at T0+<m>m<s>s after <k> of <n> steps[, during <step>] -- the schedule is incomplete; relaunch with a fresh T0
  CHURN STOPPED: <signal> during the preflight -- nothing was changed
With --dry-run (no API call unless --preflight is given too):
  PLAN T0+<m>m at=<t|-> roll <ns>/<kind>/<name>
  PLAN T0+<m>m at=<t|-> shrink <ns>/deployment/<name> for=<s>s restore_at=<t|->
  PLAN T0+<m>m at=<t|-> new-serviceaccount <ns> node=<node> hold=<s>s
  PLAN steps=<n> rolls=<r> shrinks=<s> new_serviceaccounts=<k> end=T0+<m>m<s>s dry-run: nothing was changed
Preflight (--preflight, and before every run):
  PREFLIGHT ok <ns>/<kind>/<name> <what was checked>
  PREFLIGHT FAIL <ns>/<kind>/<name>: <problem>       one line per problem
  PREFLIGHT PASS targets=<n>  |  PREFLIGHT FAILED problems=<n>
  It checks that every target exists; that the account may patch and get
  each rolled workload, get and update each shrunk deployment's scale, and
  create and delete a new-serviceaccount step's objects (access reviews);
  that every rolled Deployment can roll without dropping traffic: replicas
  > 0, all available, not mid-rollout, strategy RollingUpdate with
  maxUnavailable 0, minReadySeconds >= 10, and a preStop hook and a
  readiness probe on every container; that DaemonSets and StatefulSets roll
  with RollingUpdate and are fully available; and that a new-serviceaccount
  node exists and is Ready.

Exit: 0 the schedule completed, 1 a step failed (CHURN ABORTED), 2 unusable
flags or schedule, a failed preflight, or a T0 already too far behind,
143 SIGTERM, 130 SIGINT.

Flags:
`

// parseFlags fills Options from args and validates them. help reports
// --help, which printed the usage.
func parseFlags(args []string, stderr io.Writer) (o Options, help bool, err error) {
	o = DefaultOptions()
	fs := flag.NewFlagSet("sortie-churn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usageText); fs.PrintDefaults() }
	fs.StringVar(&o.Schedule, "schedule", "", "schedule `file` (required)")
	t0 := fs.String("t0", "", "the load start, `RFC3339` (e.g. 2026-10-05T03:20:00Z); every step waits for T0 + its minute")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the steps that give no -n")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the steps and their times, change nothing")
	fs.BoolVar(&o.Preflight, "preflight", false, "check the cluster for the schedule, then exit (with --dry-run: check, then print the plan)")
	fs.DurationVar(&o.RolloutTimeout, "rollout-timeout", o.RolloutTimeout, "bound of the wait for one rollout (and a new-serviceaccount pod) to complete")
	fs.DurationVar(&o.Poll, "poll", o.Poll, "time between two reads of a rollout's status")
	fs.DurationVar(&o.MaxLate, "max-late", o.MaxLate, "refuse to start when a step is already this far past its time")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "bound of one API call")
	fs.StringVar(&o.NewSAImage, "newsa-image", o.NewSAImage, "image of a new-serviceaccount step's pod")
	fs.StringVar(&o.NewSACommand, "newsa-command", o.NewSACommand, "shell `command` that pod runs (sh -c); env SORTIE_NEWSA_STEP and SORTIE_NEWSA_NODE name the step and node")
	fs.DurationVar(&o.NewSAHold, "newsa-hold", o.NewSAHold, "how long that pod runs once available, before it is deleted")
	labels := fs.String("newsa-labels", "", "extra pod `labels` k=v,k=v of that pod")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig `file` (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	fs.StringVar(&o.Context, "context", "", "kubeconfig context `name` (default: the file's current context)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, true, nil
		}
		return o, false, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if *t0 != "" {
		t, err := time.Parse(time.RFC3339, *t0)
		if err != nil {
			errs = append(errs, fmt.Errorf("--t0: %w", err))
		}
		o.T0 = t
	}
	if *labels != "" {
		o.NewSALabels = map[string]string{}
		for _, kv := range strings.Split(*labels, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				errs = append(errs, fmt.Errorf("--newsa-labels: %q is not k=v", kv))
				continue
			}
			o.NewSALabels[k] = v
		}
	}
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	return o, false, errors.Join(errs...)
}
