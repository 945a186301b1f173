package render

import (
	"errors"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sortie-soak/sortie/record"
)

// Profiles and their run lengths. e2e is the quarter-hour run a change is
// judged by, soak the 8h30m run, local the minute of `soak local`.
var Profiles = map[string]time.Duration{
	"e2e":   900 * time.Second,
	"soak":  30600 * time.Second,
	"local": 60 * time.Second,
}

// Names in the rendered plan, read by the harness and the gate.
const (
	PoolName = "nodes"
	// ScenarioName is the default scenario name (--scenario): the report's
	// label prefix and the statsd level.
	ScenarioName = "mesh"
	// UserAgent is the default User-Agent (--user-agent): the bash
	// renderer's, which the soak's access-log queries select on.
	UserAgent   = "aether-soak-sortie"
	StatsPrefix = "sortie"
	// StatsFlush is how often the engines flush statsd deltas: the bash
	// plan's 5 s, so dashboards built on it see the same resolution.
	StatsFlush = 5 * time.Second
)

// scenarioRE is the bash renderer's rule for --scenario, narrower than the
// plan's, because the name is also a statsd level and a label prefix.
var scenarioRE = regexp.MustCompile(`^[a-z0-9_]+$`)

// maxUserAgent bounds --user-agent.
const maxUserAgent = 256

// AutoMaxPending asks Render to compute max_pending_requests from the stall
// budget.
const AutoMaxPending = -1

// maxStallBudget bounds the stall budget so the queue arithmetic cannot
// overflow.
const maxStallBudget = time.Hour

// ZeroThresholds are the outcome classes that must stay at zero: every
// request of the run must be a 2xx, and these are every other way a request
// can end except 1xx and 3xx, which a soak target never sends.
var ZeroThresholds = []string{
	record.HTTP4xx,
	record.HTTP5xx,
	record.StreamResets,
	record.PoolConnectionFailure,
	record.PoolFailureTimeout,
	record.PoolOverflow,
	record.InflightLost,
	record.RequestTimeout,
}

// DefaultRequestTimeout is the request_timeout of a rendered plan. A soak
// target answers in milliseconds, through the mesh too; ten seconds is far
// above that and above a roll's drain, yet short enough that a hung
// response shows as benchmark.request_timeout within seconds, in the live
// record, instead of as http_inflight_lost at the end of an 8-hour run.
const DefaultRequestTimeout = 10 * time.Second

// Options are what a plan is rendered from. Start from DefaultOptions.
type Options struct {
	// Profile is e2e, soak or local; it sets the duration.
	Profile string
	// TargetsFile names the targets file. Run reads it; Render only puts its
	// base name in the plan's header comment.
	TargetsFile string
	// Targets are the parsed targets file.
	Targets []Target
	// Backends is how many engines the pool holds: the 2xx rate floor is
	// written for exactly this many, so a missing node fails every target
	// instead of shrinking the run. 0 with Services means len(Services).
	Backends int
	// DNS is the engines' host:port (a headless Service); exclusive with
	// Services.
	DNS string
	// Services are the engines' host:port addresses; exclusive with DNS.
	Services []string
	// Duration overrides the profile's duration; whole seconds.
	Duration time.Duration
	// Rate is the requests per second every node sends, over all targets.
	Rate int
	// Concurrency is the workers per target per engine.
	Concurrency int
	// Statsd is an IP:port to stream statsd deltas to; empty for none.
	Statsd string
	// MaxPending is max_pending_requests: AutoMaxPending computes it from
	// StallBudget, 0 leaves it out of the plan (the engine's default), and
	// a positive value is written as is.
	MaxPending int
	// StallBudget is how long a stalled connection may hold the largest
	// share's requests before they overflow.
	StallBudget time.Duration
	// FloorPct is the 2xx rate floor, in percent of the smallest share (or,
	// with PerTargetFloors, of each target's own).
	FloorPct float64
	// PerTargetFloors writes each target its own 2xx rate floor, FloorPct %
	// of its share × the backends, as a threshold of the target, instead of
	// one scenario floor from the smallest share (the bash renderer's).
	PerTargetFloors bool
	// Scenario is the scenario's name: [a-z0-9_], default ScenarioName.
	Scenario string
	// UserAgent is the value of the User-Agent header every request
	// carries, default UserAgent.
	UserAgent string
	// RequestTimeout is the plan's request_timeout, default
	// DefaultRequestTimeout; 0 leaves it out (no per-request timeout).
	RequestTimeout time.Duration
	// Protocol is the scenario's protocol: http1 (also when empty),
	// http2, or tcp or udp for raw echo load: the targets' URLs are then
	// tcp:// or udp:// (the scheme selects the mode), the plan carries
	// Body as the message and nothing HTTP-shaped, and its thresholds are
	// the mode's own failure counters and a floor of echoed messages.
	Protocol string
	// Body is the message of a tcp or udp plan, echoed and matched; it
	// must be printable ASCII without quotes or backslashes.
	Body string
	// GRPC renders a grpc: {mode: unary} block instead of a protocol
	// line (gRPC means http2 and POST) and a grpc_error == 0 threshold:
	// each request a unary call to its target's URL with an empty
	// message.
	GRPC bool
}

