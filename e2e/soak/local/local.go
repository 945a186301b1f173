package local

import (
	"bufio"
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sortie-soak/sortie/driver"
	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/gate"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
	"github.com/sortie-soak/sortie/render"
)

//go:embed targets/local.txt
var defaultTargets []byte

// File names in a run directory; the gate's --dir reads the same names.
const (
	planFile    = "plan.yaml"
	reportFile  = "report.json"
	streamFile  = "results.jsonl"
	liveFile    = "live.jsonl"
	sharesFile  = "shares.tsv"
	enginesFile = "engines.tsv"
	driverLog   = "sortie.log"
	driverOut   = "sortie.out"
	rollsLog    = record.RollsFileName
	faultsLog   = record.FaultsFileName
	// htmlReport is the gate's HTML report (sortie-gate --html).
	htmlReport = "report.html"
)

// LocalOptions configure `soak local`.
type LocalOptions struct {
	// Duration of the load.
	Duration time.Duration
	// Nodes is how many engines run, one per simulated node, on 127.0.0.11,
	// 127.0.0.12, ... named node-a, node-b, ...
	Nodes int
	// Rate is the requests per second every node sends over all targets.
	Rate int
	// TargetsFile is a `name url weight` file; empty uses the built-in
	// 8-target shape. Each target is served locally: its URL's host and
	// port are replaced by the target's local Service address.
	TargetsFile string
	// Out is the directory that holds one run directory per run.
	Out string
	// Tag names the run directory; empty makes local-<UTC time>.
	Tag string
	// Rolls restarts every target's replica once during the run, like a
	// rolling update.
	Rolls bool
	// NoDrain runs targets as naive servers: no pre-stop wait, exit at once
	// on SIGTERM. With Rolls it is the negative control.
	NoDrain bool
	// RollIdle, with Rolls, rolls a spare replica of each target that is
	// outside the Service's endpoints, so no rolled replica ever holds a
	// connection: the negative control of the rule that such a run is
	// UNOBSERVED.
	RollIdle bool
	// Faults are injected at their times after the load start.
	Faults []Fault
	// NoResume leaves a driver that a driver-kill or driver-term fault
	// stopped stopped: the negative control of the resume, which must
	// never PASS.
	NoResume bool
	// Progress is the interval of the driver's progress lines.
	Progress time.Duration
	// DeadlineGrace is the driver's slack before a silent engine's deadline.
	DeadlineGrace time.Duration
	// AnswerWindow and CancelWait are the driver's waits after a deadline:
	// for an answer, then for the answer to a cancel.
	AnswerWindow, CancelWait time.Duration
	// Lag is how long a removed replica keeps receiving new connections,
	// like the endpoint propagation of a real cluster.
	Lag time.Duration
	// HTML is the file name of the gate's HTML report in the run
	// directory; empty writes none.
	HTML string
	// InsecurePlaintext runs the engines' control plane in plaintext;
	// by default it is mTLS with a CA made for the run (tls/ in the run
	// directory).
	InsecurePlaintext bool
	// Protocol is what the engines speak to the targets: http1, h2
	// (HTTP/2 with prior knowledge: the targets run with --h2c and the
	// plan says protocol: http2), grpc (unary calls to the targets' gRPC
	// echo over h2c: the plan says grpc: {mode: unary}), or tcp or udp
	// (echo load on the targets' --tcp-echo or --udp-echo service: tcp://
	// or udp:// targets with a body).
	Protocol string
}

// DefaultLocalOptions is the embedded default run: 60 s, two nodes, the
// 8-target 60-rps-per-node shape.
func DefaultLocalOptions() LocalOptions {
	return LocalOptions{
		Duration:      60 * time.Second,
		Nodes:         2,
		Rate:          60,
		Out:           "out",
		Progress:      time.Minute,
		DeadlineGrace: 2 * time.Minute,
		AnswerWindow:  10 * time.Second,
		CancelWait:    30 * time.Second,
		Lag:           time.Second,
		HTML:          htmlReport,
		Protocol:      ProtocolHTTP1,
	}
}

