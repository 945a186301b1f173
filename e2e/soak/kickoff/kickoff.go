package kickoff

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/churn"
	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/engine/oneshot"
	"github.com/sortie-soak/sortie/gate"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/internal/helmvalues"
	"github.com/sortie-soak/sortie/record"
	"github.com/sortie-soak/sortie/render"
	"github.com/sortie-soak/sortie/saver"
	"github.com/sortie-soak/sortie/watchdog"
)

// Components of a run, each with its own API client (and user agent).
const (
	compKickoff  = "kickoff"
	compSaver    = "saver"
	compWatchdog = "watchdog"
	compChurn    = "churn"
)

// Files the kickoff writes into the run directory, besides run.env
// (cluster.RunEnvFile), the ones the gate's --dir reads (gate.DirShares,
// gate.DirEngines) and the saver's. plan.yaml is named as soak local names
// it.
const (
	planFile         = "plan.yaml"
	htmlReport       = "report.html" // the gate's HTML report, named as soak local names it
	kickoffLog       = "kickoff.log"
	valuesFile       = "values.yaml"
	saveLog          = "save.log"
	restartWatchLog  = "restart-watch.log"
	churnLog         = "churn.log"
	memoryTSV        = "memory.tsv"
	reportClaimSize  = "1Gi"
	priorityClassFor = "sortie soak: the engines and the driver outrank priority-0 workloads as preemption victims, and preempt nothing"
)

// kickoff is one `soak run`.
type kickoff struct {
	o      RunOptions
	env    cluster.Env
	stdout io.Writer // shared by every component, one whole line per write
	stderr io.Writer
	log    *slog.Logger
	clk    clock.Clock
	cclk   clock.Clock // the components'
	cs     kubernetes.Interface
	helm   cluster.Helm

	names chart.Names
	// statsdAddr is --statsd resolved (empty: no live metrics).
	statsdAddr string
	tag        string
	dir        string
	logFile    *os.File
	files      []*os.File // the components' logs, closed when the kickoff returns
	targets    []render.Target
	base       map[string]any
	schedule   *churn.Schedule
	churnNS    string
	watchNS    []string

	pvc, reportName, streamName, liveName string
	driverImage                           string
	engineImage                           string
	engineKind                            string
	engines                               []engineRow
	backends                              int

	// stages are what the run starts in the cluster and beside it, in
	// order; started is how many of them have started.
	stages  []string
	started int
}

// engineRow is one line of engines.tsv.
type engineRow struct{ ip, node, pod string }