// The raw protocols of Options.Protocol.
const (
	ProtocolTCP = "tcp"
	ProtocolUDP = "udp"
)

// ZeroThresholdsTCP and ZeroThresholdsUDP are the zero-failure sets of the
// raw modes: every way a message can end but echoed.
var (
	ZeroThresholdsTCP = []string{
		record.TCPDeferred, record.TCPUnavailable, record.TCPEchoMismatch, record.TCPInflightLost,
		record.TCPDrainIncomplete, record.TCPConnectFailures, record.TCPConnectionClosed,
	}
	ZeroThresholdsUDP = []string{
		record.UDPLost, record.UDPSendErrors, record.UDPDeferred, record.UDPUnavailable, record.UDPUnexpected,
	}
)

// raw says the protocol is tcp or udp.
func (o Options) raw() bool { return o.Protocol == ProtocolTCP || o.Protocol == ProtocolUDP }

// zeroThresholds are the counters the plan holds at zero.
func (o Options) zeroThresholds() []string {
	switch o.Protocol {
	case ProtocolTCP:
		return ZeroThresholdsTCP
	case ProtocolUDP:
		return ZeroThresholdsUDP
	}
	if o.GRPC {
		return append(slices.Clone(ZeroThresholds), record.GRPCError)
	}
	return ZeroThresholds
}

// floorCounter is the counter a target's rate floor reads: the messages
// echoed in the raw modes, the 2xx answers otherwise.
func (o Options) floorCounter() string {
	switch o.Protocol {
	case ProtocolTCP:
		return record.TCPMessagesReceived
	case ProtocolUDP:
		return record.UDPDatagramsReceived
	}
	return record.HTTP2xx
}

// DefaultOptions returns the defaults: 60 rps per node, concurrency 1, a
// computed queue with a 2 s stall budget, a 99 % floor.
func DefaultOptions() Options {
	return Options{
		Rate:        60,
		Concurrency: 1,
		MaxPending:  AutoMaxPending,
		StallBudget: 2 * time.Second,
		FloorPct:    99,
		Scenario:    ScenarioName,
		UserAgent:   UserAgent,

		RequestTimeout: DefaultRequestTimeout,
	}
}

// Validate returns every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	switch o.Protocol {
	case "", "http1", "http2":
		if o.Body != "" {
			errs = append(errs, fmt.Errorf("a body goes with protocol tcp or udp only, not %q", o.Protocol))
		}
	case ProtocolTCP, ProtocolUDP:
		if err := checkUserAgent(o.Body); err != nil {
			errs = append(errs, fmt.Errorf("body of a %s plan: %w", o.Protocol, err))
		}
		for _, t := range o.Targets {
			if !strings.HasPrefix(t.URL, o.Protocol+"://") {
				errs = append(errs, fmt.Errorf("target %s: url %q is not %s://", t.Name, t.URL, o.Protocol))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("protocol %q: want http1, http2, tcp or udp", o.Protocol))
	}
	if o.GRPC && o.Protocol != "" && o.Protocol != "http2" {
		errs = append(errs, fmt.Errorf("grpc with protocol %q: gRPC is http2", o.Protocol))
	}
	if len(o.Targets) == 0 {
		errs = append(errs, errors.New("no targets (--targets)"))
	} else if len(o.Targets) > MaxTargets {
		errs = append(errs, fmt.Errorf("%d targets, at most %d", len(o.Targets), MaxTargets))
	}
	return errors.Join(append(errs, o.validateFlags())...)
}