// Validate lists every problem of the options.
func (o LocalOptions) Validate() error {
	var errs []error
	if o.Duration < time.Second || o.Duration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--duration %s: want whole seconds, at least 1s", o.Duration))
	}
	if o.Nodes < 1 || o.Nodes > 26 {
		errs = append(errs, fmt.Errorf("--nodes %d: want 1 to 26", o.Nodes))
	}
	if o.Rate < 1 {
		errs = append(errs, fmt.Errorf("--rate %d: want at least 1", o.Rate))
	}
	if o.Out == "" {
		errs = append(errs, errors.New("--out: want a directory"))
	}
	if o.Progress < 0 || o.DeadlineGrace < 0 || o.Lag < 0 || o.AnswerWindow < 0 || o.CancelWait < 0 {
		errs = append(errs, errors.New("--progress, --deadline-grace, --answer-window, --cancel-wait and --lag must not be negative"))
	}
	switch o.Protocol {
	case ProtocolHTTP1, ProtocolH2, ProtocolGRPC, ProtocolTCP, ProtocolUDP:
	default:
		errs = append(errs, fmt.Errorf("--protocol %q: want %s, %s, %s, %s or %s", o.Protocol, ProtocolHTTP1, ProtocolH2, ProtocolGRPC, ProtocolTCP, ProtocolUDP))
	}
	if o.raw() {
		for _, f := range o.Faults {
			if f.Kind == TargetDown || f.Kind == TargetFail {
				errs = append(errs, fmt.Errorf("--fault %s: target faults are HTTP answers; --protocol %s has none", f, o.Protocol))
			}
		}
	}
	if o.RollIdle && !o.Rolls {
		errs = append(errs, errors.New("--roll-idle: rolls nothing without --rolls"))
	}
	for _, f := range o.Faults {
		if f.At+f.For > o.Duration && (f.Kind == TargetDown || f.Kind == TargetFail) {
			errs = append(errs, fmt.Errorf("--fault %s: the window ends after the load (%s)", f, o.Duration))
		}
		if f.At >= o.Duration {
			errs = append(errs, fmt.Errorf("--fault %s: starts after the load ends (%s)", f, o.Duration))
		}
		if (f.Kind == EngineKill || f.Kind == EngineFreeze || f.Kind == EngineRestart) && nodeIndex(f.Subject) >= o.Nodes {
			errs = append(errs, fmt.Errorf("--fault %s: no such node (nodes are node-a..%s)", f, nodeName(o.Nodes-1)))
		}
	}
	errs = append(errs, restartOverlaps(o.Faults)...)
	return errors.Join(errs...)
}

// The protocols of --protocol.
const (
	ProtocolHTTP1 = "http1"
	ProtocolH2    = "h2"
	ProtocolGRPC  = "grpc"
	ProtocolTCP   = render.ProtocolTCP
	ProtocolUDP   = render.ProtocolUDP
)

// rawBody is the message of a tcp or udp run, echoed and matched.
const rawBody = "sortie-soak-echo"

// raw says the run is TCP or UDP echo load.
func (o LocalOptions) raw() bool { return o.Protocol == ProtocolTCP || o.Protocol == ProtocolUDP }

// restartOverlaps refuses two engine-restart faults of one node whose
// down times overlap: the second would find no engine to kill. A node may
// restart any number of times, one after the other.
func restartOverlaps(faults []Fault) []error {
	var errs []error
	for i, a := range faults {
		for _, b := range faults[i+1:] {
			if a.Kind != EngineRestart || b.Kind != EngineRestart || a.Subject != b.Subject {
				continue
			}
			if a.At < b.At+b.For && b.At < a.At+a.For {
				errs = append(errs, fmt.Errorf("--fault %s and --fault %s: the node's engine is still down from one when the other kills it; restart it again after it came back", a, b))
			}
		}
	}
	return errs
}

