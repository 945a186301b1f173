package render_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/driver/plan"
	"github.com/sortie-soak/sortie/render"
)

// TestGoldenPlansParse reads every rendered golden plan with the driver's
// own parser and compiler, so a plan the renderer writes is one the driver
// runs: the schema, the spellings and the rate arithmetic all agree.
func TestGoldenPlansParse(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "golden", "render-*.golden"))
	if len(paths) < 8 {
		t.Fatalf("only %d golden plans", len(paths))
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			p, err := plan.Parse(path, data)
			if err != nil {
				t.Fatalf("the driver refuses a rendered plan:\n%v", err)
			}
			if len(p.Pools) != 1 || len(p.Scenarios) != 1 {
				t.Fatalf("%d pools, %d scenarios", len(p.Pools), len(p.Scenarios))
			}
			pool, s := p.Pools[0], p.Scenarios[0]
			// One golden names its own scenario and User-Agent.
			wantName, wantUA := render.ScenarioName, render.UserAgent
			if filepath.Base(path) == "render-user-agent-scenario.golden" {
				wantName, wantUA = "canary_1", "team-soak/2"
			}
			if pool.Name != render.PoolName || s.Name != wantName || s.Pool != pool.Name {
				t.Errorf("pool %q, scenario %q on %q", pool.Name, s.Name, s.Pool)
			}
			ex := s.Executor
			if ex.Type != "constant-rate" || !ex.PerBackend || !ex.OpenLoop || ex.Duration <= 0 || ex.Duration%time.Second != 0 {
				t.Errorf("executor %+v", ex)
			}
			if len(s.Headers) != 1 || s.Headers[0].Name != "User-Agent" || s.Headers[0].Value != wantUA {
				t.Errorf("headers %+v", s.Headers)
			}
			if s.Stats != nil && s.Stats.FlushInterval != 5*time.Second {
				t.Errorf("stats flush %v, want the bash plan's 5s", s.Stats.FlushInterval)
			}
			if s.Stats != nil && (s.Stats.Prefix != render.StatsPrefix || s.Stats.Backend != "name" || s.Stats.FlushInterval != render.StatsFlush) {
				t.Errorf("stats %+v", s.Stats)
			}
			var total uint32
			for _, tg := range s.Targets {
				total += tg.Weight
			}
			if total != ex.Rate {
				t.Errorf("weights add up to %d, not the rate %d", total, ex.Rate)
			}
			// Compile over as many backends as the floor was written for:
			// every per-worker split must be exact.
			n := len(pool.Services)
			if pool.DNS != "" {
				n = 5 // any count: per_backend rates do not depend on it
			}
			backends := make([]string, n)
			for i := range backends {
				backends[i] = "127.0.0." + strconv.Itoa(11+i) + ":8443"
			}
			c, err := p.Compile(map[string][]string{pool.Name: backends})
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			execs := c.Scenarios[0].Stages[0].Executions
			if len(execs) != len(s.Targets) {
				t.Fatalf("%d executions for %d targets", len(execs), len(s.Targets))
			}
			for i, e := range execs {
				want := uint64(s.Targets[i].Weight) * uint64(ex.Duration/time.Second)
				for addr, got := range e.Planned {
					if got != want {
						t.Errorf("%s on %s: %d requests planned, want %d (weight x seconds)", e.Label, addr, got, want)
					}
				}
				// Every execution is judged by one 2xx floor: the
				// scenario's or, with per-target floors, its own.
				floors := 0
				for _, th := range e.Thresholds {
					if strings.HasPrefix(th.Expr, "rate:benchmark.http_2xx >= ") {
						floors++
					}
				}
				if floors != 1 || len(e.Thresholds) != len(render.ZeroThresholds)+1 {
					t.Errorf("%s: judged by %d 2xx floors among %d thresholds, want 1 among %d", e.Label, floors, len(e.Thresholds), len(render.ZeroThresholds)+1)
				}
			}
		})
	}
}