// validateFlags checks everything but the targets.
func (o Options) validateFlags() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, ok := Profiles[o.Profile]; !ok {
		if o.Profile == "" {
			bad("--profile is required (e2e, soak or local)")
		} else {
			bad("--profile must be e2e, soak or local, got %q", o.Profile)
		}
	}
	switch {
	case o.DNS == "" && len(o.Services) == 0:
		bad("one of --dns or --services is required")
	case o.DNS != "" && len(o.Services) > 0:
		bad("--dns and --services are exclusive")
	case o.DNS != "":
		if err := checkHostPort(o.DNS); err != nil {
			bad("--dns: %w", err)
		}
		if o.Backends < 1 {
			bad("--backends must be at least 1 with --dns (the engines the name must resolve to)")
		}
	default:
		seen := map[string]bool{}
		for _, s := range o.Services {
			if err := checkHostPort(s); err != nil {
				bad("--services: %w", err)
			} else if seen[s] {
				bad("--services: %q is listed twice", s)
			}
			seen[s] = true
		}
		if o.Backends != 0 && o.Backends != len(o.Services) {
			bad("--backends %d but --services lists %d engines", o.Backends, len(o.Services))
		}
	}
	if o.Backends < 0 || o.Backends > 10000 {
		bad("--backends must be 1 to 10000, got %d", o.Backends)
	}
	if o.Duration < 0 || o.Duration%time.Second != 0 {
		bad("--duration must be a positive whole number of seconds, got %s", o.Duration)
	}
	if o.Rate < 1 || o.Rate > MaxRate {
		bad("--rate must be 1 to %d, got %d", MaxRate, o.Rate)
	}
	if o.Concurrency < 1 || o.Concurrency > MaxConcurrency {
		bad("--concurrency must be 1 to %d, got %d", MaxConcurrency, o.Concurrency)
	}
	if o.Statsd != "" {
		if err := checkStatsd(o.Statsd); err != nil {
			bad("--statsd: %w", err)
		}
	}
	if o.MaxPending < AutoMaxPending || o.MaxPending > 1_000_000 {
		bad("--max-pending must be 0 to 1000000, got %d", o.MaxPending)
	}
	if o.RequestTimeout < 0 || o.RequestTimeout > maxStallBudget || o.RequestTimeout%time.Millisecond != 0 {
		bad("--request-timeout must be 0 (none) to %s in whole milliseconds, got %s", maxStallBudget, o.RequestTimeout)
	}
	if o.StallBudget <= 0 || o.StallBudget > maxStallBudget {
		bad("--stall-budget must be more than 0 and at most %s, got %s", maxStallBudget, o.StallBudget)
	}
	if !(o.FloorPct > 0 && o.FloorPct <= 100) {
		bad("--floor-pct must be more than 0 and at most 100, got %v", o.FloorPct)
	}
	if !scenarioRE.MatchString(o.Scenario) {
		bad("--scenario must be [a-z0-9_] (it is also a statsd level and the report's label prefix), got %q", o.Scenario)
	}
	if err := checkUserAgent(o.UserAgent); err != nil {
		bad("--user-agent: %w", err)
	}
	return errors.Join(errs...)
}

// checkStatsd accepts an IP literal and a port: the engines' statsd sink
// does not resolve names.
func checkStatsd(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q must be IP:port: %w", s, err)
	}
	if net.ParseIP(host) == nil {
		return fmt.Errorf("%q: %q is not an IP literal (names are not resolved)", s, host)
	}
	if _, err := parsePort(port); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	return nil
}

// checkUserAgent accepts printable ASCII without quotes or backslashes: the
// header is written into a quoted YAML string and sent as is.
func checkUserAgent(s string) error {
	if s == "" || len(s) > maxUserAgent {
		return fmt.Errorf("must be 1 to %d characters, got %d", maxUserAgent, len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return fmt.Errorf("%q: byte %d is not printable ASCII, or is a quote or a backslash", s, i)
		}
	}
	return nil
}

// Rendered is a rendered plan and the numbers it was made of.
type Rendered struct {
	// YAML is the plan file.
	YAML []byte
	// Shares are the per-target rates per node, in file order.
	Shares []Share
	// Backends is the number of engines the floor is written for.
	Backends int
	// Duration is the run's length.
	Duration time.Duration
	// MaxPending is the max_pending_requests written, 0 for none.
	MaxPending int
	// Floor is the scenario's 2xx rate floor as written in its threshold,
	// from the smallest share; empty with PerTargetFloors.
	Floor string
	// Floors are the targets' own 2xx rate floors as written, in file
	// order, with PerTargetFloors; nil without.
	Floors []string
}