func nodeName(i int) string { return "node-" + string(rune('a'+i)) }

func nodeIndex(name string) int {
	if len(name) == 6 && strings.HasPrefix(name, "node-") && name[5] >= 'a' && name[5] <= 'z' {
		return int(name[5] - 'a')
	}
	return 1 << 30
}

// local is one run of soak local.
type local struct {
	o      LocalOptions
	self   string
	dir    string
	stderr io.Writer
	log    *slog.Logger

	mu       sync.Mutex
	procs    []*proc
	services map[string]frontend
	replicas map[string]*replica
	// spares are the replicas outside the endpoints that --roll-idle rolls.
	spares  map[string]*replica
	engines []*engineProc
	driver  *proc
	// restart asks runDriver to start the driver again with --resume,
	// restartAfter after the one that ends now (set by driver-kill and
	// driver-term).
	restart      bool
	restartAfter time.Duration
	seq          int
	// restarts counts each node's engine-restart faults: each new engine
	// has its own log.
	restarts map[string]int
	// rolls and faults are rolls.log and faults.log.
	rolls, faults *lineLog

	// clientTLS is the driver's side of the run's mTLS; nil in
	// plaintext.
	clientTLS *tls.Config

	// controlTimeout bounds a call to a target's control endpoint; zero
	// means defaultControlTimeout.
	controlTimeout time.Duration
}

// defaultControlTimeout bounds one call to a target's control endpoint: a
// target that takes the connection and never answers must not hold the
// fault schedule, nor the run's end, which waits for it.
const defaultControlTimeout = 10 * time.Second

// control is the client of the targets' control endpoints.
func (l *local) control() *http.Client {
	d := l.controlTimeout
	if d <= 0 {
		d = defaultControlTimeout
	}
	return &http.Client{Timeout: d}
}

type replica struct {
	proc    *proc
	addr    string
	control string
	// log is the file of the replica's stdout and stderr, which ends with
	// its DRAINED line.
	log string
}

type engineProc struct {
	node string
	addr string
	proc *proc
}

