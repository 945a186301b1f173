// Package plan reads, validates and compiles sortie plans (version v1).
//
// A plan names pools of engines, scenarios that run load from them, and the
// thresholds a run must hold. Parse decodes the YAML strictly (unknown fields
// are errors), fills every scenario's unset fields from defaults, checks
// every rule, and reports every problem at once, each as file:line:col.
// Compile turns the plan into the engine requests of each stage, once the
// pools' backends are known.
//
// Rate arithmetic is exact or refused. An engine's rate is a whole number of
// requests per second per worker, so a scenario's rate must split without
// remainder over its backends (unless per_backend), its weighted targets and
// its workers (concurrency), and each worker's rate times the duration must
// be a whole count of requests. A plan that breaks this is refused with the
// nearest values that would work; nothing is rounded.
//
// The schema, as written in a plan:
//
//	version: v1
//	pools:           # exactly one of services or dns per pool
//	  - {name: nodes, services: ["10.0.0.1:8443", "10.0.0.2:8443"]}
//	  - {name: ds, dns: "engines.ns.svc.cluster.local:8443"}
//	stats: {...}      # optional, for every scenario without its own
//	defaults: {...}   # a scenario without name: fills unset fields
//	scenarios:
//	  - name: mesh                  # [A-Za-z0-9_-], unique
//	    pool: nodes
//	    target: http://svc/         # or targets: [{name, url, weight, thresholds}]
//	    method: GET                 # default GET
//	    headers: ["User-Agent: sortie"]
//	    body: "..."                 # or body_file, relative to the plan
//	    protocol: http1             # http1 (default) or http2; http3 validates, a run refuses it
//	    max_concurrent_streams: 100 # http2: streams per connection; default 100, capped by the server
//	    connections: 100            # per worker; default 100
//	    concurrency: "1"            # workers per backend, a string
//	    max_pending_requests: 0     # per worker; default 0
//	    timeout: 30s                # connect and final drain; default 30s
//	    request_timeout: 10s        # per response, from its write; default none
//	    max_lateness: 5s            # drop requests due longer ago; default none
//	    tls: {ca_file, cert_file, key_file, server_name, insecure_skip_verify}
//	    stats: {address: "10.96.0.7:8125", prefix: sortie, backend: name|address, flush_interval: 5s}
//	    executor:
//	      type: constant-rate       # or ramping-rate (ramp_time), staircase (stages)
//	      rate: 60
//	      duration: 15m
//	      per_backend: false        # rate is per backend instead of the pool's
//	      open_loop: false
//	    thresholds: ["counter:benchmark.http_5xx == 0"]
//	    grpc: {mode: unary}         # or bidi-stream with streams, max_inflight_per_stream,
//	                                # drain_duration; implies http2 + POST; a run refuses it
//	    websocket: {streams: 20, max_inflight_per_stream: 256, drain_duration: 500ms, binary: false}
//	                                # implies http1 + GET; a run refuses it
//	    tcp: {connections: 1, max_inflight_per_connection: 256, expect_echo: true, drain_duration: 500ms}
//	    udp: {max_inflight: 256, timeout: 1s}
//	thresholds: [...] # added to every scenario's
//
// A tcp:// or tcps:// target (with an explicit port) selects raw TCP echo
// load, which the tcp block tunes: each worker keeps tcp.connections
// connections and writes the body on them round-robin, each message timed
// against its echo. A udp:// target selects UDP echo load, tuned by the
// udp block: one datagram per message, timed against the one that comes
// back with its sequence number; it needs a body. method, headers,
// protocol, connections, max_pending_requests, request_timeout and
// thresholds on HTTP counters are errors with either; tls only goes with
// tcps.
//
// A target of targets may carry thresholds of its own, in the same
// expressions as a scenario's, judged on that target's executions only:
//
//	targets:
//	  - {name: svc-1, url: "http://svc-1/", weight: 9, thresholds: ["rate:benchmark.http_2xx >= 17.82"]}
//	  - {name: uds-echo, url: "http://uds-echo/", weight: 3, thresholds: ["rate:benchmark.http_2xx >= 5.94"]}
//
// They are judged in addition to the scenario's thresholds (its own, the
// defaults' and the plan's), except that a target threshold replaces, for
// that target, every scenario threshold on the same value (the same kind
// and counter, or statistic and field) that bounds it from a side the
// target's bounds too: < and <= bound a value from above, > and >= from
// below, == from both, and != replaces only !=. So a target's
// "rate:benchmark.http_2xx >= 17.82" replaces the scenario's
// "rate:benchmark.http_2xx >= 5.94", and "counter:benchmark.stream_resets
// <= 3" the scenario's "counter:benchmark.stream_resets == 0"; every other
// scenario threshold still applies. A weighted plan thus gives each target
// the 2xx floor of its own share, where one scenario floor can only be the
// smallest share's. A single target (target: url) has no thresholds of its
// own: write them on the scenario.
//
// Durations are strings with a unit (30s, 15m, 8h30m); a bare number where a
// duration belongs is an error. Within defaults, target/targets and
// body/body_file each fill as one unit; executor fills field by field (only
// the fields its type uses); tls and stats fill whole. stats may also be set
// at the top level, for every scenario that sets none (itself or through
// defaults), and its address may be written statsd: {address: ...}, as the
// plans of the sortie + Nighthawk stack write it.
//
// Engine requests carry stats.scenario = the scenario's name and
// stats.target = the target's name (the scenario's for a single target, with
// _stage_N appended for a staircase stage); stats.backend is left empty (the
// engine's --backend-name) or, with backend: address, the engine's address
// reduced to [a-z0-9_].
package plan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sortie-soak/sortie/driver/threshold"
	"github.com/sortie-soak/sortie/record"
)