// Run is `soak run`: args are what follows "run" on the command line.
func Run(ctx context.Context, env cluster.Env, args []string, stdout, stderr io.Writer) error {
	o, help, err := parseRunFlags(args, stderr)
	if help {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	k := &kickoff{
		o:      o,
		env:    env,
		stdout: &lockedWriter{w: stdout},
		stderr: stderr,
		log:    slog.New(slog.NewTextHandler(stderr, nil)).With("component", "soak-run"),
		clk:    env.Clock,
		cclk:   env.ComponentClock,
		names:  chart.NamesFor(o.Release),
	}
	if k.cclk == nil {
		k.cclk = k.clk
	}
	if err := k.readInputs(); err != nil {
		return cli.Usage(err)
	}
	// Every component has ended by the time run returns: it waits for
	// each one it started, also on an abort.
	defer func() {
		for _, f := range k.files {
			f.Close()
		}
		if k.logFile != nil {
			k.logFile.Close()
		}
	}()
	return k.run(ctx)
}

// readInputs reads and checks the files the run is made of, before
// anything is asked of the cluster: bad input is exit 2, not an ABORT.
func (k *kickoff) readInputs() error {
	var errs []error
	targets, err := render.ReadTargets(k.o.TargetsFile)
	if err != nil {
		errs = append(errs, err)
	} else if _, err := render.ComputeShares(targets, k.o.Rate, render.DefaultOptions().Concurrency); err != nil {
		errs = append(errs, fmt.Errorf("--rate %d over %s: %w", k.o.Rate, k.o.TargetsFile, err))
	}
	k.targets = targets
	k.base = map[string]any{}
	if k.o.ValuesFile != "" {
		data, err := os.ReadFile(k.o.ValuesFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("read --values: %w", err))
		} else if v, err := chartutil.ReadValues(data); err != nil {
			errs = append(errs, fmt.Errorf("--values %s: %w", k.o.ValuesFile, err))
		} else {
			k.base = v
		}
	}
	k.engineKind = "DaemonSet"
	if kind, ok := helmvalues.Lookup(k.base, "engine.kind").(string); ok && kind != "" {
		k.engineKind = kind
	}
	if k.engineKind != "DaemonSet" && k.engineKind != "Deployment" {
		errs = append(errs, fmt.Errorf("--values: engine.kind %q: want DaemonSet or Deployment", k.engineKind))
	}

	// The targets' namespaces are watched for restarts, and a schedule step
	// without -n rolls in the targets' namespace when they share one.
	seen := map[string]bool{k.o.Namespace: true}
	k.watchNS = []string{k.o.Namespace}
	var targetNS []string
	for _, t := range targets {
		if ref, err := serviceFromURL(t.URL, k.o.Namespace); err == nil && !seen[ref.ns] {
			seen[ref.ns] = true
			targetNS = append(targetNS, ref.ns)
		}
	}
	k.watchNS = append(k.watchNS, targetNS...)
	for _, ns := range k.o.WatchNamespaces {
		if !seen[ns] {
			seen[ns] = true
			k.watchNS = append(k.watchNS, ns)
		}
	}
	k.churnNS = k.o.Namespace
	if len(targetNS) == 1 {
		k.churnNS = targetNS[0]
	}
	if k.o.Rolls != "" {
		f, err := os.Open(k.o.Rolls)
		if err != nil {
			errs = append(errs, fmt.Errorf("read --rolls: %w", err))
		} else {
			k.schedule, err = churn.ParseSchedule(filepath.Base(k.o.Rolls), f, k.churnNS)
			f.Close()
			if err != nil {
				errs = append(errs, fmt.Errorf("--rolls: %w", err))
			}
		}
	}

	now := k.clk.Now().UTC()
	k.tag = k.o.Profile + "-" + now.Format("20060102T150405Z")
	k.dir = k.o.Dir
	if k.dir == "" {
		k.dir = filepath.Join("soak-runs", k.tag)
	}
	k.pvc = k.names.ReportClaim
	// The files on the PVC are this run's alone, by name: the stream is
	// appended to and never truncated, and a kept PVC may hold earlier runs.
	k.reportName = k.tag + ".json"
	k.streamName = k.tag + ".jsonl"
	k.liveName = k.tag + ".live.jsonl"
	k.stages = []string{
		"priorityclass/" + k.o.PriorityClass,
		"pvc/" + k.pvc,
		"release " + k.o.Release + " (engines)",
		"job/" + k.names.Job + " (driver)",
		"saver",
		"watchdog",
	}
	if k.schedule != nil {
		k.stages = append(k.stages, "churn")
	}
	return errors.Join(errs...)
}

