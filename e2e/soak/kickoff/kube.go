package kickoff

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/churn"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/render"
)

// Profiles `soak run` takes: the render profiles of a cluster run.
const (
	ProfileE2E  = "e2e"
	ProfileSoak = "soak"
)

// RunOptions configure `soak run e2e|soak`. Flags fill them from
// DefaultRunOptions; Validate lists every problem.
type RunOptions struct {
	// Profile is e2e (15 minutes of load) or soak (8h30m, with the churn
	// schedule).
	Profile string
	// Kubeconfig is the kubeconfig file (empty: the default loading rules).
	Kubeconfig string
	// Context is the kubeconfig context. Required: a run never goes to
	// whatever the current context happens to be.
	Context string
	// Namespace holds the release, the report PVC and the run's Job.
	Namespace string
	// Release is the Helm release name; the engines' Service is
	// <Release>-sortie-engine-nodes.
	Release string
	// TargetsFile is the `name url weight` targets file. Each URL's host
	// names a Service as <name>.<namespace>[.<domain>].
	TargetsFile string
	// Rate is requests per second per node over all targets.
	Rate int
	// Duration overrides the profile's load duration (whole seconds).
	Duration time.Duration
	// ValuesFile holds Helm values layered over the chart's defaults; the
	// kickoff's own values (job, plan, report, priority class) go on top.
	ValuesFile string
	// Statsd is auto (the cluster IP and UDP port of StatsdService), off,
	// or an IP:PORT.
	Statsd        string
	StatsdService string
	// StorageClass of the report PVC; empty: the only default class, else
	// the only class.
	StorageClass string
	// Verify requires a cosign signature on every image: with Key (a cosign
	// public key) or keyless with Identity and Issuer, checked against the
	// Sigstore TrustedRoot file (nothing is fetched).
	Verify                        bool
	Key                           string
	Identity, Issuer, TrustedRoot string
	// ChartDigest is the content digest the chart built into this binary
	// must have (provenance.ChartDirDigest of charts/sortie); empty takes
	// the binary's own, and the run directory records it.
	ChartDigest string
	// Rolls is the churn schedule file (required for soak, optional for e2e).
	Rolls string
	// SampleAfter are the workloads (ns/kind/name) whose containers' memory
	// the churn samples SampleAge after each of their rolls (its
	// --sample-after and --sample-age); SampleAge 0 keeps the churn's.
	SampleAfter []string
	SampleAge   time.Duration
	// Dir is the run directory; it must not exist or be empty.
	Dir string
	// Preflight runs the pre-flight only: it changes nothing, in the
	// cluster or on disk.
	Preflight bool
	// Settle is the wait between the engines being listed and the plan
	// being rendered, so the mesh takes the new pods in before the first
	// request.
	Settle time.Duration
	// PriorityClass names the class of the engines and the driver pod;
	// PriorityValue is its value. It preempts nothing.
	PriorityClass string
	PriorityValue int32
	// SystemNamespaces must have every pod ready before the run.
	SystemNamespaces []string
	// WatchNamespaces are watched for restarts besides the release's and the
	// targets' namespaces; WatchInterval is the watchdog's sample interval.
	WatchNamespaces []string
	WatchInterval   time.Duration
	// ReaderImage runs the saver's reader pod; it must hold ReaderCommand.
	// Empty runs the driver's own image with DriverCat (the sortie images
	// hold no shell tools). It runs in the cluster, so it is checked with
	// the release's images.
	ReaderImage string
	// ReaderCommand prints the file given as its last argument; empty is
	// "cat" with a ReaderImage of one's own, DriverCat without.
	ReaderCommand string
	// PVCTimeout bounds the wait for the report PVC to be Bound (not
	// waited for when its class binds on first consumer); EnginesTimeout
	// the wait for the engines and their Service; PodTimeout the wait for
	// the driver pod to run; Poll is the interval of the three waits.
	PVCTimeout     time.Duration
	EnginesTimeout time.Duration
	PodTimeout     time.Duration
	Poll           time.Duration
}

// DriverCat is the reader pod's command when it runs the driver image: the
// image's own binary printing the file.
const DriverCat = "/usr/local/bin/sortie cat"