// Version is the only plan schema version this package reads.
const Version = "v1"

// Executor types.
const (
	ConstantRate = "constant-rate"
	RampingRate  = "ramping-rate"
	Staircase    = "staircase"
)

// Stats backend naming modes.
const (
	// StatsBackendName names the backend in metrics by the engine's
	// --backend-name (a node name).
	StatsBackendName = "name"
	// StatsBackendAddress names it by its address, reduced to [a-z0-9_].
	StatsBackendAddress = "address"
)

// Defaults of a scenario's unset fields.
const (
	DefaultMethod      = "GET"
	DefaultProtocol    = "http1"
	DefaultConnections = 100
	DefaultConcurrency = 1
	DefaultTimeout     = 30 * time.Second
	DefaultStatsPrefix = "sortie"
)

// MaxSpan bounds what an execution asks of the driver's clock, duration +
// timeout (a staircase's stages together): 876000h, a hundred years. The
// driver adds its drain and grace to it for a deadline; a span near the
// 292 years a time.Duration holds would overflow that sum and put the
// deadline in the past.
const MaxSpan = 876000 * time.Hour

// Limits an engine sets on what it accepts; a plan beyond them is refused
// before any load rather than by every engine at the start.
const (
	// MaxConcurrency is the most workers an engine runs per execution.
	MaxConcurrency = 256
	// MinFlushInterval is the shortest statsd flush interval an engine takes.
	MinFlushInterval = 10 * time.Millisecond
)

// MaxBody is the largest request body a plan may carry: an engine takes an
// execution as one gRPC message of at most 4 MiB, TLS files and all.
const MaxBody = 3 << 20

// Plan is a validated plan with defaults applied.
type Plan struct {
	// File is the name the plan was parsed from, for messages.
	File string
	// Pools in file order.
	Pools []Pool
	// Scenarios in file order, each with its defaults applied and the
	// plan-level thresholds appended to its own.
	Scenarios []Scenario
}

// Pool is a set of engines.
type Pool struct {
	Name string
	// Services are engine addresses (host:port), used as written.
	Services []string
	// DNS is host:port: the run resolves host once, at its start, and drives
	// every address at port.
	DNS string
}