// run is the kickoff proper, in the order of runUsage.
func (k *kickoff) run(ctx context.Context) error {
	if k.o.Preflight {
		tmp, err := os.MkdirTemp("", "soak-preflight-")
		if err != nil {
			return k.abort(ctx, "%v", err)
		}
		defer os.RemoveAll(tmp)
		k.dir = tmp
		k.step("preflight only: context=%s namespace=%s release=%s; nothing is changed", k.o.Context, k.o.Namespace, k.o.Release)
	} else {
		if err := k.claimDir(); err != nil {
			return k.abort(ctx, "%v", err)
		}
		k.step("run %s dir=%s context=%s namespace=%s release=%s", k.tag, k.dir, k.o.Context, k.o.Namespace, k.o.Release)
	}

	var err error
	if k.cs, err = k.env.NewClient(k.o.Kubeconfig, k.o.Context, compKickoff); err != nil {
		return k.abort(ctx, "kubeconfig: %v", err)
	}
	if k.helm, err = k.env.NewHelm(k.o.Kubeconfig, k.o.Context); err != nil {
		return k.abort(ctx, "helm: %v", err)
	}

	if problems := k.preflight(ctx); problems > 0 {
		return k.abort(ctx, "pre-flight failed (%d problems)", problems)
	}
	k.step("preflight ok")
	if k.o.Preflight {
		return nil
	}

	if err := k.applyPriorityClass(ctx, false); err != nil {
		return k.abort(ctx, "%v", err)
	}
	k.started++

	if err := k.reportPVC(ctx); err != nil {
		return k.abort(ctx, "%v", err)
	}
	k.started++
	if err := k.waitReportClaim(ctx); err != nil {
		return k.abort(ctx, "%v", err)
	}

	if err := k.beforeEngines(ctx); err != nil {
		return k.abort(ctx, "%v", err)
	}
	values := k.values(false, "")
	if err := k.writeValues(values); err != nil {
		return k.abort(ctx, "%v", err)
	}
	// Engines first and alone: the plan's dns pool is resolved once, when
	// the driver starts, so every engine must be listed before that.
	if err := k.helm.Install(ctx, k.o.Release, k.o.Namespace, values); err != nil {
		return k.abort(ctx, "install the engines: %v", err)
	}
	k.started++
	k.step("engines installed: release %s (job.enabled=false)", k.o.Release)

	if err := k.waitEngines(ctx); err != nil {
		return k.abort(ctx, "%v", err)
	}
	if err := k.writeEngines(); err != nil {
		return k.abort(ctx, "%v", err)
	}
	if k.o.Settle > 0 {
		k.step("settle %s: the mesh takes the engine pods in before the first request", k.o.Settle)
		if err := k.clk.Sleep(ctx, k.o.Settle); err != nil {
			return k.abort(ctx, "interrupted while settling")
		}
	}

	plan, err := k.renderPlan(ctx)
	if err != nil {
		return k.abort(ctx, "%v", err)
	}
	if err := k.writeRunEnv(); err != nil {
		return k.abort(ctx, "%v", err)
	}
	k.step("run.env written: job/%s report=%s stream=%s on pvc/%s", k.names.Job, k.reportName, k.streamName, k.pvc)

	// Again, and read back: a class deleted since (by whoever owns a copy
	// of it) would get the driver pod refused at admission.
	if err := k.applyPriorityClass(ctx, true); err != nil {
		return k.abort(ctx, "%v", err)
	}
	if err := k.helm.Upgrade(ctx, k.o.Release, k.o.Namespace, k.values(true, plan)); err != nil {
		return k.abort(ctx, "upgrade the release with the plan: %v", err)
	}
	k.started++
	k.step("driver started: release %s upgraded (job.enabled=true, plan configmap/%s)", k.o.Release, chart.PlanConfigMapName(k.o.Release, plan))

	return k.launch(ctx)
}

// claimDir refuses a run directory that holds anything, and creates it.
func (k *kickoff) claimDir() error {
	entries, err := os.ReadDir(k.dir)
	switch {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("run directory %s already holds a run (%d entries): a run directory is never reused; pass a fresh --dir", k.dir, len(entries))
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("run directory: %w", err)
	}
	if err := os.MkdirAll(k.dir, 0o755); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(k.dir, kickoffLog), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	k.logFile = f
	return nil
}

// line prints one line of the kickoff's own on stdout, and with the time in
// kickoff.log.
func (k *kickoff) line(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Fprintln(k.stdout, s)
	if k.logFile != nil {
		fmt.Fprintf(k.logFile, "%s %s\n", k.clk.Now().UTC().Format(time.RFC3339), s)
	}
}

func (k *kickoff) step(format string, args ...any) { k.line("STEP "+format, args...) }

// abort prints the ABORT line, naming what was and was not started, and
// returns the exit: 1, or the signal's code when a signal stopped the run.
func (k *kickoff) abort(ctx context.Context, format string, args ...any) error {
	why := fmt.Sprintf(format, args...)
	started, notStarted := "nothing", "nothing"
	if k.started > 0 {
		started = strings.Join(k.stages[:k.started], ", ")
	}
	if k.started < len(k.stages) {
		notStarted = strings.Join(k.stages[k.started:], ", ")
	}
	k.line("ABORT %s (started: %s; not started: %s)", why, started, notStarted)
	// Only the PriorityClass is left alone: it is cluster-wide, shared by
	// runs, and harmless.
	if k.started > 1 {
		cmd := "soak teardown --dir " + k.dir + " --force"
		if _, err := os.Stat(filepath.Join(k.dir, cluster.RunEnvFile)); err != nil {
			// Without run.env, teardown is told where the run is.
			cmd += fmt.Sprintf(" --context %s --namespace %s --release %s", k.o.Context, k.o.Namespace, k.o.Release)
		}
		if k.started == 2 {
			// The claim alone, which did not bind: it holds no run.
			k.line("HINT pvc/%s holds no run: fix what stops it binding and run again (the claim is kept), or delete it with %s --purge", k.pvc, cmd)
		} else {
			k.line("HINT %s removes the release (add --purge for pvc/%s)", cmd, k.pvc)
		}
	}
	if sig := cli.Signal(ctx); sig != nil {
		return cli.Silent(cli.SignalCode(sig))
	}
	return cli.Silent(cli.ExitFail)
}

