package churn

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sortie-soak/sortie/engine/oneshot"
	"github.com/sortie-soak/sortie/internal/cli"
)

// Options is what a churn run needs; flags fill it, DefaultOptions gives
// the defaults.
type Options struct {
	// Schedule is the path of the schedule file. Required.
	Schedule string
	// T0 is the moment every step's minute counts from: the load start
	// (--t0) plus Settle. Required unless DryRun.
	T0 time.Time
	// Settle is how long after the load start the schedule's T0 is: 0 by
	// default (minute m is m minutes into the load); 240s gives a schedule
	// of the bash harness the meaning it had there, whose churn started,
	// and took its T0, 240 s after the load.
	Settle time.Duration
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
	// NewSAImage is the image of a new-serviceaccount step's pod: the
	// engine image, whose entrypoint sortie-engine runs its client mode
	// (sortie-engine oneshot). Required by a schedule with such a step.
	NewSAImage string
	// NewSATargets are the client's targets (required with such a step);
	// each gets NewSARequests requests at NewSARate a second, each bounded
	// by NewSATimeout.
	NewSATargets  []oneshot.Target
	NewSARequests int
	NewSARate     int
	NewSATimeout  time.Duration
	// NewSAHold is how long past the client's own bound (its last request's
	// due time plus its timeout) the step waits for the tally.
	NewSAHold time.Duration
	// NewSALabels and NewSAAnnotations are added to the pod's (a mesh
	// needs a label to take the pod in, an annotation to know where it
	// sends). NewSAUpstreamsAnnotation, when set, is an annotation whose
	// value is the targets' names, comma-separated.
	NewSALabels              map[string]string
	NewSAAnnotations         map[string]string
	NewSAUpstreamsAnnotation string
	// Kubeconfig and Context select the cluster.
	Kubeconfig string
	Context    string

	// The preflight's bar for the mesh workloads under load: the rolled
	// Deployments of MeshNamespaces (empty: Namespace).
	MeshNamespaces []string
	// ManagedLabel is the key=value the pod template of a mesh workload must
	// carry for the mesh to manage it; empty skips the check.
	ManagedLabel string
	// SARule is SAOwn (a mesh workload runs under the ServiceAccount of its
	// own name: the mesh names its service after the account) or SAAny.
	SARule string
	// MinPreStopSleep is the least preStop sleep of every container of a mesh
	// workload: an old pod must keep serving while its removal propagates
	// to every proxy. 0 skips the check.
	MinPreStopSleep time.Duration
	// Drain is what the grace period must hold beyond the preStop sleep: the
	// application's own shutdown after SIGTERM.
	Drain time.Duration

	// A daemon-outage step waits at most OutageWindow after its roll for
	// the victim node's daemon to be down, reading it every OutagePoll,
	// and counts FailedMount events for OutageSettle after it is done.
	OutageWindow time.Duration
	OutagePoll   time.Duration
	OutageSettle time.Duration

	// SampleAfter are the workloads (ns/kind/name) whose containers' memory
	// is sampled SampleAge after each of their rolls completes.
	SampleAfter []string
	SampleAge   time.Duration
	// MemoryTSV is the file the memory samples are appended to; empty: none
	// is written (the SAMPLED and MEMORY lines still are).
	MemoryTSV string
}

// ServiceAccount rules of the preflight.
const (
	SAOwn = "own"
	SAAny = "any"
)

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{
		Namespace:      "default",
		RolloutTimeout: 10 * time.Minute,
		Poll:           5 * time.Second,
		MaxLate:        time.Minute,
		RequestTimeout: 30 * time.Second,
		CleanupTimeout: 30 * time.Second,
		NewSARequests:  240,
		NewSARate:      2,
		NewSATimeout:   5 * time.Second,
		NewSAHold:      2 * time.Minute,
		// What the mesh of the bash harness needs of a pod: its management
		// label, and the upstreams it will call.
		NewSALabels:              map[string]string{"aether.io/managed": "true"},
		NewSAUpstreamsAnnotation: "config.aether.io/upstreams",

		ManagedLabel:    "aether.io/managed=true",
		SARule:          SAOwn,
		MinPreStopSleep: 10 * time.Second,
		Drain:           5 * time.Second,
		SampleAge:       10 * time.Minute,
		OutageWindow:    5 * time.Minute,
		OutagePoll:      time.Second,
		OutageSettle:    30 * time.Second,
	}
}