// Render validates the options, splits the rate and renders the v1 plan.
func Render(o Options) (*Rendered, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	shares, err := ComputeShares(o.Targets, o.Rate, o.Concurrency)
	if err != nil {
		return nil, err
	}
	r := &Rendered{Shares: shares, Backends: o.Backends, Duration: o.Duration}
	if r.Backends == 0 {
		r.Backends = len(o.Services)
	}
	if r.Duration == 0 {
		r.Duration = Profiles[o.Profile]
	}
	rps := r.rps()
	r.MaxPending = o.MaxPending
	if r.MaxPending == AutoMaxPending {
		r.MaxPending = MaxPendingFor(maxInt(rps), o.Concurrency, o.StallBudget)
	}
	if o.raw() {
		r.MaxPending = 0 // a raw message finding no room is counted, never queued
	}
	if o.PerTargetFloors {
		r.Floors = make([]string, len(rps))
		for i, share := range rps {
			if r.Floors[i], err = FloorFor(share, r.Backends, o.FloorPct); err != nil {
				return nil, err
			}
		}
	} else if r.Floor, err = FloorFor(minInt(rps), r.Backends, o.FloorPct); err != nil {
		return nil, err
	}
	r.YAML = r.plan(o)
	return r, nil
}

// MaxPendingFor is ceil(share / concurrency × budget): the requests one
// worker sends while its connection is stalled for budget, which the queue
// must hold so a stall that short is latency, not pool_overflow.
func MaxPendingFor(share, concurrency int, budget time.Duration) int {
	num := int64(share) * int64(budget)
	den := int64(concurrency) * int64(time.Second)
	return int((num + den - 1) / den)
}

// FloorFor is the 2xx rate floor of the pool for a share: pct % of share on
// each of backends nodes. Rate thresholds are judged on pool totals. A
// scenario's thresholds apply to all its targets alike, so a scenario floor
// is written for the smallest share; a target's own floor for its share. It
// is computed exactly and printed with two decimals as the bash renderer
// prints it (0.99 × 20 × 2 is "39.60", 100 % of 9 × 2 is "18.00"), or with
// as many more as it takes to stay exact (99.9 % of 1 is "0.999"): a floor
// is never rounded.
func FloorFor(share, backends int, pct float64) (string, error) {
	p, ok := new(big.Rat).SetString(strconv.FormatFloat(pct, 'f', -1, 64))
	if !ok || p.Sign() <= 0 {
		return "", fmt.Errorf("floor percent %v is not a positive number", pct)
	}
	f := new(big.Rat).Mul(p, big.NewRat(int64(share)*int64(backends), 100))
	// pct is a terminating decimal, so f has at most a few more digits than
	// pct; 40 digits is exact for every float64 FormatFloat prints in 'f'.
	s := f.FloatString(40)
	whole, frac, _ := strings.Cut(s, ".")
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return whole + "." + frac, nil
}