// values are the release's values: the --values file, then the kickoff's
// own on top.
func (k *kickoff) values(job bool, plan string) map[string]any {
	v := helmvalues.Clone(k.base)
	helmvalues.Set(v, "job.enabled", job)
	helmvalues.Set(v, "engine.priorityClassName", k.o.PriorityClass)
	helmvalues.Set(v, "job.priorityClassName", k.o.PriorityClass)
	helmvalues.Set(v, "report.volume", k.pvc)
	helmvalues.Set(v, "report.path", k.reportName)
	helmvalues.Set(v, "report.stream", k.streamName)
	helmvalues.Set(v, "report.live", k.liveName)
	helmvalues.Set(v, "engine.allowTargets", k.allowTargets())
	helmvalues.Set(v, "tls.enabled", k.tlsOn())
	helmvalues.Set(v, "tls.secretName", k.tlsSecretName())
	if plan != "" {
		helmvalues.Set(v, "plan", plan)
	}
	return v
}

// kickoffKeys are the values the kickoff sets over the --values file.
var kickoffKeys = []string{"job.enabled", "engine.priorityClassName", "job.priorityClassName",
	"report.volume", "report.path", "report.stream", "plan", "engine.allowTargets", "tls.enabled", "tls.secretName"}

// writeValues records the values of the engines' install.
func (k *kickoff) writeValues(values map[string]any) error {
	data, err := yaml.Marshal(values)
	if err != nil {
		return fmt.Errorf("values: %w", err)
	}
	return record.WriteFile(filepath.Join(k.dir, valuesFile), data, 0o644)
}

// writeEngines writes engines.tsv: pod IP, node, pod, sorted by IP.
func (k *kickoff) writeEngines() error {
	var b strings.Builder
	for _, e := range k.engines {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", e.ip, e.node, e.pod)
	}
	if err := record.WriteFile(filepath.Join(k.dir, gate.DirEngines), []byte(b.String()), 0o644); err != nil {
		return err
	}
	nodes := make([]string, len(k.engines))
	for i, e := range k.engines {
		nodes[i] = e.node
	}
	k.step("engines.tsv written: %s", strings.Join(nodes, " "))
	return nil
}

// renderPlan renders the plan for the engines that are ready and writes
// plan.yaml and shares.tsv.
func (k *kickoff) renderPlan(ctx context.Context) (string, error) {
	statsd := k.statsdAddr
	ro := render.DefaultOptions()
	ro.Profile = k.o.Profile
	ro.TargetsFile = k.o.TargetsFile
	ro.Targets = k.targets
	ro.DNS = fmt.Sprintf("%s.%s.svc.cluster.local:%d", k.names.EngineService, k.o.Namespace, chart.EnginePort)
	ro.Backends = k.backends
	ro.Duration = k.o.Duration
	ro.Rate = k.o.Rate
	ro.Statsd = statsd
	ro.PerTargetFloors = true
	r, err := render.Render(ro)
	if err != nil {
		return "", fmt.Errorf("render the plan: %w", err)
	}
	if err := record.WriteFile(filepath.Join(k.dir, planFile), r.YAML, 0o644); err != nil {
		return "", err
	}
	var shares bytes.Buffer
	if err := render.WriteShares(&shares, r.Shares); err != nil {
		return "", err
	}
	if err := record.WriteFile(filepath.Join(k.dir, gate.DirShares), shares.Bytes(), 0o644); err != nil {
		return "", err
	}
	rps := make([]int, len(r.Shares))
	for i, s := range r.Shares {
		rps[i] = s.RPS
	}
	statsdSaid := statsd
	if statsdSaid == "" {
		statsdSaid = "off"
	}
	k.step("plan rendered: backends=%d rate=%d split=%s duration=%s dns=%s statsd=%s",
		r.Backends, k.o.Rate, render.SplitString(rps), r.Duration, ro.DNS, statsdSaid)
	return string(r.YAML), nil
}