// CheckSampleAfter returns a problem per entry of a --sample-after list
// that is not <namespace>/<kind>/<name>.
func CheckSampleAfter(refs []string) error {
	var errs []error
	for _, r := range refs {
		parts := strings.Split(r, "/")
		if len(parts) != 3 || canonicalKind(parts[1]) != parts[1] || len(validation.IsDNS1123Label(parts[0])) > 0 || len(validation.IsDNS1123Subdomain(parts[2])) > 0 {
			errs = append(errs, fmt.Errorf("--sample-after %q: want <namespace>/<kind>/<name>, kind deployment, daemonset or statefulset", r))
		}
	}
	return errors.Join(errs...)
}

// newSABurst is the client's burst as the step's pod runs it. Its step
// name is a stand-in of the right form: the pod gets the real one, and
// only the checks and the time bound are read here.
func (o Options) newSABurst() oneshot.Options {
	b := oneshot.DefaultOptions()
	b.Targets, b.Requests, b.Rate, b.Timeout = o.NewSATargets, o.NewSARequests, o.NewSARate, o.NewSATimeout
	b.Step = "sa-new-0"
	return b
}

// ForSchedule returns the problems of o that only a schedule's steps
// make: a new-serviceaccount step needs the client's image and targets.
func (o Options) ForSchedule(s *Schedule) error {
	_, _, newSAs := s.Counts()
	if newSAs == 0 {
		return nil
	}
	var errs []error
	if o.NewSAImage == "" {
		errs = append(errs, errors.New("--newsa-image is required by a new-serviceaccount step: the sortie-engine image, whose client mode the step's pod runs"))
	}
	if len(o.NewSATargets) == 0 {
		errs = append(errs, errors.New("--newsa-targets is required by a new-serviceaccount step: name=url,... of the targets its pod sends to"))
	}
	return errors.Join(errs...)
}

// meshNamespace reports whether ns holds mesh workloads under load.
func (o Options) meshNamespace(ns string) bool {
	if len(o.MeshNamespaces) == 0 {
		return ns == o.Namespace
	}
	return slices.Contains(o.MeshNamespaces, ns)
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
		"--outage-window": o.OutageWindow, "--outage-poll": o.OutagePoll,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, d))
		}
	}
	if o.Settle < 0 {
		errs = append(errs, fmt.Errorf("--settle must not be negative, got %v", o.Settle))
	}
	if o.OutageSettle < 0 {
		errs = append(errs, fmt.Errorf("--outage-settle must not be negative, got %v", o.OutageSettle))
	}
	if o.MaxLate < 0 {
		errs = append(errs, fmt.Errorf("--max-late must not be negative, got %v", o.MaxLate))
	}
	if len(o.NewSATargets) > 0 {
		if err := o.newSABurst().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("the new-serviceaccount client (--newsa-targets, --newsa-requests, --newsa-rate, --newsa-timeout): %w", err))
		}
	}
	for k := range o.NewSAAnnotations {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("--newsa-annotations key %q: %s", k, msg))
		}
	}
	if o.NewSAUpstreamsAnnotation != "" {
		for _, msg := range validation.IsQualifiedName(o.NewSAUpstreamsAnnotation) {
			errs = append(errs, fmt.Errorf("--newsa-upstreams-annotation %q: %s", o.NewSAUpstreamsAnnotation, msg))
		}
	}
	for k, v := range o.NewSALabels {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("--newsa-labels key %q: %s", k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("--newsa-labels value %q: %s", v, msg))
		}
	}
	if o.ManagedLabel != "" {
		k, v, _ := strings.Cut(o.ManagedLabel, "=")
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("--managed-label key %q: %s", k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("--managed-label value %q: %s", v, msg))
		}
	}
	if o.SARule != SAOwn && o.SARule != SAAny {
		errs = append(errs, fmt.Errorf("--sa-rule must be %s or %s, got %q", SAOwn, SAAny, o.SARule))
	}
	if o.MinPreStopSleep < 0 || o.MinPreStopSleep%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--min-prestop-sleep must be whole seconds, 0 or more, got %v", o.MinPreStopSleep))
	}
	if o.Drain < 0 || o.Drain%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--drain must be whole seconds, 0 or more, got %v", o.Drain))
	}
	if err := CheckSampleAfter(o.SampleAfter); err != nil {
		errs = append(errs, err)
	}
	if o.SampleAge <= 0 {
		errs = append(errs, fmt.Errorf("--sample-age must be positive, got %v", o.SampleAge))
	}
	for _, ns := range o.MeshNamespaces {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, fmt.Errorf("--mesh-namespaces %q: %s", ns, msg))
		}
	}
	return errors.Join(errs...)
}

