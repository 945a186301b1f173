package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sortie-soak/sortie/driver/threshold"
	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
)

// Compiled is a plan turned into engine requests for known backends.
type Compiled struct {
	Scenarios []CompiledScenario
}

// CompiledScenario is one scenario's stages, in run order.
type CompiledScenario struct {
	Name string
	Pool Pool
	// Backends are the engine addresses every execution is dispatched to,
	// in the order given to Compile.
	Backends []string
	Stages   []Stage
	// Spec is the scenario as planned, for descriptions.
	Spec *Scenario
}

// Stage is a set of executions started together, with one start time, on
// every backend; a scenario's stages run one after another.
type Stage struct {
	// Name is "" for a constant-rate or ramping-rate scenario, "stage-N"
	// (from 1) for a staircase stage.
	Name       string
	Executions []Execution
}

// Execution is one target (of one stage) on every backend of the pool.
type Execution struct {
	// Label is "<scenario>/<target>" ("<scenario>" for a single target),
	// with "/stage-N" appended for a staircase stage.
	Label    string
	Scenario string
	// Target is the target's name; empty for a single target.
	Target string
	// Rate is the planned requests per second as the report shows it: each
	// backend's when PerBackend, else the pool's.
	Rate       float64
	PerBackend bool
	Duration   time.Duration
	// Ramp is the ramp included in Duration (ramping-rate only).
	Ramp time.Duration
	// Timeout is what the execution may take after Duration: the
	// scenario's timeout, and in the TCP and UDP modes their drain too.
	Timeout time.Duration
	// Thresholds are judged on this execution: the scenario's and its
	// target's own (Scenario.ThresholdsFor).
	Thresholds []threshold.Threshold
	// Requests holds the engine request per backend address. execution_id
	// and start_time are left for the run to set.
	Requests map[string]*enginev1.ExecuteRequest
	// Planned is the number of requests each backend is asked for.
	Planned map[string]uint64
}