// statsd resolves --statsd: auto is the cluster IP and first UDP port of
// --statsd-service, or no live metrics (said, not an abort: the report does
// not depend on them).
func (k *kickoff) statsd(ctx context.Context) (string, error) {
	switch k.o.Statsd {
	case "off":
		return "", nil
	case "auto":
	default:
		return k.o.Statsd, nil
	}
	ns, name, _ := strings.Cut(k.o.StatsdService, "/")
	svc, err := k.cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("interrupted: %w", ctx.Err())
		}
		k.line("NOTE statsd: service/%s not read (%s): running WITHOUT live metrics (the report is unaffected)", k.o.StatsdService, cluster.OneLine(err))
		return "", nil
	}
	ip := svc.Spec.ClusterIP
	for _, p := range svc.Spec.Ports {
		if p.Protocol == corev1.ProtocolUDP && ip != "" && ip != corev1.ClusterIPNone {
			addr := ip + ":" + strconv.Itoa(int(p.Port))
			k.line("NOTE statsd: service/%s is %s", k.o.StatsdService, addr)
			return addr, nil
		}
	}
	k.line("NOTE statsd: service/%s has no cluster IP with a UDP port: running WITHOUT live metrics (the report is unaffected)", k.o.StatsdService)
	return "", nil
}

// writeRunEnv writes run.env, the run's description for the saver, the
// teardown and a later sortie-save, atomically (record.WriteEnv: quoted
// so that every reader gives each value back exactly). An empty value is
// left out.
func (k *kickoff) writeRunEnv() error {
	var pairs []record.EnvPair
	kv := func(key, value string) {
		if value != "" {
			pairs = append(pairs, record.EnvPair{Key: key, Value: value})
		}
	}
	kv("RUN_TAG", k.tag)
	kv("PROFILE", k.o.Profile)
	kv("KUBECONFIG", k.o.Kubeconfig)
	kv("CONTEXT", k.o.Context)
	kv("NAMESPACE", k.o.Namespace)
	kv("RELEASE", k.o.Release)
	kv("JOB", k.names.Job)
	kv("PVC", k.pvc)
	kv("REPORT", k.reportName)
	kv("STREAM", k.streamName)
	kv("LIVE", k.liveName)
	kv("PLANNED_DURATION", fmt.Sprintf("%ds", int64(k.o.PlannedDuration()/time.Second)))
	kv("ENGINE_SELECTOR", k.names.EngineSelector)
	kv("ENGINE_CONTAINER", chart.EngineContainer)
	kv("DRIVER_CONTAINER", chart.DriverContainer)
	kv("DRIVER_IMAGE", k.driverImage)
	readerImage, readerCommand := k.o.reader(k.driverImage)
	kv("READER_IMAGE", readerImage)
	kv("READER_COMMAND", readerCommand)
	kv("BACKENDS", strconv.Itoa(k.backends))
	kv("RATE", strconv.Itoa(k.o.Rate))
	kv("PRIORITY_CLASS", k.o.PriorityClass)
	if k.tlsOn() {
		kv("TLS_SECRET", k.tlsSecretName())
	}
	return record.WriteEnv(filepath.Join(k.dir, cluster.RunEnvFile),
		"A sortie run, written by soak run. sortie-save --dir and soak teardown --dir read it.", pairs)
}