// usageText is printed by --help before the flags.
const usageText = `Usage: sortie-churn --schedule FILE --t0 RFC3339 [flags]
       sortie-churn --schedule FILE [--t0 RFC3339] --dry-run
       sortie-churn --schedule FILE --preflight

Runs a soak's churn schedule: at T0 + each step's minute (T0 is the load
start, --t0, plus --settle, 0 by default) it rolls workloads, shrinks a
deployment, starts a pod under a brand new ServiceAccount, or samples
memory. The first step that fails aborts the run: a schedule with
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
      nodes in name order, taken in turn by successive steps, starting at
      T0's minute (Unix time / 60) modulo their number, so successive soaks
      start on different nodes). The pod runs --newsa-image (the
      sortie-engine image) as "sortie-engine oneshot": from its first
      instant it sends --newsa-requests requests to each of --newsa-targets
      at --newsa-rate a second (User-Agent aether-soak-newsa/<name>), then
      prints its tally. The pod carries --newsa-labels (default
      aether.io/managed=true) and --newsa-annotations, and
      --newsa-upstreams-annotation (default config.aether.io/upstreams) set
      to the targets' names. The step waits until the pod is available
      (--rollout-timeout), reads the tally from the pod's log (within the
      client's bound plus --newsa-hold), deletes both objects, and prints a
      ROLLED line, or a FAILED line when a request was not a 2xx or a
      target got none: a finding, and the schedule goes on. A step that
      gets no tally (objects refused, pod never available, no tally line)
      aborts the run. It makes the node's proxy serve an identity it has
      never seen, under load.
  sample <kind>/<name> [-n ns]
      reads the resident memory (RSS) of every container of the workload's
      running pods from the kubelets' summaries (through the API server's
      node proxy: the account needs get on nodes/proxy), appends one row per
      container to --memory-tsv and prints a SAMPLED line. A sample that
      reads nothing is a FAILED line, and the schedule goes on.
      --sample-after takes the same sample --sample-age after every roll of
      the workloads it names, so each roll's new containers are compared at
      the same age.
  daemon-outage --daemonset <name> --victim <namespace>/<selector> [-n ns]
      a node daemon's outage: picks the first running pod (in name order)
      of the label selector in <namespace> (no spaces: app=uds-echo), rolls
      the DaemonSet <name> of ns, and, as soon as the daemon pod on the
      victim's node is down (the old pod terminating or gone, no
      replacement Ready; read every --outage-poll, for at most
      --outage-window), deletes the victim, then reads the daemon again.
      The window is down (deleted while the daemon was down, and still down
      after), late (the daemon was up again by then) or missed (never seen
      down; a NOTE line says why). It then waits (--rollout-timeout each)
      for the rollout, the victim to be gone and a new Ready pod of the
      selector (the replacement), and counts the namespace's FailedMount
      events during the step and in the --outage-settle after it. A report
      with a bad part (rollout, terminating, replacement, events, or a
      FailedMount after the step) is a FAILED line: a finding, and the
      schedule goes on. No victim, a refused roll or a refused delete aborts.
      The bash harness's uds-csi step is
        162 daemon-outage --daemonset aether-uds-csi --victim aether-test/app=uds-echo -n aether-system
  The steps of one minute run in file order, the rolls first and together.
  -n defaults to --namespace.

Lines (stdout; times are RFC 3339 UTC, durations whole seconds):
  CHURN START schedule=<file> steps=<n> rolls=<r> shrinks=<s> new_serviceaccounts=<k> t0=<t> at=<t>
  ROLLED <ns>/<kind>/<name> at=<t> took=<s>s
  ROLLED <ns>/newsa/<name> at=<t> took=<s>s node=<node> ready=<s>s tally=<dst>:ok=N,non2xx=N,connerr=N,codes=C[;<dst>:...]
  FAILED <ns>/newsa/<name> at=<t> took=<s>s node=<node> ready=<s>s tally=...: not every request was a 2xx (a finding: the schedule goes on)
      ok: 2xx answers; non2xx: other statuses; connerr: no status at all;
      codes: <code>x<count> joined by +, the err_ classes of sortie-engine
      oneshot --help among them, or - when all were 2xx
  FAILED <ns>/<kind>/<name> at=<t> took=<s>s: <why>
  ROLLED <ns>/daemonset/<name> at=<t> took=<s>s victim=<ns>/<pod>@<node> window=<down|late|missed> rollout=<s>s terminated=<s>s replacement=<pod> ready=<s>s failedmount_during=<n> failedmount_after=<n>
  FAILED <the same> bad=<rollout,terminating,replacement,events,failedmount>: the outage left ... (a finding: the schedule goes on)
      a daemon-outage step; "-" for what never came; terminated and ready
      count from the victim's deletion
  NOTE <ns>/daemonset/<name> window=<late|missed>: <why> -- the deletion during the outage was not exercised
  SHRUNK <ns>/deployment/<name> replicas=<n>->0 at=<t> restore_at=<t>
  RESTORED <ns>/deployment/<name> replicas=0-><n> at=<t>
  WARN <what was left behind or could not be undone>
  SAMPLED <ns>/<kind>/<name> at=<t> (<why>) containers=<n> rss_bytes=<sum>
  SAMPLE FAILED <ns>/<kind>/<name> at=<t> (<why>): <why>
  MEMORY <ns>/<kind>/<name> node=<node> container=<c> samples=<n> first=<bytes> at=<t> age=<s>s last=<bytes> at=<t> age=<s>s growth=<+bytes> (<+pct>%)
      one per container series (a workload's container on a node, which a
      roll's new pod continues), first sample against last, at the end
  CHURN COMPLETE steps=<n> rolled=<r> shrunk=<s> new_serviceaccounts=<k> findings=<f> t0=<t> at=<t>
      findings: steps that ran and printed a FAILED line without aborting
  CHURN ABORTED: <why> -- stop, fix, relaunch with a fresh T0
  CHURN STOPPED: <signal> at T0+<m>m<s>s after <k> of <n> steps[, during <step>] -- the schedule is incomplete; relaunch with a fresh T0
  CHURN STOPPED: <signal> during the preflight -- nothing was changed
With --dry-run (no API call unless --preflight is given too):
  PLAN T0+<m>m at=<t|-> roll <ns>/<kind>/<name>
  PLAN T0+<m>m at=<t|-> shrink <ns>/deployment/<name> for=<s>s restore_at=<t|->
  PLAN T0+<m>m at=<t|-> new-serviceaccount <ns> node=<node> hold=<s>s
  PLAN T0+<m>m at=<t|-> sample <ns>/<kind>/<name>
  PLAN T0+<m>m at=<t|-> daemon-outage <ns>/daemonset/<name> victim=<ns>/<selector>
  PLAN steps=<n> rolls=<r> shrinks=<s> new_serviceaccounts=<k> end=T0+<m>m<s>s dry-run: nothing was changed
Preflight (--preflight, and before every run):
  PREFLIGHT ok <ns>/<kind>/<name> <what was checked>
  PREFLIGHT FAIL <ns>/<kind>/<name>: <problem>       one line per problem
  PREFLIGHT PASS targets=<n>  |  PREFLIGHT FAILED problems=<n>
  It checks that every target exists; that the account may patch and get
  each rolled workload, get and update each shrunk deployment's scale, and
  create and delete a new-serviceaccount step's objects and read its pod's
  log (access reviews);
  that every rolled Deployment can roll without dropping traffic: replicas
  > 0, all available, not mid-rollout, strategy RollingUpdate with
  maxUnavailable 0, minReadySeconds >= 10, and a preStop hook and a
  readiness probe on every container; that DaemonSets and StatefulSets roll
  with RollingUpdate and are fully available; and that a new-serviceaccount
  node exists and is Ready. A rolled Deployment of a mesh namespace
  (--mesh-namespaces, default --namespace) is a workload under load and is
  held to the mesh's bar as well: its pods carry --managed-label, run under
  the ServiceAccount of the Deployment's own name (--sa-rule own), every
  container's preStop sleeps at least --min-prestop-sleep (the time the
  endpoint's removal takes to reach every proxy), and the termination grace
  period holds that sleep plus --drain. Each problem line ends with
  "-- fix: <what to change>".

Exit: 0 the schedule completed, 1 a step failed (CHURN ABORTED), 2 unusable
flags or schedule, a failed preflight, or a T0 already too far behind,
143 SIGTERM, 130 SIGINT.

Duration flags take seconds as a bare integer (--newsa-hold 90), as the bash
harness's did, or a duration (1m30s).

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
	cli.DurationVar(fs, &o.Settle, "settle", o.Settle, "the schedule's T0 is this long after --t0 (`seconds`; 240 replays a bash harness schedule, whose T0 was its churn's start 240 s into the load)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the steps and their times, change nothing")
	fs.BoolVar(&o.Preflight, "preflight", false, "check the cluster for the schedule, then exit (with --dry-run: check, then print the plan)")
	cli.DurationVar(fs, &o.RolloutTimeout, "rollout-timeout", o.RolloutTimeout, "bound of the wait for one rollout (and a new-serviceaccount pod) to complete")
	cli.DurationVar(fs, &o.Poll, "poll", o.Poll, "time between two reads of a rollout's status")
	cli.DurationVar(fs, &o.MaxLate, "max-late", o.MaxLate, "refuse to start when a step is already this far past its time")
	cli.DurationVar(fs, &o.RequestTimeout, "request-timeout", o.RequestTimeout, "bound of one API call")
	fs.StringVar(&o.NewSAImage, "newsa-image", o.NewSAImage, "the sortie-engine image `ref` a new-serviceaccount step's pod runs (sortie-engine oneshot); required with such a step")
	newsaTargets := fs.String("newsa-targets", "", "`name=url,...` the new-serviceaccount client sends to (required with such a step)")
	fs.IntVar(&o.NewSARequests, "newsa-requests", o.NewSARequests, "requests the client sends to each target")
	fs.IntVar(&o.NewSARate, "newsa-rate", o.NewSARate, "requests a second the client sends to each target")
	cli.DurationVar(fs, &o.NewSATimeout, "newsa-timeout", o.NewSATimeout, "bound of one client request (`seconds` or a duration)")
	cli.DurationVar(fs, &o.NewSAHold, "newsa-hold", o.NewSAHold, "how long past the client's own bound (requests/rate + timeout) the step waits for its tally")
	labels := fs.String("newsa-labels", "aether.io/managed=true", "pod `labels` k=v,k=v of that pod (the mesh's management label; empty: none)")
	annotations := fs.String("newsa-annotations", "", "more pod `annotations` k=v,k=v of that pod")
	fs.StringVar(&o.NewSAUpstreamsAnnotation, "newsa-upstreams-annotation", o.NewSAUpstreamsAnnotation, "pod annotation `key` set to the targets' names, comma-separated (the upstreams the mesh must give the pod; empty: none)")
	meshNS := fs.String("mesh-namespaces", "", "`namespaces` (comma-separated) whose rolled Deployments are mesh workloads under load (default: --namespace)")
	fs.StringVar(&o.ManagedLabel, "managed-label", o.ManagedLabel, "`key=value` label a mesh workload's pods must carry (empty: not checked)")
	fs.StringVar(&o.SARule, "sa-rule", o.SARule, "own: a mesh workload must run under the ServiceAccount of its own name; any: not checked")
	cli.DurationVar(fs, &o.MinPreStopSleep, "min-prestop-sleep", o.MinPreStopSleep, "least preStop sleep of a mesh workload's containers (`seconds`; 0: not checked)")
	cli.DurationVar(fs, &o.Drain, "drain", o.Drain, "what the termination grace period must hold beyond the preStop sleep (`seconds`)")
	cli.DurationVar(fs, &o.OutageWindow, "outage-window", o.OutageWindow, "how long a daemon-outage step waits for the victim node's daemon to be down (`seconds` or a duration)")
	cli.DurationVar(fs, &o.OutagePoll, "outage-poll", o.OutagePoll, "time between two reads of that daemon's pods")
	cli.DurationVar(fs, &o.OutageSettle, "outage-settle", o.OutageSettle, "how long after a daemon-outage step FailedMount events still count against it")
	sampleAfter := fs.String("sample-after", "", "`workloads` ns/kind/name,... whose containers' memory is sampled --sample-age after each of their rolls")
	cli.DurationVar(fs, &o.SampleAge, "sample-age", o.SampleAge, "how long after a roll completes its memory sample is taken (`seconds` or a duration)")
	fs.StringVar(&o.MemoryTSV, "memory-tsv", "", "append the memory samples to this `file` (time, pod, container, rss_bytes, age_s)")
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
	if !o.T0.IsZero() {
		o.T0 = o.T0.Add(o.Settle)
	}
	if *sampleAfter != "" {
		for _, r := range strings.Split(*sampleAfter, ",") {
			o.SampleAfter = append(o.SampleAfter, strings.TrimSpace(r))
		}
	}
	if *meshNS != "" {
		for _, ns := range strings.Split(*meshNS, ",") {
			o.MeshNamespaces = append(o.MeshNamespaces, strings.TrimSpace(ns))
		}
	}

	if o.NewSALabels, err = keyValues("--newsa-labels", *labels); err != nil {
		errs = append(errs, err)
	}
	if o.NewSAAnnotations, err = keyValues("--newsa-annotations", *annotations); err != nil {
		errs = append(errs, err)
	}
	if *newsaTargets != "" {
		for _, nu := range strings.Split(*newsaTargets, ",") {
			n, u, ok := strings.Cut(strings.TrimSpace(nu), "=")
			if !ok {
				errs = append(errs, fmt.Errorf("--newsa-targets: %q is not name=url", nu))
				continue
			}
			o.NewSATargets = append(o.NewSATargets, oneshot.Target{Name: n, URL: u})
		}
	}
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	return o, false, errors.Join(errs...)
}

// keyValues reads k=v,k=v; empty is none.
func keyValues(flagName, s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	var errs []error
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %q is not k=v", flagName, kv))
			continue
		}
		out[k] = v
	}
	return out, errors.Join(errs...)
}