// Scenario is one unit of load: one execution per target (and per stage of
// a staircase), started together on every backend of its pool.
type Scenario struct {
	Name string
	Pool string
	// Targets holds one entry per execution. A scenario written with a
	// single target has one entry with an empty Name and weight 1.
	Targets []Target
	Method  string
	Headers []Header
	Body    []byte
	// BodyFile is the body's file as written in the plan; empty for an
	// inline body.
	BodyFile string
	// Protocol is http1, http2 or http3 (the last valid, not yet driven:
	// see Undriven); http2 with a grpc block, http1 with a websocket one.
	Protocol string
	// MaxConcurrentStreams caps the streams of each HTTP/2 connection;
	// 0: the server's SETTINGS_MAX_CONCURRENT_STREAMS alone.
	MaxConcurrentStreams uint32
	// GRPC and WebSocket are nil unless the plan sets them; a run refuses
	// grpc bidi-stream (Undriven).
	GRPC      *GRPC
	WebSocket *WebSocket
	// Connections caps each worker's connections.
	Connections uint32
	// Concurrency is the number of workers per backend and target, each
	// with its own pacer and connection pool.
	Concurrency uint32
	// MaxPendingRequests is each worker's queue of requests waiting for a
	// connection.
	MaxPendingRequests uint32
	// Timeout bounds a connect and the final drain.
	Timeout time.Duration
	// RequestTimeout bounds each response from its request's write
	// (benchmark.request_timeout); 0: none.
	RequestTimeout time.Duration
	// MaxLateness: a request due longer ago than this when its worker
	// gets to it is not sent (benchmark.late_dropped); 0: none.
	MaxLateness time.Duration
	// Mode is ModeHTTP, ModeTCP or ModeUDP, as the targets' scheme says.
	// In the last two Method, Protocol and Headers are empty and
	// Connections and MaxPendingRequests zero.
	Mode string
	// TCP is set, defaults applied, in ModeTCP; UDP in ModeUDP.
	TCP *TCP
	UDP *UDP
	// TLS is nil when the plan sets none.
	TLS *TLS
	// Stats is nil when the plan sets none.
	Stats    *Stats
	Executor Executor
	// Thresholds are the scenario's own (or the defaults') followed by the
	// plan's.
	Thresholds []threshold.Threshold

	pos scenarioPos
}

// scenarioPos keeps where the values the compiler checks again were written,
// so that a split that fails once the pool is resolved is still reported at
// its place.
type scenarioPos struct {
	at       loc
	pool     loc
	rate     loc
	duration loc
	ramp     loc
	stages   []stagePos
	// protocol, grpc and websocket are where those were written, for
	// Undriven.
	protocol, grpc, websocket loc
}

type stagePos struct{ rate, duration loc }

// Target is one target of a scenario.
type Target struct {
	// Name is [a-z0-9-]; empty for a scenario's single target.
	Name   string
	URL    string
	Weight uint32
	// Thresholds are the target's own, judged on its executions with the
	// scenario's; each replaces the scenario's thresholds it bounds the
	// same way (see ThresholdsFor).
	Thresholds []threshold.Threshold
}

// Header is one request header.
type Header struct {
	Name, Value string
}

// TLS is a scenario's TLS settings, with the files already read.
type TLS struct {
	// The files as written in the plan (relative to it).
	CAFile, CertFile, KeyFile string
	// Their PEM contents.
	CAPEM, CertPEM, KeyPEM []byte
	ServerName             string
	InsecureSkipVerify     bool
}

// Stats asks engines to send statsd deltas.
type Stats struct {
	// Address is an IP literal and port.
	Address string
	Prefix  string
	// Backend is StatsBackendName or StatsBackendAddress.
	Backend string
	// FlushInterval is 0 for the engine's default.
	FlushInterval time.Duration
}

// Executor shapes a scenario's rate over time.
type Executor struct {
	// Type is ConstantRate, RampingRate or Staircase.
	Type string
	// Rate is requests per second: the pool's total, or each backend's when
	// PerBackend. Zero for a staircase.
	Rate uint32
	// Duration is the whole run, ramp included. Zero for a staircase.
	Duration time.Duration
	// RampTime is the linear ramp from 0 to Rate (ramping-rate only).
	RampTime time.Duration
	// Stages of a staircase, run one after another.
	Stages     []ExecutorStage
	PerBackend bool
	OpenLoop   bool
}

