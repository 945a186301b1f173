package driver

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/sortie-soak/sortie/fixture"
	"github.com/sortie-soak/sortie/record"
)

const h2Plan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: h2
    pool: nodes
    protocol: http2
    max_concurrent_streams: 8
    connections: 2
    timeout: 2s
    request_timeout: 300ms
    executor: {type: constant-rate, rate: 40, duration: 1s, per_backend: true, open_loop: true}
    targets:
{{.URL}}    thresholds: ["counter:benchmark.http_5xx == 0"]
`

// h2Fixture starts an h2c fixture target whose service is in mode m
// (ok: healthy) and returns it and its URL.
func h2Fixture(t *testing.T, m fixture.Mode) (*fixture.Server, string) {
	t.Helper()
	s, err := fixture.New(fixture.Options{H2C: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); s.Wait() })
	if m != fixture.ModeOK {
		if err := s.Set(fixture.DefaultService, fixture.Fault{Mode: m}); err != nil {
			t.Fatal(err)
		}
	}
	return s, "http://" + s.Addr(fixture.DefaultService) + "/"
}

// TestIntegrationH2Fixture runs a plan of protocol http2 against fixture
// targets speaking h2c, one healthy and one per fault, and finds every
// planned request in exactly one class: 2xx, 5xx, a RST_STREAM before
// headers (remote_reset), a request_timeout for a hang.
func TestIntegrationH2Fixture(t *testing.T) {
	if testing.Short() {
		t.Skip("runs load against fixture targets")
	}
	t.Parallel()
	targets := []struct {
		name string
		mode fixture.Mode
		want map[string]uint64
	}{
		{"ok", fixture.ModeOK, map[string]uint64{record.HTTP2xx: 10}},
		{"unavailable", fixture.Mode503, map[string]uint64{record.HTTP5xx: 10}},
		{"reset", fixture.ModeReset, map[string]uint64{record.StreamResets: 10, record.ResetsBeforeHeaders: 10, record.StreamResetsPrefix + record.ReasonRemoteReset: 10}},
		{"hang", fixture.ModeHang, map[string]uint64{record.RequestTimeout: 10}},
	}
	var list string
	servers := map[string]*fixture.Server{}
	for _, tg := range targets {
		s, url := h2Fixture(t, tg.mode)
		servers[tg.name] = s
		list += "      - {name: " + tg.name + ", url: \"" + url + "\"}\n"
	}
	engine := startEngine(t, "node-a", 0)
	planPath := writePlan(t, h2Plan, planData{Backends: []string{engine}, URL: list})
	res := runDriver(t, context.Background(), testOptions(), planPath)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1 (the 5xx threshold fails)", res.code)
	}
	for _, tg := range targets {
		e := res.execution(t, "h2/"+tg.name)
		br, ok := backendOf(t, e, engine)
		if !ok {
			t.Fatalf("%s: no result", e.Label)
		}
		if err := br.Conserves(); err != nil || br.Planned != 10 || record.Sum(br.Counters) != 10 {
			t.Errorf("%s: planned %d, outcomes %d, conservation %v", e.Label, br.Planned, record.Sum(br.Counters), err)
		}
		for k, v := range tg.want {
			if br.Counters[k] != v {
				t.Errorf("%s: %s = %d, want %d (all %v)", e.Label, k, br.Counters[k], v, br.Counters)
			}
		}
		// The fixture also speaks HTTP/1.1: each request must have come
		// over HTTP/2.
		if n := servers[tg.name].Status().Services[0].HTTP2Requests; n != 10 {
			t.Errorf("%s: the fixture saw %d HTTP/2 requests, want 10", e.Label, n)
		}
		for _, k := range []string{record.HTTP2xx, record.HTTP5xx, record.StreamResets, record.RequestTimeout, record.InflightLost, record.PoolOverflow, record.PoolConnectionFailure} {
			if _, want := tg.want[k]; !want && br.Counters[k] != 0 {
				t.Errorf("%s: unexpected %s = %d", e.Label, k, br.Counters[k])
			}
		}
	}
	checkTimelines(t, res)
}