// TestRawPlansParse renders a tcp and a udp plan and reads each with the
// driver's parser: the scheme selects the mode, the body is the message,
// nothing HTTP-shaped is written (the parser refuses it with raw
// targets), and every execution is judged by the mode's zero-failure set
// and one floor of echoed messages.
func TestRawPlansParse(t *testing.T) {
	for _, c := range []struct {
		proto, mode, floor string
		zero               []string
	}{
		{render.ProtocolTCP, plan.ModeTCP, "rate:benchmark.tcp_messages_received >= ", render.ZeroThresholdsTCP},
		{render.ProtocolUDP, plan.ModeUDP, "rate:benchmark.udp_datagrams_received >= ", render.ZeroThresholdsUDP},
	} {
		t.Run(c.proto, func(t *testing.T) {
			o := render.DefaultOptions()
			o.Profile, o.Duration, o.Rate = "local", 10*time.Second, 30
			o.Services = []string{"127.0.0.11:9000", "127.0.0.12:9000"}
			o.PerTargetFloors = true
			o.Protocol, o.Body = c.proto, "soak-echo"
			o.Targets = []render.Target{
				{Name: "a", URL: c.proto + "://127.0.0.1:7001", Weight: 2},
				{Name: "b", URL: c.proto + "://127.0.0.1:7002", Weight: 1},
			}
			r, err := render.Render(o)
			if err != nil {
				t.Fatal(err)
			}
			p, err := plan.Parse("raw.yaml", r.YAML)
			if err != nil {
				t.Fatalf("the driver refuses a rendered %s plan:\n%v\n%s", c.proto, err, r.YAML)
			}
			s := p.Scenarios[0]
			if s.Mode != c.mode || string(s.Body) != "soak-echo" {
				t.Errorf("mode %q body %q, want %q and the body", s.Mode, s.Body, c.mode)
			}
			cp, err := p.Compile(map[string][]string{render.PoolName: o.Services})
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			for _, e := range cp.Scenarios[0].Stages[0].Executions {
				floors := 0
				for _, th := range e.Thresholds {
					if strings.HasPrefix(th.Expr, c.floor) {
						floors++
					}
				}
				if floors != 1 || len(e.Thresholds) != len(c.zero)+1 {
					t.Errorf("%s: %d floors among %d thresholds, want 1 among %d", e.Label, floors, len(e.Thresholds), len(c.zero)+1)
				}
			}
		})
	}
	o := render.DefaultOptions()
	o.Profile, o.Services, o.Protocol, o.Body = "local", []string{"127.0.0.11:9000"}, render.ProtocolTCP, "x"
	o.Targets = []render.Target{{Name: "a", URL: "http://127.0.0.1:7001", Weight: 1}}
	if _, err := render.Render(o); err == nil || !strings.Contains(err.Error(), "is not tcp://") {
		t.Errorf("a tcp plan with an http target: %v, want it refused", err)
	}
}

// TestGRPCPlanParses: a plan rendered with GRPC is one the driver reads as
// gRPC unary over HTTP/2 POST, runs (not Undriven), and holds to
// grpc_error == 0.
func TestGRPCPlanParses(t *testing.T) {
	o := render.DefaultOptions()
	o.Profile, o.DNS, o.Backends, o.GRPC = "e2e", "engines:8443", 2, true
	o.Targets = []render.Target{{Name: "svc-1", URL: "http://svc-1:8080/acme.Greeter/SayHello", Weight: 1}}
	r, err := render.Render(o)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse("grpc.yaml", r.YAML)
	if err != nil {
		t.Fatalf("the driver refuses a rendered gRPC plan:\n%v\n%s", err, r.YAML)
	}
	s := p.Scenarios[0]
	if s.GRPC == nil || s.GRPC.Mode != plan.GRPCUnary || s.Protocol != plan.ProtocolHTTP2 || s.Method != "POST" {
		t.Errorf("scenario %+v, want grpc unary over http2 POST", s)
	}
	if err := p.Undriven(); err != nil {
		t.Errorf("a gRPC unary plan is refused: %v", err)
	}
	if !strings.Contains(string(r.YAML), `"counter:benchmark.grpc_error == 0"`) {
		t.Errorf("no grpc_error threshold:\n%s", r.YAML)
	}
}