// plan writes the YAML by hand so that its layout, its comments and its
// spellings (durations as strings, concurrency as a string) are exactly the
// contract's.
func (r *Rendered) plan(o Options) []byte {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	rps := r.rps()
	source := "the given targets"
	if o.TargetsFile != "" {
		source = filepath.Base(o.TargetsFile)
	}
	p("# Rendered by sortie-plan from %s; edit that file and render again.\n", oneLine(source))
	p("# Profile %s: %d rps per node over %s (%s), %s, concurrency %d.\n",
		o.Profile, o.Rate, plural(len(r.Shares), "target"), SplitString(rps), plural(r.Backends, "backend"), o.Concurrency)
	switch {
	case o.raw():
		p("# No max_pending_requests: a %s message that finds no room is counted, never queued.\n", o.Protocol)
	case o.MaxPending == AutoMaxPending:
		p("# max_pending_requests %d = ceil(largest share %d rps / concurrency %d x stall budget %s).\n",
			r.MaxPending, maxInt(rps), o.Concurrency, o.StallBudget)
	case o.MaxPending == 0:
		p("# No max_pending_requests: the engine's default queue.\n")
	default:
		p("# max_pending_requests %d as asked.\n", r.MaxPending)
	}
	pct := strconv.FormatFloat(o.FloorPct, 'f', -1, 64)
	if o.raw() {
		p("# Raw %s echo: the floors count messages echoed (%s), not 2xx answers.\n", o.Protocol, o.floorCounter())
	}
	if o.PerTargetFloors {
		p("# 2xx rate floor of each target = %s%% of its own share x %s, on the target.\n",
			pct, plural(r.Backends, "backend"))
	} else {
		p("# 2xx rate floor %s = %s%% of the smallest share (%d rps) x %s.\n",
			r.Floor, pct, minInt(rps), plural(r.Backends, "backend"))
	}
	p("version: v1\n")
	p("pools:\n")
	p("  - name: %s\n", PoolName)
	if o.DNS != "" {
		p("    dns: %s\n", quote(o.DNS))
	} else {
		qs := make([]string, len(o.Services))
		for i, s := range o.Services {
			qs[i] = quote(s)
		}
		p("    services: [%s]\n", strings.Join(qs, ", "))
	}
	if o.Statsd != "" {
		// At the top level with a 5 s flush, where the bash plan has it.
		p("stats: {flush_interval: %s, prefix: %s, statsd: {address: %s}}\n",
			seconds(StatsFlush), StatsPrefix, quote(o.Statsd))
	}
	p("scenarios:\n")
	p("  - name: %s\n", o.Scenario)
	p("    pool: %s\n", PoolName)
	r.httpFields(o, p)
	p("    executor: {type: constant-rate, rate: %d, duration: %s, per_backend: true, open_loop: true}\n",
		o.Rate, seconds(r.Duration))
	p("    # weight is each target's rps per node; they add up to the rate.\n")
	p("    targets:\n")
	for i, s := range r.Shares {
		own := ""
		if r.Floors != nil {
			own = fmt.Sprintf(", thresholds: [%s]", quote(floorExpr(o.floorCounter(), r.Floors[i])))
		}
		p("      - {name: %s, url: %s, weight: %d%s}\n", scalar(s.Name), quote(s.URL), s.RPS, own)
	}
	p("    thresholds:\n")
	for _, c := range o.zeroThresholds() {
		p("      - %s\n", quote("counter:"+c+" == 0"))
	}
	if r.Floors == nil {
		p("      - %s\n", quote(floorExpr(o.floorCounter(), r.Floor)))
	}
	return []byte(b.String())
}

// httpFields writes the scenario's protocol, concurrency, queue, headers
// and request timeout; a tcp or udp plan has concurrency and its body
// only, since the plan refuses HTTP fields with raw targets.
func (r *Rendered) httpFields(o Options, p func(string, ...any)) {
	if o.raw() {
		p("    concurrency: %s\n", quote(strconv.Itoa(o.Concurrency)))
		p("    body: %s\n", quote(o.Body))
		return
	}
	proto := o.Protocol
	if proto == "" {
		proto = "http1"
	}
	if o.GRPC {
		p("    grpc: {mode: unary}\n")
	} else {
		p("    protocol: %s\n", proto)
	}
	p("    concurrency: %s\n", quote(strconv.Itoa(o.Concurrency)))
	if r.MaxPending > 0 {
		p("    max_pending_requests: %d\n", r.MaxPending)
	}
	p("    headers: [%s]\n", quote("User-Agent: "+o.UserAgent))
	if o.RequestTimeout > 0 {
		p("    request_timeout: %s\n", o.RequestTimeout)
	}
}

// floorExpr is the threshold of a rate floor on counter.
func floorExpr(counter, floor string) string { return "rate:" + counter + " >= " + floor }

func (r *Rendered) rps() []int {
	rps := make([]int, len(r.Shares))
	for i, s := range r.Shares {
		rps[i] = s.RPS
	}
	return rps
}

// seconds writes a whole-second duration the way plans spell it: "900s".
func seconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) + "s" }

// quote writes a YAML double-quoted scalar. Every string quoted here was
// checked to be printable ASCII without quotes or backslashes, so Go's
// quoting and YAML's agree; strconv.Quote stays as a guard.
func quote(s string) string { return strconv.Quote(s) }

// scalar writes s plain when YAML reads it back as the same string, and
// quoted when it would read as something else (a number, a boolean, null).
func scalar(s string) string {
	out, err := yaml.Marshal(s)
	if err != nil {
		return quote(s)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// oneLine keeps a file name from breaking out of a comment line.
func oneLine(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func maxInt(xs []int) int {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func minInt(xs []int) int {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}