// reader returns the reader pod's image and command for a release whose
// driver runs driverImage.
func (o RunOptions) reader(driverImage string) (image, command string) {
	if o.ReaderImage == "" {
		return driverImage, DriverCat
	}
	if strings.TrimSpace(o.ReaderCommand) == "" {
		return o.ReaderImage, "cat"
	}
	return o.ReaderImage, o.ReaderCommand
}

// DefaultRunOptions returns the defaults the flags start from.
func DefaultRunOptions() RunOptions {
	return RunOptions{
		Namespace:        "sortie",
		Release:          "soak",
		Rate:             60,
		Statsd:           "auto",
		StatsdService:    "o11y/otel-scraper",
		Settle:           30 * time.Second,
		PriorityClass:    "sortie-soak",
		PriorityValue:    1000,
		SystemNamespaces: []string{"kube-system"},
		WatchInterval:    2 * time.Minute,
		PVCTimeout:       2 * time.Minute,
		EnginesTimeout:   5 * time.Minute,
		PodTimeout:       3 * time.Minute,
		Poll:             2 * time.Second,
	}
}

// Validate returns every problem of o at once.
func (o RunOptions) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.Profile != ProfileE2E && o.Profile != ProfileSoak {
		bad("profile %q: want e2e or soak", o.Profile)
	}
	if o.Context == "" {
		bad("--context is required: a run never goes to the kubeconfig's current context by default")
	}
	for _, msg := range validation.IsDNS1123Label(o.Namespace) {
		bad("--namespace %q: %s", o.Namespace, msg)
	}
	for _, msg := range validation.IsDNS1123Label(o.Release) {
		bad("--release %q: %s", o.Release, msg)
	}
	if len(o.Release) > chart.MaxReleaseNameLen {
		bad("--release %q: at most %d characters", o.Release, chart.MaxReleaseNameLen)
	}
	if o.TargetsFile == "" {
		bad("--targets is required")
	}
	if o.Rate <= 0 || o.Rate > render.MaxRate {
		bad("--rate %d: want 1..%d requests per second per node", o.Rate, render.MaxRate)
	}
	if o.Duration < 0 || o.Duration%time.Second != 0 {
		bad("--duration %s: want whole seconds", o.Duration)
	}
	switch o.Statsd {
	case "auto":
		if ns, name, ok := strings.Cut(o.StatsdService, "/"); !ok || ns == "" || name == "" {
			bad("--statsd-service %q: want NAMESPACE/NAME", o.StatsdService)
		}
	case "off":
	default:
		if err := checkHostPort(o.Statsd); err != nil {
			bad("--statsd %q: want auto, off or IP:PORT (%v)", o.Statsd, err)
		}
	}
	if o.StorageClass != "" {
		for _, msg := range validation.IsDNS1123Subdomain(o.StorageClass) {
			bad("--storage-class %q: %s", o.StorageClass, msg)
		}
	}
	switch keyless := o.Identity != "" || o.Issuer != "" || o.TrustedRoot != ""; {
	case !o.Verify && (o.Key != "" || keyless):
		bad("--key, --identity, --issuer and --trusted-root need --verify")
	case o.Verify && o.Key != "" && keyless:
		bad("--verify takes --key or --identity with --issuer, not both")
	case o.Verify && o.Key == "" && (o.Identity == "" || o.Issuer == "" || o.TrustedRoot == ""):
		bad("--verify needs --key FILE, or --identity, --issuer and --trusted-root FILE (keyless)")
	}
	if o.ChartDigest != "" && !isDigest(o.ChartDigest) {
		bad("--chart-digest %q: want sha256: and 64 lower-case hex digits", o.ChartDigest)
	}
	if o.Profile == ProfileSoak && o.Rolls == "" {
		bad("soak needs --rolls FILE, the churn schedule (e.g. churn/schedules/soak.txt)")
	}
	if o.Settle < 0 {
		bad("--settle must not be negative, got %s", o.Settle)
	}
	if err := churn.CheckSampleAfter(o.SampleAfter); err != nil {
		errs = append(errs, err)
	}
	if len(o.SampleAfter) > 0 && o.Rolls == "" {
		bad("--sample-after needs --rolls: the churn driver takes the samples")
	}
	if o.SampleAge < 0 {
		bad("--sample-age must not be negative, got %s", o.SampleAge)
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.PriorityClass) {
		bad("--priority-class %q: %s", o.PriorityClass, msg)
	}
	// Values above a billion are reserved for the system's own classes.
	if o.PriorityValue < 0 || o.PriorityValue > 1_000_000_000 {
		bad("--priority-value %d: want 0..1000000000", o.PriorityValue)
	}
	for _, n := range append(append([]string{}, o.SystemNamespaces...), o.WatchNamespaces...) {
		for _, msg := range validation.IsDNS1123Label(n) {
			bad("namespace %q: %s", n, msg)
		}
	}
	if o.ReaderImage == "" && strings.TrimSpace(o.ReaderCommand) != "" {
		bad("--reader-command needs --reader-image: without one the reader pod runs the driver image with %q", DriverCat)
	}
	for name, d := range map[string]time.Duration{
		"--watch-interval": o.WatchInterval, "--pvc-timeout": o.PVCTimeout, "--engines-timeout": o.EnginesTimeout,
		"--pod-timeout": o.PodTimeout, "--poll": o.Poll,
	} {
		if d <= 0 {
			bad("%s must be positive, got %s", name, d)
		}
	}
	return errors.Join(errs...)
}