// ExecutorStage is one step of a staircase.
type ExecutorStage struct {
	Rate     uint32
	Duration time.Duration
}

// Pool returns the pool of that name; the zero Pool if there is none.
func (p *Plan) Pool(name string) Pool {
	for _, pl := range p.Pools {
		if pl.Name == name {
			return pl
		}
	}
	return Pool{}
}

// Placeholders gives each pool the backends validate and compile use when
// nothing is resolved: a services pool its services, a dns pool the one
// placeholder backend host:port as written.
func (p *Plan) Placeholders() map[string][]string {
	out := make(map[string][]string, len(p.Pools))
	for _, pl := range p.Pools {
		if pl.DNS != "" {
			out[pl.Name] = []string{pl.DNS}
		} else {
			out[pl.Name] = append([]string(nil), pl.Services...)
		}
	}
	return out
}

// MaxBytes is the largest plan file read, 8 MiB: a plan of a thousand
// targets is some hundred KiB, and yaml.v3 holds a plan in memory many times
// over. A larger file (or /dev/zero) is refused before it is parsed.
const MaxBytes = 8 << 20

// Load reads and parses the plan file at path.
func Load(path string) (*Plan, error) { return LoadContext(context.Background(), path) }

// LoadContext reads and parses the plan file at path; the read ends when
// ctx ends, and a file over MaxBytes is a *record.TooLargeError.
func LoadContext(ctx context.Context, path string) (*Plan, error) {
	data, err := Read(ctx, path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Read reads the plan file at path, at most MaxBytes of it, as LoadContext
// does, for a caller that keeps the bytes.
func Read(ctx context.Context, path string) ([]byte, error) {
	data, err := record.ReadInput(ctx, path, "plan", MaxBytes)
	var tooBig *record.TooLargeError
	if err != nil && !errors.As(err, &tooBig) {
		return nil, fmt.Errorf("read plan %s: %w", path, err)
	}
	return data, err
}

// Parse decodes, defaults and validates a plan. filename names the plan in
// errors, and body_file and TLS files are read relative to its directory.
// Every problem is reported, each an *Error with its position, joined with
// errors.Join in the order of the file.
func Parse(filename string, data []byte) (*Plan, error) {
	errs := &errList{file: filename}
	if len(data) > MaxBytes {
		return nil, &record.TooLargeError{What: "plan", Path: filename, Max: MaxBytes}
	}
	root, err := decodeYAML(data)
	if err != nil {
		errs.addMsg(yamlErrorLoc(err), yamlErrorMsg(err))
		return nil, errs.err()
	}
	d := &decoder{errs: errs}
	raw := d.plan(root)
	b := &builder{errs: errs, dir: filepath.Dir(filename)}
	p := b.build(raw)
	p.File = filename
	if err := errs.err(); err != nil {
		return nil, err
	}
	return p, nil
}

// decodeYAML parses exactly one YAML document. yaml.v3 is third-party code
// fed outside input: a panic in it becomes an error rather than a crash.
func decodeYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errEmpty
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &secondDocError{line: extra.Line}
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return nil, errEmpty
}

var errEmpty = errors.New("the plan is empty")

type secondDocError struct{ line int }

func (e *secondDocError) Error() string {
	return "a plan file holds one YAML document; a second one starts here"
}

// yamlLineRE finds the line yaml.v3 puts in its syntax errors.
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlErrorLoc is where a YAML syntax error is: its line when yaml.v3 says
// (it gives no column), else the start of the file.
func yamlErrorLoc(err error) loc {
	var sd *secondDocError
	if errors.As(err, &sd) {
		return loc{line: sd.line, col: 1}
	}
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil {
			return loc{line: n, col: 1}
		}
	}
	return loc{line: 1, col: 1}
}

// yamlErrorMsg is the error without yaml.v3's "yaml: line N:" prefix, which
// the position already says.
func yamlErrorMsg(err error) string {
	if errors.Is(err, errEmpty) {
		return err.Error()
	}
	msg := yamlLineRE.ReplaceAllString(err.Error(), "")
	msg = strings.TrimPrefix(msg, "yaml: ")
	return "invalid YAML: " + msg
}