// Compile turns the plan into engine requests, given each pool's backends
// (pool name to "ip:port" addresses; the run resolves dns pools first, and
// Placeholders stands in when nothing is resolved). It fails, with every
// problem and where it was written, when a pool has no backends or a rate
// that is the pool's does not split exactly over them.
func (p *Plan) Compile(backends map[string][]string) (*Compiled, error) {
	errs := &errList{file: p.File}
	c := &Compiled{}
	for i := range p.Scenarios {
		s := &p.Scenarios[i]
		in := func(at loc, msg string) {
			if at.path != "" {
				msg = at.path + ": " + msg
			}
			errs.addMsg(at, fmt.Sprintf("scenario %s: %s", s.Name, msg))
		}
		bs := backends[s.Pool]
		if len(bs) == 0 {
			in(s.pos.pool, fmt.Sprintf("pool %s has no backends", s.Pool))
			continue
		}
		if dup := firstDuplicate(bs); dup != "" {
			in(s.pos.pool, fmt.Sprintf("pool %s lists backend %s twice", s.Pool, dup))
			continue
		}
		units, serrs := s.split(len(bs))
		if len(serrs) > 0 {
			for _, e := range serrs {
				in(e.at, e.msg)
			}
			continue
		}
		cs := CompiledScenario{Name: s.Name, Pool: p.Pool(s.Pool), Backends: append([]string(nil), bs...), Spec: s}
		for si, stageName := range s.stageNames() {
			st := Stage{Name: stageName}
			duration, ramp := s.Executor.Duration, s.Executor.RampTime
			if s.Executor.Type == Staircase {
				duration, ramp = s.Executor.Stages[si].Duration, 0
			}
			for ti, t := range s.Targets {
				u := units[si][ti]
				ex := Execution{
					Label:      label(s.Name, t.Name, stageName),
					Scenario:   s.Name,
					Target:     t.Name,
					Rate:       u.rate,
					PerBackend: s.Executor.PerBackend,
					Duration:   duration,
					Ramp:       ramp,
					Timeout:    s.Timeout + s.messageDrain(),
					Thresholds: s.ThresholdsFor(t),
					Requests:   make(map[string]*enginev1.ExecuteRequest, len(bs)),
					Planned:    make(map[string]uint64, len(bs)),
				}
				base := s.request(t, stageName, ex, u.workerRate)
				for _, addr := range bs {
					req := proto.CloneOf(base)
					if req.Stats != nil && s.Stats.Backend == StatsBackendAddress {
						req.Stats.Backend = SanitizeMetricName(addr)
					}
					ex.Requests[addr] = req
					ex.Planned[addr] = u.planned
				}
				st.Executions = append(st.Executions, ex)
			}
			cs.Stages = append(cs.Stages, st)
		}
		c.Scenarios = append(c.Scenarios, cs)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return c, nil
}

func firstDuplicate(xs []string) string {
	seen := make(map[string]bool, len(xs))
	for _, x := range xs {
		if seen[x] {
			return x
		}
		seen[x] = true
	}
	return ""
}

// request builds the engine request of one target, the same for every
// backend but for stats.backend.
func (s *Scenario) request(t Target, stageName string, ex Execution, workerRate uint32) *enginev1.ExecuteRequest {
	req := &enginev1.ExecuteRequest{
		Label:              ex.Label,
		Url:                t.URL,
		Method:             s.Method,
		Body:               s.Body,
		Rate:               workerRate,
		Workers:            s.Concurrency,
		Duration:           durationpb.New(ex.Duration),
		OpenLoop:           s.Executor.OpenLoop,
		Connections:        s.Connections,
		MaxPendingRequests: s.MaxPendingRequests,
		Timeout:            durationpb.New(s.Timeout),
	}
	if s.Protocol == ProtocolHTTP2 {
		req.Protocol = enginev1.Protocol_HTTP2
		req.MaxConcurrentStreams = s.MaxConcurrentStreams
	}
	if g := s.GRPC; g != nil && g.Mode == GRPCUnary {
		req.Grpc = &enginev1.GRPC{Mode: enginev1.GRPC_UNARY}
	}
	if s.RequestTimeout > 0 {
		req.RequestTimeout = durationpb.New(s.RequestTimeout)
	}
	if t := s.TCP; t != nil {
		echo := t.ExpectEcho
		req.Tcp = &enginev1.TCP{Connections: t.Connections, MaxInflightPerConnection: t.MaxInflightPerConnection,
			ExpectEcho: &echo, DrainDuration: durationpb.New(t.DrainDuration)}
	}
	if w := s.WebSocket; w != nil {
		// Streams are per backend and split evenly over the workers (the
		// plan checks they divide); the engine takes them per worker.
		req.Websocket = &enginev1.WebSocket{Streams: w.Streams / max(1, s.Concurrency), MaxInflightPerStream: w.MaxInflightPerStream,
			DrainDuration: durationpb.New(w.DrainDuration), Binary: w.Binary}
	}
	if u := s.UDP; u != nil {
		req.Udp = &enginev1.UDP{MaxInflight: u.MaxInflight, Timeout: durationpb.New(u.Timeout)}
	}
	if s.MaxLateness > 0 {
		req.MaxLateness = durationpb.New(s.MaxLateness)
	}
	if ex.Ramp > 0 {
		req.Ramp = durationpb.New(ex.Ramp)
	}
	for _, h := range s.Headers {
		req.Headers = append(req.Headers, &enginev1.Header{Name: h.Name, Value: h.Value})
	}
	if s.TLS != nil {
		req.Tls = &enginev1.TLS{
			CaPem:              s.TLS.CAPEM,
			CertPem:            s.TLS.CertPEM,
			KeyPem:             s.TLS.KeyPEM,
			ServerName:         s.TLS.ServerName,
			InsecureSkipVerify: s.TLS.InsecureSkipVerify,
		}
	}
	if s.Stats != nil {
		req.Stats = &enginev1.Stats{
			Address:  s.Stats.Address,
			Prefix:   s.Stats.Prefix,
			Scenario: s.Name,
			Target:   statsTarget(s.Name, t.Name, stageName),
		}
		if s.Stats.FlushInterval > 0 {
			req.Stats.FlushInterval = durationpb.New(s.Stats.FlushInterval)
		}
	}
	return req
}

// statsTarget is the target element of metric names: the target's name (the
// scenario's for a single target), with a staircase stage appended as
// _stage_N so that every metric name keeps the same number of elements.
func statsTarget(scenario, target, stageName string) string {
	name := target
	if name == "" {
		name = scenario
	}
	if stageName != "" {
		name += "_" + strings.ReplaceAll(stageName, "-", "_")
	}
	return name
}

// SanitizeMetricName reduces s to [a-z0-9_] for a metric name element:
// lowercase, and every other character an underscore (10.0.0.7:8443 is
// 10_0_0_7_8443).
func SanitizeMetricName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// The JSON `sortie compile` prints.
type (
	jsonCompiled struct {
		Scenarios []jsonScenario `json:"scenarios"`
	}
	jsonScenario struct {
		Name     string      `json:"name"`
		Pool     string      `json:"pool"`
		DNS      string      `json:"dns,omitempty"`
		Backends []string    `json:"backends"`
		Stages   []jsonStage `json:"stages"`
	}
	jsonStage struct {
		Name       string          `json:"name,omitempty"`
		Executions []jsonExecution `json:"executions"`
	}
	jsonExecution struct {
		Label      string        `json:"label"`
		Rate       float64       `json:"rate"`
		PerBackend bool          `json:"per_backend"`
		Thresholds []string      `json:"thresholds,omitempty"`
		Requests   []jsonRequest `json:"requests"`
	}
	jsonRequest struct {
		Backend string          `json:"backend"`
		Planned uint64          `json:"planned"`
		Request json.RawMessage `json:"request"`
	}
)

// WriteRequests writes the engine requests of every execution and backend
// as one indented JSON document: scenarios, stages and executions in run
// order, backends in the compiled order, each request in protojson with the
// proto's field names. The output is stable for golden files.
func (c *Compiled) WriteRequests(w io.Writer) error {
	out := jsonCompiled{Scenarios: []jsonScenario{}}
	marshal := protojson.MarshalOptions{UseProtoNames: true}
	for _, cs := range c.Scenarios {
		js := jsonScenario{Name: cs.Name, Pool: cs.Pool.Name, DNS: cs.Pool.DNS, Backends: cs.Backends}
		for _, st := range cs.Stages {
			jst := jsonStage{Name: st.Name}
			for _, ex := range st.Executions {
				je := jsonExecution{Label: ex.Label, Rate: ex.Rate, PerBackend: ex.PerBackend}
				for _, t := range ex.Thresholds {
					je.Thresholds = append(je.Thresholds, t.Expr)
				}
				for _, b := range cs.Backends {
					raw, err := marshal.Marshal(ex.Requests[b])
					if err != nil {
						return fmt.Errorf("encode request %s for %s: %w", ex.Label, b, err)
					}
					// protojson varies its spacing on purpose; compacting
					// makes the output stable.
					var buf bytes.Buffer
					if err := json.Compact(&buf, raw); err != nil {
						return fmt.Errorf("encode request %s for %s: %w", ex.Label, b, err)
					}
					je.Requests = append(je.Requests, jsonRequest{Backend: b, Planned: ex.Planned[b], Request: buf.Bytes()})
				}
				jst.Executions = append(jst.Executions, je)
			}
			js.Stages = append(js.Stages, jst)
		}
		out.Scenarios = append(out.Scenarios, js)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // thresholds hold < and >
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("encode requests: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write requests: %w", err)
	}
	return nil
}

// Unjudged lists the labels of the executions with no threshold to judge
// them: a plan that declares none judges nothing but the engines' own
// failures, and the run fails such an execution only when no request got a
// 2xx. A caller warns of them before any load.
func (c *Compiled) Unjudged() []string {
	var out []string
	for _, cs := range c.Scenarios {
		for _, st := range cs.Stages {
			for _, ex := range st.Executions {
				if len(ex.Thresholds) == 0 {
					out = append(out, ex.Label)
				}
			}
		}
	}
	return out
}