// isDigest reports whether d is sha256:<64 lower-case hex>.
func isDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	return strings.Trim(hex, "0123456789abcdef") == ""
}

// checkHostPort accepts IP:PORT with a numeric IP and a port in 1..65535.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if net.ParseIP(host) == nil {
		return fmt.Errorf("%q is not an IP address", host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q", port)
	}
	return nil
}

// PlannedDuration is the load duration of the run: --duration, else the
// profile's.
func (o RunOptions) PlannedDuration() time.Duration {
	if o.Duration > 0 {
		return o.Duration
	}
	return render.Profiles[o.Profile]
}

// commaList is a flag holding a comma-separated list.
type commaList []string

func (c *commaList) String() string { return strings.Join(*c, ",") }

func (c *commaList) Set(s string) error {
	*c = nil
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*c = append(*c, f)
		}
	}
	return nil
}

const runUsage = `Usage: soak run e2e|soak --context NAME --targets FILE [flags]

Launches a sortie run on a Kubernetes cluster and stays with it to the end.
Steps, in this order, each printed as one STEP line:
  1. refuse a run directory (--dir) that exists and is not empty
  2. pre-flight, every check run, nothing changed: the API server answers;
     the chart renders with these values; every image the release would
     run (and the reader image) is a digest reference, signed with --verify
     (else "provenance NOT VERIFIED"); the chart built into this binary,
     written to DIR/chart/sortie, has its content digest (--chart-digest);
     the PriorityClass is absent or the soak's own; the report PVC exists
     and is Bound, or Pending with a storage class that exists, or is
     absent and a storage class can be chosen for it; every pod of the system
     namespaces is ready (ready/total containers compared as numbers);
     every target's Service exists; the release has no earlier Job and no
     release of that name exists; the watchdog's pre-flight and (with
     --rolls) the churn driver's pass
  3. apply the PriorityClass (preemptionPolicy Never) and read it back
  4. the report PVC <release>-sortie-report: kept if it exists, else made
     with --storage-class, else the only default class, else the only class;
     then wait (--pvc-timeout) until it is Bound, or, when its class binds on
     first consumer (volumeBindingMode WaitForFirstConsumer), check the class
     exists and go on: a claim that does not bind aborts here, naming its
     phase, its class and its last event, before anything is installed
  5. resolve --statsd; make the run's CA and store it with the engine and
     driver certificates in the Secret <release>-sortie-tls (replacing an
     earlier run's; tls.enabled: false in --values skips it: plaintext);
     install the release with the engines alone (job.enabled=false), their
     engine.allowTargets the targets' hosts and the statsd address unless
     --values sets it
  6. wait (--engines-timeout) for the engines (DaemonSet desired == ready,
     updated) and until the headless Service's EndpointSlices list every one
  7. write engines.tsv (pod IP, node, pod), wait --settle
  8. render the plan for exactly those engines (dns pool: the headless
     Service, port 8443) and write plan.yaml, shares.tsv and run.env
  9. re-check the PriorityClass, then upgrade the release with the plan
     (job.enabled=true): the driver Job starts
 10. arm the saver (in this process), then look at the driver pod: not
     Running within --pod-timeout, or already ended, aborts, quoting the
     saver's line once it has saved what the Job left
 11. T0: start the restart watchdog (for the planned duration) and, with
     --rolls, the churn driver at T0 (its memory samples: --sample-after,
     --sample-age; its new-serviceaccount steps run the release's engine
     image as "sortie-engine oneshot" against the --targets)
 12. wait for the saver's verdict (the Job's end), the watchdog's SUMMARY
     and the churn's end; then grade the saved run with the gate, a
     roll's window settling 20 s past its end (the churn's least preStop
     sleep, 10 s, before an old pod's SIGTERM, and the gate's 10 s)
The kickoff holds the saver, the watchdog and the churn driver: they run in
this process and it exits only when all three have ended. Stopped early
(Ctrl-C, SIGTERM), the watchdog prints its summary, the churn restores what
it shrank, and the Job goes on: save it with sortie-save --dir DIR.

Lines (stdout):
  PREFLIGHT ok <what> | PREFLIGHT FAIL <what>: <why> | PREFLIGHT note <what>
  STEP <what>
  NOTE <what> | WARNING <what>
  ABORT <why> (started: <what>; not started: <what>)
  HINT <the teardown command for what an ABORT left in the cluster>
  INTERRUPTED <signal>: <what goes on and how to save it>
  then the saver's SORTIE_*, the watchdog's lines, the churn's lines and
  the gate's lines, and last:
  SOAK PASS|FAIL gate=<code> watchdog=<verdict> churn=<outcome> saver=<state> dir=<dir>
  churn is none (no --rolls), complete, findings (every step ran and some
  printed a FAILED line that is a finding, such as a new-serviceaccount
  tally with a non-2xx: the run fails), aborted, stopped or not-started.
The run directory holds kickoff.log (the lines above with times), values.yaml,
engines.tsv, plan.yaml, shares.tsv, run.env, save.log, restart-watch.log,
churn.log, memory.tsv (the churn's memory samples, empty when the schedule
takes none), and what the saver copies (report.json, results.jsonl, ...).

With --preflight only step 2 runs (the chart is hashed in a temporary
directory), and nothing is written.

Exit: 0 the gate, the watchdog and the churn passed (with --preflight: the
pre-flight passed); 1 an ABORT or a failed verdict; 2 unusable flags or
input; 3 the gate had nothing to grade; 130/143 interrupted.

Flags:
`

