package plan

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sortie-soak/sortie/driver/threshold"
)

// Describe writes what `sortie validate` prints: per scenario its pool and
// backends, executor, request settings, each execution with its rate, worker
// rate, duration and planned requests, stage by stage, and the thresholds
// with where each is judged. The text is stable (golden-tested); it is for
// people, not for parsing.
func (c *Compiled) Describe(w io.Writer) {
	execs := 0
	for _, cs := range c.Scenarios {
		for _, st := range cs.Stages {
			execs += len(st.Executions)
		}
	}
	fmt.Fprintf(w, "%s, %s\n", plural(len(c.Scenarios), "scenario"), plural(execs, "execution"))
	for _, cs := range c.Scenarios {
		fmt.Fprintln(w)
		describeScenario(w, cs)
	}
}

func describeScenario(w io.Writer, cs CompiledScenario) {
	s := cs.Spec
	pool := "pool " + cs.Pool.Name
	if cs.Pool.DNS != "" {
		pool += ", dns " + cs.Pool.DNS
		if len(cs.Backends) == 1 && cs.Backends[0] == cs.Pool.DNS {
			pool += " (not resolved: one placeholder backend)"
		}
	}
	fmt.Fprintf(w, "scenario %s: %s\n", cs.Name, pool)
	fmt.Fprintf(w, "  backends (%d): %s\n", len(cs.Backends), strings.Join(cs.Backends, ", "))

	x := s.Executor
	per := "for the pool"
	if x.PerBackend {
		per = "per backend"
	}
	loop := "closed loop"
	if x.OpenLoop {
		loop = "open loop"
	}
	switch x.Type {
	case ConstantRate:
		fmt.Fprintf(w, "  executor: %s, rate %d %s, duration %v, %s\n", x.Type, x.Rate, per, x.Duration, loop)
	case RampingRate:
		fmt.Fprintf(w, "  executor: %s, rate %d %s after a ramp_time of %v, duration %v (ramp included), %s\n", x.Type, x.Rate, per, x.RampTime, x.Duration, loop)
	case Staircase:
		var total time.Duration
		for _, st := range x.Stages {
			total += st.Duration
		}
		fmt.Fprintf(w, "  executor: %s, %s one after another, rates %s, %v in all, %s\n", x.Type, plural(len(x.Stages), "stage"), per, total, loop)
	}
	switch {
	case s.TCP != nil && s.Mode == ModeTCP:
		echo := "each timed against its echo"
		if !s.TCP.ExpectEcho {
			echo = "no echo expected"
		}
		fmt.Fprintf(w, "  messages: tcp, concurrency %d (workers per backend and target), %d connections per worker, max_inflight_per_connection %d, %s, drain_duration %v, timeout %v\n",
			s.Concurrency, s.TCP.Connections, s.TCP.MaxInflightPerConnection, echo, s.TCP.DrainDuration, s.Timeout)
	case s.UDP != nil && s.Mode == ModeUDP:
		fmt.Fprintf(w, "  messages: udp, concurrency %d (workers per backend and target), one socket per worker, max_inflight %d, timeout %v per datagram\n",
			s.Concurrency, s.UDP.MaxInflight, s.UDP.Timeout)
	default:
		fmt.Fprintf(w, "  requests: %s, %s, concurrency %d (workers per backend and target), connections %d per worker, max_pending_requests %d per worker, timeout %v\n",
			s.Method, s.Protocol, s.Concurrency, s.Connections, s.MaxPendingRequests, s.Timeout)
		if s.MaxConcurrentStreams > 0 {
			fmt.Fprintf(w, "  max_concurrent_streams %d per connection\n", s.MaxConcurrentStreams)
		}
		describeModes(w, s)
	}
	if s.RequestTimeout > 0 {
		fmt.Fprintf(w, "  request_timeout %v: a response not ended that long after its request was written is benchmark.request_timeout\n", s.RequestTimeout)
	}
	if s.MaxLateness > 0 {
		fmt.Fprintf(w, "  max_lateness %v: a request due longer ago when its worker gets to it is not sent, benchmark.late_dropped\n", s.MaxLateness)
	}
	for _, h := range s.Headers {
		fmt.Fprintln(w, strings.TrimRight("  header: "+h.Name+": "+h.Value, " "))
	}
	if s.Body != nil {
		from := ""
		if s.BodyFile != "" {
			from = " from " + s.BodyFile
		}
		fmt.Fprintf(w, "  body: %s%s\n", plural(len(s.Body), "byte"), from)
	}
	if t := s.TLS; t != nil {
		var parts []string
		if t.CAFile != "" {
			parts = append(parts, "ca_file "+t.CAFile)
		}
		if t.CertFile != "" {
			parts = append(parts, "client certificate "+t.CertFile+" with key "+t.KeyFile)
		}
		if t.ServerName != "" {
			parts = append(parts, "server_name "+t.ServerName)
		}
		if t.InsecureSkipVerify {
			parts = append(parts, "insecure_skip_verify")
		}
		if len(parts) == 0 {
			parts = append(parts, "system defaults")
		}
		fmt.Fprintf(w, "  tls: %s\n", strings.Join(parts, ", "))
	}
	if st := s.Stats; st != nil {
		flush := "the engine's default flush interval"
		if st.FlushInterval > 0 {
			flush = fmt.Sprintf("flush every %v", st.FlushInterval)
		}
		fmt.Fprintf(w, "  stats: statsd %s, prefix %s, backend by %s, %s\n", st.Address, st.Prefix, st.Backend, flush)
	}

	for i, st := range cs.Stages {
		indent := "  "
		if st.Name != "" {
			stage := x.Stages[i]
			fmt.Fprintf(w, "  %s: rate %d %s, duration %v\n", st.Name, stage.Rate, per, stage.Duration)
			indent = "    "
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, ex := range st.Executions {
			url := ""
			var workerRate uint32
			if len(cs.Backends) > 0 {
				r := ex.Requests[cs.Backends[0]]
				url, workerRate = r.GetUrl(), r.GetRate()
			}
			planned := uint64(0)
			if len(cs.Backends) > 0 {
				planned = ex.Planned[cs.Backends[0]]
			}
			rate := strconv.FormatFloat(ex.Rate, 'f', -1, 64) + " rps"
			if ex.PerBackend {
				rate += " per backend"
			} else {
				rate += " for the pool"
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%d per worker\t%v\t%s per backend\n",
				indent, ex.Label, url, rate, workerRate, ex.Duration, plural(planned, "request"))
		}
		tw.Flush()
	}

	describeThresholds(w, s)
}

// describeThresholds lists the scenario's thresholds, then each target's
// own with the scenario's it replaces for that target.
func describeThresholds(w io.Writer, s *Scenario) {
	own := false
	for _, t := range s.Targets {
		own = own || len(t.Thresholds) > 0
	}
	if len(s.Thresholds) == 0 && !own {
		fmt.Fprintln(w, "  thresholds: none")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	where := func(t threshold.Threshold) string {
		if t.Pool() {
			return "on the pool's totals"
		}
		return "on each backend"
	}
	if len(s.Thresholds) > 0 {
		fmt.Fprintln(tw, "  thresholds:")
		for _, t := range s.Thresholds {
			fmt.Fprintf(tw, "    %s\t%s\n", t.Expr, where(t))
		}
	}
	for _, tg := range s.Targets {
		if len(tg.Thresholds) == 0 {
			continue
		}
		fmt.Fprintf(tw, "  thresholds of target %s:\n", tg.Name)
		for _, t := range tg.Thresholds {
			instead := ""
			for _, st := range s.Thresholds {
				if replacedBy(st, []threshold.Threshold{t}) {
					instead += ", instead of " + st.Expr
				}
			}
			fmt.Fprintf(tw, "    %s\t%s%s\n", t.Expr, where(t), instead)
		}
	}
	tw.Flush()
}

func plural[N int | uint64](n N, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// describeModes says what a grpc or websocket block (or protocol http3)
// asks for, and that a run refuses it.
func describeModes(w io.Writer, s *Scenario) {
	const refused = "valid; a run refuses it: this engine does not drive it yet"
	switch {
	case s.GRPC != nil && s.GRPC.Mode == GRPCBidiStream:
		g := s.GRPC
		fmt.Fprintf(w, "  grpc: bidi-stream, %d streams per backend, max_inflight_per_stream %d, drain_duration %v (%s)\n",
			g.Streams, g.MaxInflightPerStream, g.DrainDuration, refused)
	case s.GRPC != nil:
		fmt.Fprintf(w, "  grpc: %s (%s)\n", s.GRPC.Mode, refused)
	case s.WebSocket != nil:
		ws := s.WebSocket
		fmt.Fprintf(w, "  websocket: %d streams per backend, max_inflight_per_stream %d, drain_duration %v, binary %t (%s)\n",
			ws.Streams, ws.MaxInflightPerStream, ws.DrainDuration, ws.Binary, refused)
	case s.Protocol == ProtocolHTTP3:
		fmt.Fprintf(w, "  protocol http3: %s\n", refused)
	}
}