// launch arms the saver, checks the driver pod, starts the watchdog and the
// churn driver at T0, and waits for all three.
func (k *kickoff) launch(ctx context.Context) error {
	sv, err := k.armSaver(ctx)
	if err != nil {
		return k.abort(ctx, "arm the saver: %v", err)
	}
	k.started++
	k.step("saver armed: waits for job/%s to end, then copies its verdict into %s (save.log)", k.names.Job, k.dir)

	pod, err := k.driverPod(ctx)
	if err != nil {
		var ended *podEnded
		if errors.As(err, &ended) {
			// The Job is over already: its report is the one thing that says
			// why, and the saver, armed first, is getting it out.
			res := sv.wait()
			return k.abort(ctx, "%v; saver: %s", err, res.said())
		}
		sv.stop()
		res := sv.wait()
		return k.abort(ctx, "%v; the saver was stopped (%s): the Job stays; save it with sortie-save --dir %s or give it up with soak teardown --dir %s --force",
			err, res.said(), k.dir, k.dir)
	}

	t0 := k.clk.Now().UTC()
	if err := record.AppendEnv(filepath.Join(k.dir, cluster.RunEnvFile), record.EnvPair{Key: "LOAD_START", Value: t0.Format(time.RFC3339)}); err != nil {
		k.log.Warn("could not add LOAD_START to run.env", "err", err)
	}
	prio := fmt.Sprintf("%s=%d", pod.Spec.PriorityClassName, priorityOf(pod))
	if pod.Spec.PriorityClassName != k.o.PriorityClass {
		k.line("WARNING the driver pod's priority is %s, not %s=%d: it is the first victim when a node fills up, and losing it ends the run", prio, k.o.PriorityClass, k.o.PriorityValue)
	}
	end := t0.Add(k.o.PlannedDuration())
	k.step("load started: pod/%s Running on %s (priority %s); T0=%s, planned end %s", pod.Name, pod.Spec.NodeName, prio,
		t0.Format(time.RFC3339), end.Format(time.RFC3339))

	var wg sync.WaitGroup
	var wres watchdog.Result
	wdone := make(chan struct{})
	wd, err := k.newWatcher()
	if err != nil {
		sv.stop()
		sv.wait()
		return k.abort(ctx, "start the watchdog: %v", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(wdone)
		wres = wd.Run(ctx, func() string { return endedBy(ctx) })
	}()
	k.started++
	k.step("watchdog started at T0: namespaces=%s interval=%s for %s (restart-watch.log)", strings.Join(k.watchNS, ","), k.o.WatchInterval, k.o.PlannedDuration())

	churnOutcome := "none"
	if k.schedule != nil {
		ch, err := k.newChurner(t0)
		if err != nil {
			k.line("WARNING churn not started: %v", err)
			churnOutcome = "not-started"
		} else {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch ch.Run(ctx) {
				case churn.Complete:
					churnOutcome = "complete"
					if ch.Findings() > 0 {
						// Every step ran, and some found a failure (a
						// first-use tally with a non-2xx, say).
						churnOutcome = "findings"
					}
				case churn.Aborted:
					churnOutcome = "aborted"
				default:
					churnOutcome = "stopped"
				}
			}()
			k.started++
			rolls, shrinks, newSAs := k.schedule.Counts()
			k.step("churn started at T0: schedule=%s steps=%d rolls=%d shrinks=%d new_serviceaccounts=%d (churn.log)",
				filepath.Base(k.o.Rolls), len(k.schedule.Steps), rolls, shrinks, newSAs)
		}
	}
	k.step("waiting for the saver (job/%s ends after %s), the watchdog and the churn", k.names.Job, end.Format(time.RFC3339))

	res := sv.wait()
	select {
	case <-wdone:
	default:
		if ctx.Err() == nil {
			k.step("saver done before the watchdog's window ended: waiting for the watchdog and the churn")
		}
	}
	wg.Wait()

	if sig := cli.Signal(ctx); sig != nil || ctx.Err() != nil {
		k.line("INTERRUPTED %s: the Job goes on; save it with sortie-save --dir %s, then soak teardown --dir %s", signalName(sig), k.dir, k.dir)
		if sig != nil {
			return cli.Silent(cli.SignalCode(sig))
		}
		return cli.Silent(cli.ExitFail)
	}

	gateCode := cli.ExitUnproven
	if res.res.Saved || res.res.StreamSaved {
		k.step("grading %s with the gate", k.dir)
		// The HTML report goes beside the files it was drawn from.
		gerr := gate.Run(ctx, []string{"--dir", k.dir, "--per-node", "--backends", strconv.Itoa(k.backends),
			"--settle", rollSettle.String(), "--html", filepath.Join(k.dir, htmlReport)}, k.stdout, k.stderr)
		gateCode = cli.Code(gerr)
	}
	pass := gateCode == cli.ExitOK && wres.Verdict == watchdog.Pass && res.res.Saved &&
		(churnOutcome == "none" || churnOutcome == "complete")
	verdict := "FAIL"
	if pass {
		verdict = "PASS"
	}
	k.line("SOAK %s gate=%d watchdog=%s churn=%s saver=%s dir=%s", verdict, gateCode, wres.Verdict, churnOutcome, res.state(), k.dir)
	switch {
	case pass:
		return nil
	case gateCode == cli.ExitUsage || gateCode == cli.ExitUnproven:
		return cli.Silent(gateCode)
	default:
		return cli.Silent(cli.ExitFail)
	}
}

// priorityOf reads a pod's resolved priority (0 when admission set none).
func priorityOf(p *corev1.Pod) int32 {
	if p.Spec.Priority == nil {
		return 0
	}
	return *p.Spec.Priority
}

// newWatcher builds the restart watchdog for the planned duration.
func (k *kickoff) newWatcher() (*watchdog.Watcher, error) {
	wo := watchdog.DefaultOptions()
	wo.Namespaces = k.watchNS
	wo.Interval = k.o.WatchInterval
	wo.Duration = k.o.PlannedDuration()
	if err := wo.Validate(); err != nil {
		return nil, err
	}
	cs, err := k.env.NewClient(k.o.Kubeconfig, k.o.Context, compWatchdog)
	if err != nil {
		return nil, err
	}
	out, err := k.componentOut(restartWatchLog)
	if err != nil {
		return nil, err
	}
	return &watchdog.Watcher{Client: cs, Clock: k.cclk, Opts: wo, Out: out}, nil
}