// parseRunFlags fills RunOptions from args (after the profile) and
// validates them. help reports --help.
func parseRunFlags(args []string, stderr io.Writer) (o RunOptions, help bool, err error) {
	o = DefaultRunOptions()
	fs := flag.NewFlagSet("soak run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, runUsage); fs.PrintDefaults() }
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig `file` (default: $KUBECONFIG, ~/.kube/config)")
	fs.StringVar(&o.Context, "context", o.Context, "kubeconfig `context` (required)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the release, the report PVC and the Job")
	fs.StringVar(&o.Release, "release", o.Release, "Helm release `name`")
	fs.StringVar(&o.TargetsFile, "targets", o.TargetsFile, "targets `FILE` (name url weight per line; required)")
	fs.IntVar(&o.Rate, "rate", o.Rate, "requests per second per node, over all targets")
	cli.DurationVar(fs, &o.Duration, "duration", o.Duration, "load duration (default: the profile's, e2e 900s, soak 8h30m)")
	fs.StringVar(&o.ValuesFile, "values", o.ValuesFile, "Helm values `FILE` over the chart's defaults")
	fs.StringVar(&o.Statsd, "statsd", o.Statsd, "live metrics: auto (the --statsd-service's cluster IP and UDP port), off, or IP:PORT")
	fs.StringVar(&o.StatsdService, "statsd-service", o.StatsdService, "`NAMESPACE/NAME` of the statsd Service for --statsd auto")
	fs.StringVar(&o.StorageClass, "storage-class", o.StorageClass, "storage class of the report PVC (default: the only default class, else the only class)")
	fs.BoolVar(&o.Verify, "verify", o.Verify, "require a valid cosign signature on the chart and every image")
	fs.StringVar(&o.Key, "key", o.Key, "cosign public key `file` for --verify")
	fs.StringVar(&o.Identity, "identity", o.Identity, "keyless --verify: the signer's certificate identity")
	fs.StringVar(&o.Issuer, "issuer", o.Issuer, "keyless --verify: the signer's OIDC issuer")
	fs.StringVar(&o.TrustedRoot, "trusted-root", o.TrustedRoot, "keyless --verify: Sigstore trusted root `file` (trusted_root.json)")
	fs.StringVar(&o.ChartDigest, "chart-digest", o.ChartDigest, "content `digest` the built-in chart must have (sha256:...; default: the binary's own, recorded)")
	fs.StringVar(&o.Rolls, "rolls", o.Rolls, "churn schedule `FILE` (required for soak)")
	fs.Var((*commaList)(&o.SampleAfter), "sample-after", "comma-separated `workloads` ns/kind/name whose containers' memory the churn samples --sample-age after each of their rolls (memory.tsv)")
	cli.DurationVar(fs, &o.SampleAge, "sample-age", o.SampleAge, "how long after a roll its memory sample is taken (default: the churn's, 10m)")
	fs.BoolVar(&o.Preflight, "preflight", o.Preflight, "run the pre-flight only, change nothing, exit 0 if it passed")
	fs.StringVar(&o.Dir, "dir", o.Dir, "run `DIR` (default soak-runs/<profile>-<UTC time>); must not exist or be empty")
	cli.DurationVar(fs, &o.Settle, "settle", o.Settle, "wait after the engines are listed, before the plan is rendered")
	fs.StringVar(&o.PriorityClass, "priority-class", o.PriorityClass, "PriorityClass of the engines and the driver pod")
	fs.Func("priority-value", fmt.Sprintf("value of that PriorityClass (default %d)", o.PriorityValue), func(s string) error {
		v, err := strconv.ParseInt(s, 10, 32)
		o.PriorityValue = int32(v)
		return err
	})
	fs.Var((*commaList)(&o.SystemNamespaces), "system-namespaces", "comma-separated namespaces whose pods must all be ready (default kube-system)")
	fs.Var((*commaList)(&o.WatchNamespaces), "watch-namespaces", "more comma-separated namespaces for the restart watchdog")
	cli.DurationVar(fs, &o.WatchInterval, "watch-interval", o.WatchInterval, "restart watchdog sample interval")
	fs.StringVar(&o.ReaderImage, "reader-image", o.ReaderImage, "image `REF` of the saver's reader pod, holding --reader-command (default: the driver image, running \"sortie cat\")")
	fs.StringVar(&o.ReaderCommand, "reader-command", o.ReaderCommand, "command that prints the file given as its last argument (default cat, with --reader-image)")
	cli.DurationVar(fs, &o.PVCTimeout, "pvc-timeout", o.PVCTimeout, "bound of the wait for the report PVC to be Bound")
	cli.DurationVar(fs, &o.EnginesTimeout, "engines-timeout", o.EnginesTimeout, "bound of the wait for the engines and their Service")
	cli.DurationVar(fs, &o.PodTimeout, "pod-timeout", o.PodTimeout, "bound of the wait for the driver pod to run")
	cli.DurationVar(fs, &o.Poll, "poll", o.Poll, "interval of those waits")
	// The profile comes first: soak run e2e --context ...
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fs.Usage()
			return o, true, nil
		}
		return o, false, errors.New("soak run needs a profile: e2e or soak")
	}
	o.Profile, args = args[0], args[1:]
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, true, nil
		}
		return o, false, err
	}
	if fs.NArg() > 0 {
		return o, false, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return o, false, o.Validate()
}