// Local runs the whole soak loop on this machine and returns the gate's
// verdict as its error (nil for PASS). self is the path of the soak binary,
// which also serves as the engine, the target and the driver of the run.
func Local(ctx context.Context, o LocalOptions, self string, stdout, stderr io.Writer) error {
	if err := o.Validate(); err != nil {
		return cli.Usage(err)
	}
	targets, err := loadTargets(o.TargetsFile)
	if err != nil {
		return cli.Usage(err)
	}
	if o.Tag == "" {
		o.Tag = "local-" + time.Now().UTC().Format("20060102-150405")
	}
	l := &local{
		o: o, self: self, stderr: stderr,
		dir:      filepath.Join(o.Out, o.Tag),
		log:      slog.New(slog.NewTextHandler(stderr, nil)).With("component", "soak"),
		services: map[string]frontend{},
		replicas: map[string]*replica{},
		spares:   map[string]*replica{},
	}
	if entries, err := os.ReadDir(l.dir); err == nil && len(entries) > 0 {
		return cli.Usage(fmt.Errorf("run directory %s already holds a run: choose another --out or --tag", l.dir))
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	defer l.stopAll()
	fmt.Fprintf(stderr, "soak local: run directory %s\n", l.dir)
	if err := l.makeTLS(); err != nil {
		return err
	}

	if err := l.startTargets(ctx, targets); err != nil {
		return err
	}
	if err := l.startEngines(ctx); err != nil {
		return err
	}
	if err := l.writeInputs(targets); err != nil {
		return err
	}
	if err := l.runDriver(ctx); err != nil {
		return err
	}
	return l.grade(ctx, stdout, stderr)
}

// grade runs the gate over the run directory; its exit code is the run's.
// An interrupted run (Ctrl-C) is graded too, on what the driver wrote when
// it was stopped, and never exits 0: it exits with the gate's code, or 1
// when the gate passed what there is.
func (l *local) grade(ctx context.Context, stdout, stderr io.Writer) error {
	interrupted := ctx.Err() != nil
	if interrupted {
		fmt.Fprintf(stderr, "soak local: interrupted: grading what the driver wrote in %s\n", l.dir)
	}
	// The gate reads the run directory by its file names: the report,
	// shares and engines to grade, and rolls.log, faults.log and
	// live.jsonl to set every failure against the rolls and faults (its
	// ROLL, FAULT and UNATTRIBUTED lines, before WINDOW). It runs whole
	// after an interrupt: it reads files, and its verdict is what is left.
	args := []string{"--dir", l.dir, "--per-node", "--backends", strconv.Itoa(l.o.Nodes)}
	if l.o.HTML != "" {
		args = append(args, "--html", filepath.Join(l.dir, l.o.HTML))
	}
	err := gate.Run(context.WithoutCancel(ctx), args, stdout, stderr)
	if interrupted && cli.Code(err) == cli.ExitOK {
		return cli.Fail(errors.New("interrupted: the run did not reach its end, whatever its report says"))
	}
	if code := cli.Code(err); l.o.Rolls && (code == cli.ExitOK || code == cli.ExitUnproven) {
		if uerr := l.rollsObserved(stdout); uerr != nil {
			return uerr
		}
	}
	return err
}

// rollsObserved reads rolls.log: a run with --rolls in which no rolled
// replica held a connection or a request when its SIGTERM landed proved
// nothing about draining, and is UNOBSERVED (exit 3), whatever the gate
// said of its failures. The line comes after the gate's.
func (l *local) rollsObserved(stdout io.Writer) error {
	log, err := record.ReadRollsFile(filepath.Join(l.dir, rollsLog))
	if err != nil {
		return cli.Fail(fmt.Errorf("read the rolls: %w", err))
	}
	rolled, touched := 0, 0
	for _, r := range log.Rolls {
		if !r.Failed {
			rolled++
		}
		if !r.Failed && r.Touched() {
			touched++
		}
	}
	if touched > 0 {
		return nil
	}
	fmt.Fprintf(stdout, "UNOBSERVED rolls=%d touched=0: no rolled replica held a connection or a request at SIGTERM; the rolls prove nothing about draining\n", rolled)
	return cli.Silent(cli.ExitUnproven)
}

func loadTargets(path string) ([]render.Target, error) {
	if path == "" {
		return render.ParseTargets("targets/local.txt", defaultTargets)
	}
	return render.ReadTargets(path)
}

// startTargets starts one local Service and one replica per target.
func (l *local) startTargets(ctx context.Context, targets []render.Target) error {
	for _, t := range targets {
		var svc frontend
		var err error
		if l.o.Protocol == ProtocolUDP {
			svc, err = newUDPService("127.0.0.1:0")
		} else {
			svc, err = newService(t.Name, "127.0.0.1:0")
		}
		if err != nil {
			return fmt.Errorf("target %s: %w", t.Name, err)
		}
		l.services[t.Name] = svc
		r, err := l.startReplica(ctx, t.Name)
		if err != nil {
			return err
		}
		l.replicas[t.Name] = r
		svc.Add(r.addr)
		if l.o.RollIdle {
			// A spare never joins the endpoints: --roll-idle rolls it.
			if l.spares[t.Name], err = l.startReplica(ctx, t.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// startReplica starts a fixture target process serving one service and
// waits until it listens.
func (l *local) startReplica(ctx context.Context, name string) (*replica, error) {
	l.mu.Lock()
	l.seq++
	n := l.seq
	l.mu.Unlock()
	ready := filepath.Join(l.dir, fmt.Sprintf("target-%s-%d.ready", name, n))
	logPath := filepath.Join(l.dir, fmt.Sprintf("target-%s-%d.log", name, n))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"target", "--service", name + "=127.0.0.1:0", "--control", "127.0.0.1:0", "--ready-file", ready}
	if l.o.NoDrain {
		args = append(args, "--no-drain")
	}
	// In the raw modes the service forwards to the replica's echo
	// service, which is what its ready file names as the target's
	// address; the HTTP service and the control endpoint still run.
	echoLine, lines := name, 2
	switch l.o.Protocol {
	case ProtocolH2, ProtocolGRPC:
		args = append(args, "--h2c")
	case ProtocolTCP:
		args = append(args, "--tcp-echo", "127.0.0.1:0", "--echo-drain-grace", l.echoDrain().String())
		echoLine, lines = "tcp-echo", 3
	case ProtocolUDP:
		args = append(args, "--udp-echo", "127.0.0.1:0")
		echoLine, lines = "udp-echo", 3
	}
	p, err := startProc("target "+name, l.self, logf, args...)
	if err != nil {
		logf.Close()
		return nil, err
	}
	l.track(p)
	text, err := waitFile(ctx, p, ready, lines, 20*time.Second)
	if err != nil {
		return nil, err
	}
	r := &replica{proc: p, log: logPath}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case echoLine:
			r.addr = strings.TrimSpace(v)
		case "_control":
			r.control = strings.TrimSpace(v)
		}
	}
	if r.addr == "" || r.control == "" {
		return nil, fmt.Errorf("target %s: ready file %s lacks its addresses: %q", name, ready, text)
	}
	return r, nil
}

// echoDrain is how long a tcp replica told to stop keeps echoing on the
// connections it holds: a raw TCP client never reconnects, so a graceful
// replica serves them until the engines close them at the end of the load
// (the drain ends then), as a proxy drains long-lived connections. It is
// the load's length with the engines' tcp drain and some slack; the
// roll's wait for the replica to exit is that much longer (exitWait).
func (l *local) echoDrain() time.Duration { return l.o.Duration + 5*time.Second }

// exitWait bounds the wait for a replica told to stop to exit.
func (l *local) exitWait() time.Duration {
	if l.o.Protocol == ProtocolTCP {
		return drainWait + l.echoDrain()
	}
	return drainWait
}

func (l *local) track(p *proc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.procs = append(l.procs, p)
}

// startEngines starts one engine per node on its own loopback address and
// waits until each answers Info.
func (l *local) startEngines(ctx context.Context) error {
	for i := 0; i < l.o.Nodes; i++ {
		node := nodeName(i)
		ip := nodeIP(i).String()
		port, err := freePort(ip)
		if err != nil {
			return fmt.Errorf("engine %s: %w", node, err)
		}
		e, err := l.startEngine(node, net.JoinHostPort(ip, strconv.Itoa(port)), "engine-"+node+".log")
		if err != nil {
			return err
		}
		l.engines = append(l.engines, e)
	}
	for _, e := range l.engines {
		if err := waitEngine(ctx, e, l.engineCreds(), 20*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// startEngine starts the engine process of node at addr, its output in
// the run directory's file logName.
func (l *local) startEngine(node, addr, logName string) (*engineProc, error) {
	logf, err := os.Create(filepath.Join(l.dir, logName))
	if err != nil {
		return nil, err
	}
	p, err := startProc("engine "+node, l.self, logf, append([]string{
		"engine", "--listen", addr, "--backend-name", node, "--max-concurrent-executions", "16"}, l.engineSecurity()...)...)
	if err != nil {
		logf.Close()
		return nil, err
	}
	l.track(p)
	return &engineProc{node: node, addr: addr, proc: p}, nil
}

func freePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitEngine calls Info until the engine answers.
func waitEngine(ctx context.Context, e *engineProc, creds credentials.TransportCredentials, timeout time.Duration) error {
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := enginev1.NewEngineClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := client.Info(cctx, &enginev1.InfoRequest{})
		cancel()
		if err == nil {
			if info.GetBackendName() != e.node {
				return fmt.Errorf("engine %s at %s calls itself %q", e.node, e.addr, info.GetBackendName())
			}
			return nil
		}
		if e.proc.exited() {
			return fmt.Errorf("engine %s exited at start-up (see engine-%s.log)", e.node, e.node)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("engine %s at %s did not answer within %s: %w", e.node, e.addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeInputs renders the plan for the local targets and engines and
// writes it with the share table and the engine list.
func (l *local) writeInputs(targets []render.Target) error {
	local := make([]render.Target, len(targets))
	for i, t := range targets {
		u, err := url.Parse(t.URL)
		if err != nil {
			return fmt.Errorf("target %s: %w", t.Name, err)
		}
		u.Scheme = "http"
		u.Host = l.services[t.Name].Addr()
		if l.o.raw() {
			// host:port only: a raw target has no path.
			u = &url.URL{Scheme: l.o.Protocol, Host: u.Host}
		}
		local[i] = t
		local[i].URL = u.String()
	}
	ro := render.DefaultOptions()
	ro.Profile = "local"
	ro.TargetsFile = "local.txt"
	if l.o.TargetsFile != "" {
		ro.TargetsFile = l.o.TargetsFile
	}
	ro.Targets = local
	ro.Duration = l.o.Duration
	ro.Rate = l.o.Rate
	for _, e := range l.engines {
		ro.Services = append(ro.Services, e.addr)
	}
	ro.Backends = len(l.engines)
	ro.PerTargetFloors = true
	switch l.o.Protocol {
	case ProtocolH2:
		ro.Protocol = "http2"
	case ProtocolTCP, ProtocolUDP:
		ro.Protocol, ro.Body = l.o.Protocol, rawBody
	case ProtocolGRPC:
		ro.GRPC = true
	}
	r, err := render.Render(ro)
	if err != nil {
		return cli.Usage(fmt.Errorf("render the plan: %w", err))
	}
	if err := record.WriteFile(filepath.Join(l.dir, planFile), r.YAML, 0o644); err != nil {
		return err
	}
	var shares strings.Builder
	if err := render.WriteShares(&shares, r.Shares); err != nil {
		return err
	}
	if err := record.WriteFile(filepath.Join(l.dir, sharesFile), []byte(shares.String()), 0o644); err != nil {
		return err
	}
	var engines strings.Builder
	for _, e := range l.engines {
		fmt.Fprintf(&engines, "%s\t%s\n", e.addr, e.node)
	}
	return record.WriteFile(filepath.Join(l.dir, enginesFile), []byte(engines.String()), 0o644)
}

// runDriver runs the driver as a child process, so it can be frozen,
// injects the faults and rolls at their times after the load start, and
// waits for the driver to end.
func (l *local) runDriver(ctx context.Context) error {
	logf, err := os.Create(filepath.Join(l.dir, driverLog))
	if err != nil {
		return err
	}
	defer logf.Close()
	outf, err := os.Create(filepath.Join(l.dir, driverOut))
	if err != nil {
		return err
	}
	defer outf.Close()
	for _, lg := range []struct {
		name string
		to   **lineLog
	}{{rollsLog, &l.rolls}, {faultsLog, &l.faults}} {
		f, err := os.Create(filepath.Join(l.dir, lg.name))
		if err != nil {
			return err
		}
		defer f.Close()
		*lg.to = &lineLog{w: f, echo: l.stderr}
	}

	// The driver's stderr goes to sortie.log and, line by line, to ours;
	// its first "running" line marks the load start.
	pr, pw := io.Pipe()
	started := make(chan time.Time, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			fmt.Fprintln(l.stderr, line)
			if strings.HasPrefix(strings.TrimSpace(line), "running ") {
				// The stage starts the driver's start lead after dispatch.
				once.Do(func() { started <- time.Now().Add(driver.DefaultOptions().StartLead) })
			}
		}
		io.Copy(io.Discard, pr)
	}()
	args := []string{"driver", "run", filepath.Join(l.dir, planFile),
		"-o", filepath.Join(l.dir, reportFile),
		"--results-stream", filepath.Join(l.dir, streamFile),
		"--live-record", filepath.Join(l.dir, liveFile),
		"--progress", l.o.Progress.String(),
		"--deadline-grace", l.o.DeadlineGrace.String(),
		"--answer-window", l.o.AnswerWindow.String(),
		"--cancel-wait", l.o.CancelWait.String(),
	}
	args = append(args, l.driverSecurity()...)
	defer l.arm(ctx, started)()
	code, err := l.driverRuns(ctx, args, outf, pw)
	if err != nil {
		return err
	}
	pw.Close()
	<-copied
	if code == cli.ExitUsage {
		return cli.Usage(fmt.Errorf("the driver refused the rendered plan (exit 2): see %s", filepath.Join(l.dir, driverLog)))
	}
	return nil
}

// driverRuns runs the driver to its end: again with --resume, after the
// fault's delay, each time a driver-kill or driver-term stopped it. It
// returns the last driver's exit code.
func (l *local) driverRuns(ctx context.Context, args []string, outf io.Writer, pw io.Writer) (int, error) {
	for {
		drv, err := startProcSplit("driver", l.self, outf, pw, args...)
		if err != nil {
			return 0, err
		}
		l.track(drv)
		l.mu.Lock()
		l.driver = drv
		l.mu.Unlock()
		code, err := drv.wait(ctx)
		if err != nil {
			// Interrupted: SIGINT cancels the run, and the driver writes
			// its report, which is graded (SIGTERM would detach it).
			drv.signal(syscall.SIGCONT)
			drv.signal(syscall.SIGINT)
			wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
			code, _ = drv.wait(wctx)
			wcancel()
			return code, nil
		}
		l.mu.Lock()
		again, after := l.restart, l.restartAfter
		l.restart = false
		l.mu.Unlock()
		if !again {
			return code, nil
		}
		t := time.NewTimer(after)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return code, nil
		}
		l.log.Info("starting the driver again with --resume", "after", after, "exit", code)
		if !slices.Contains(args, "--resume") {
			args = append(args, "--resume")
		}
	}
}

// arm schedules the faults and the rolls once the load has started (its
// start time comes on started). The returned stop calls off those not yet
// due and waits for every one to end. The goroutine that arms them is
// counted before it starts, so the faults it adds always join a count above
// zero: stop's Wait cannot begin before them, even when the driver ends at
// once.
func (l *local) arm(ctx context.Context, started <-chan time.Time) (stop func()) {
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case t0 := <-started:
			l.schedule(actx, &wg, t0)
		case <-actx.Done():
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// schedule starts the faults and the rolls, each at its time after t0.
func (l *local) schedule(ctx context.Context, wg *sync.WaitGroup, t0 time.Time) {
	at := func(d time.Duration, f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(time.Until(t0.Add(d)))
			defer t.Stop()
			select {
			case <-ctx.Done():
			case <-t.C:
				f()
			}
		}()
	}
	for _, f := range l.o.Faults {
		f := f
		at(f.At, func() { l.inject(ctx, f) })
	}
	if l.o.Rolls {
		names := make([]string, 0, len(l.services))
		for n := range l.services {
			names = append(names, n)
		}
		sort.Strings(names)
		// Every target rolls once, spread over the middle of the run.
		start, span := l.o.Duration*15/100, l.o.Duration*60/100
		for i, n := range names {
			n := n
			at(start+span*time.Duration(i)/time.Duration(len(names)), func() { l.roll(ctx, n) })
		}
	}
}

func (l *local) engine(node string) *engineProc {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.engines {
		if e.node == node {
			return e
		}
	}
	return nil
}

// stopAll stops every child process and local Service.
func (l *local) stopAll() {
	l.mu.Lock()
	procs := append([]*proc(nil), l.procs...)
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(10 * time.Second)
		}()
	}
	wg.Wait()
	for _, s := range l.services {
		s.Close()
	}
}