// newChurner builds the churn driver for the schedule at t0.
func (k *kickoff) newChurner(t0 time.Time) (*churn.Churner, error) {
	co := k.churnOptions()
	co.T0 = t0
	cs, err := k.env.NewClient(k.o.Kubeconfig, k.o.Context, compChurn)
	if err != nil {
		return nil, err
	}
	out, err := k.componentOut(churnLog)
	if err != nil {
		return nil, err
	}
	// The churn's memory samples go to a file of the run directory,
	// synced row by row like its log.
	mf, err := os.OpenFile(filepath.Join(k.dir, memoryTSV), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	k.files = append(k.files, mf)
	return &churn.Churner{Client: cs, Clock: k.cclk, Opts: co, Schedule: k.schedule, Out: out, MemoryOut: syncFile{mf},
		Log: slog.New(slog.NewTextHandler(k.stderr, nil)).With("component", "churn")}, nil
}

func (k *kickoff) churnOptions() churn.Options {
	co := churn.DefaultOptions()
	co.Schedule = k.o.Rolls
	co.Namespace = k.churnNS
	co.Kubeconfig = k.o.Kubeconfig
	co.Context = k.o.Context
	co.SampleAfter = k.o.SampleAfter
	if k.o.SampleAge > 0 {
		co.SampleAge = k.o.SampleAge
	}
	// A new-serviceaccount step's pod runs the release's own engine image
	// in its client mode, against the run's targets.
	co.NewSAImage = k.engineImage
	for _, t := range k.targets {
		co.NewSATargets = append(co.NewSATargets, oneshot.Target{Name: t.Name, URL: t.URL})
	}
	return co
}

// componentOut is where a component's lines go: stdout and its own log file
// in the run directory, synced line by line.
func (k *kickoff) componentOut(name string) (io.Writer, error) {
	f, err := os.OpenFile(filepath.Join(k.dir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	k.files = append(k.files, f)
	return io.MultiWriter(k.stdout, syncFile{f}), nil
}

// endedBy names how a cancelled run ended, as the watchdog says it.
func endedBy(ctx context.Context) string {
	if cli.Signal(ctx) == os.Interrupt {
		return watchdog.EndedINT
	}
	return watchdog.EndedTERM
}

func signalName(sig os.Signal) string {
	if sig == nil {
		return "cancelled"
	}
	return sig.String()
}

// savingRun is the saver running beside the kickoff.
type savingRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    saver.Result
	err    error
	last   *lastLine
}

// saveOutcome is what the saver ended with.
type saveOutcome struct {
	res  saver.Result
	err  error
	line string
}

// said is the saver's last word: its SORTIE_ line, else its error.
func (o saveOutcome) said() string {
	switch {
	case o.line != "":
		return o.line
	case o.err != nil:
		return cluster.OneLine(o.err)
	}
	return "it printed nothing"
}

// state names the outcome for the SOAK line.
func (o saveOutcome) state() string {
	switch {
	case o.res.Saved:
		return "saved"
	case o.res.Job == saver.JobActive:
		return "incomplete"
	case o.err != nil || o.res.Interrupted:
		return "interrupted"
	}
	return "failed"
}

func (s *savingRun) stop() { s.cancel() }

func (s *savingRun) wait() saveOutcome {
	<-s.done
	return saveOutcome{res: s.res, err: s.err, line: s.last.get()}
}

// armSaver starts the saver on run.env, as sortie-save --dir would.
func (k *kickoff) armSaver(ctx context.Context) (*savingRun, error) {
	f, err := os.Open(filepath.Join(k.dir, cluster.RunEnvFile))
	if err != nil {
		return nil, err
	}
	env, err := saver.ParseRunEnv(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	cs, err := k.env.NewClient(k.o.Kubeconfig, k.o.Context, compSaver)
	if err != nil {
		return nil, err
	}
	out, err := k.componentOut(saveLog)
	if err != nil {
		return nil, err
	}
	last := &lastLine{prefix: "SORTIE_"}
	so := saver.DefaultOptions()
	so.Dir = k.dir
	so.Env = env
	so.Logs = k.env.SaverLogs
	so.Out = io.MultiWriter(out, last)
	so.Log = slog.New(slog.NewTextHandler(k.stderr, nil))
	if err := so.Validate(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &savingRun{cancel: cancel, done: make(chan struct{}), last: last}
	go func() {
		defer close(s.done)
		defer cancel()
		s.res, s.err = saver.Save(sctx, cs, k.cclk, so)
	}()
	return s, nil
}

// podEnded is a driver pod that finished before it was seen running.
type podEnded struct {
	pod, phase string
}

func (e *podEnded) Error() string {
	return fmt.Sprintf("driver pod/%s is %s, not Running: the run ended before it was checked", e.pod, e.phase)
}

// driverPod waits for the Job's pod to run. A pod that already ended is a
// *podEnded; one that does not run within PodTimeout is an error saying
// where it stands.
func (k *kickoff) driverPod(ctx context.Context) (*corev1.Pod, error) {
	deadline := k.clk.Now().Add(k.o.PodTimeout)
	where := "no pod yet"
	for {
		pods, err := k.cs.CoreV1().Pods(k.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + k.names.Job})
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("interrupted while waiting for the driver pod")
		case err != nil:
			where = "pods not listed: " + cluster.OneLine(err)
		case len(pods.Items) > 0:
			p := newestPod(pods.Items)
			switch p.Status.Phase {
			case corev1.PodRunning:
				return p, nil
			case corev1.PodSucceeded, corev1.PodFailed:
				return nil, &podEnded{pod: p.Name, phase: string(p.Status.Phase)}
			}
			where = fmt.Sprintf("pod/%s is %s%s", p.Name, p.Status.Phase, waitingReasons(p))
		}
		if !k.clk.Now().Before(deadline) {
			return nil, fmt.Errorf("the driver of job/%s is not Running after %s (%s)", k.names.Job, k.o.PodTimeout, where)
		}
		if err := k.clk.Sleep(ctx, k.o.Poll); err != nil {
			return nil, fmt.Errorf("interrupted while waiting for the driver pod (%s)", where)
		}
	}
}

// newestPod returns the pod created last (by name on a tie).
func newestPod(pods []corev1.Pod) *corev1.Pod {
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return pods[i].Name < pods[j].Name
	})
	return &pods[len(pods)-1]
}

// waitingReasons says why a pod's containers are not running yet.
func waitingReasons(p *corev1.Pod) string {
	var rs []string
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			rs = append(rs, c.Name+": "+w.Reason)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && (c.Reason != "" || c.Message != "") {
			rs = append(rs, "unscheduled: "+conditionWhy(c.Reason, c.Message))
		}
	}
	if len(rs) == 0 {
		return ""
	}
	return " (" + strings.Join(rs, ", ") + ")"
}

// conditionWhy is a condition's or an event's reason followed by its
// message, quoted: the reason is a word a program can match
// (Unschedulable), the message the sentence that says why ("0/2 nodes are
// available: pod has unbound immediate PersistentVolumeClaims.").
func conditionWhy(reason, message string) string {
	message = strings.Join(strings.Fields(message), " ")
	if len(message) > 300 {
		message = message[:300] + "..."
	}
	switch {
	case message == "":
		return reason
	case reason == "":
		return strconv.Quote(message)
	}
	return reason + " " + strconv.Quote(message)
}

// lockedWriter serializes writes, so the lines of the components running
// beside the kickoff never interleave mid-line.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// syncFile syncs after every write, so a log holds every line printed even
// if the machine dies right after.
type syncFile struct{ f *os.File }

func (s syncFile) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	if err != nil {
		return n, err
	}
	return n, s.f.Sync()
}

// lastLine remembers the last whole line written to it that starts with
// prefix.
type lastLine struct {
	prefix string
	mu     sync.Mutex
	buf    []byte
	line   string
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		if s := string(l.buf[:i]); strings.HasPrefix(s, l.prefix) {
			l.line = s
		}
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

func (l *lastLine) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.line
}

// rollSettle is the gate's settle after a roll's end in `soak run`. A
// roll ends when its rollout is complete, and the last old pod gets its
// SIGTERM only after its preStop sleep, which the churn pre-flight holds
// at --min-prestop-sleep or more: a proxy that does not drain fails then.
// The window must outlast that sleep by the gate's own settle, or such a
// failure lands just past it, unattributed.
var rollSettle = churn.DefaultOptions().MinPreStopSleep + gate.DefaultSettle

// readLines splits text into its non-empty lines.
func readLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}
