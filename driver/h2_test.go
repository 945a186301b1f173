package driver

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
  - name: h2tls
    pool: nodes
    protocol: http2
    target: "{{.TLSURL}}"
    tls: {insecure_skip_verify: true}
    executor: {type: constant-rate, rate: 10, duration: 1s, per_backend: true, open_loop: true}
`

// h2Fixture starts an h2c fixture target whose service is in mode m
// (ok: healthy), or with TLS h2 by ALPN, and returns it and its URL.
func h2Fixture(t *testing.T, m fixture.Mode, withTLS bool) (*fixture.Server, string) {
	t.Helper()
	o := fixture.Options{H2C: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	scheme := "http://"
	if withTLS {
		// httptest's certificate, for 127.0.0.1; the plan skips its
		// verification.
		ts := httptest.NewTLSServer(http.NotFoundHandler())
		o.TLS, scheme = &tls.Config{Certificates: ts.TLS.Certificates}, "https://"
		ts.Close()
	}
	s, err := fixture.New(o)
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
	return s, scheme + s.Addr(fixture.DefaultService) + "/"
}

// TestIntegrationH2Fixture runs a plan of protocol http2 against fixture
// targets speaking h2c, one healthy and one per fault, and finds every
// planned request in exactly one class: 2xx, 5xx, a RST_STREAM before
// headers (remote_reset), a request_timeout for a hang; and against one
// speaking TLS, h2 by ALPN.
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
		s, url := h2Fixture(t, tg.mode, false)
		servers[tg.name] = s
		list += "      - {name: " + tg.name + ", url: \"" + url + "\"}\n"
	}
	tlsSrv, tlsURL := h2Fixture(t, fixture.ModeOK, true)
	engine := startEngine(t, "node-a", 0)
	planPath := writePlan(t, h2Plan, planData{Backends: []string{engine}, URL: list, TLSURL: tlsURL})
	res := runDriver(t, context.Background(), testOptions(), planPath)
	if res.code != 1 {
		t.Fatalf("exit %d, want 1 (the 5xx threshold fails)", res.code)
	}
	for _, tg := range targets {
		label := "h2/" + tg.name
		br := exactResult(t, res, label, engine, 10, tg.want)
		// The fixture also speaks HTTP/1.1: each request must have come
		// over HTTP/2.
		if n := servers[tg.name].Status().Services[0].HTTP2Requests; n != 10 {
			t.Errorf("%s: the fixture saw %d HTTP/2 requests, want 10", label, n)
		}
		for _, k := range []string{record.HTTP2xx, record.HTTP5xx, record.StreamResets, record.RequestTimeout, record.InflightLost, record.PoolOverflow, record.PoolConnectionFailure} {
			if _, want := tg.want[k]; !want && br.Counters[k] != 0 {
				t.Errorf("%s: unexpected %s = %d", label, k, br.Counters[k])
			}
		}
	}
	// h2 by ALPN over TLS: every request a 2xx, every one HTTP/2.
	e := res.execution(t, "h2tls")
	if br, ok := backendOf(t, e, engine); !ok || br.Counters[record.HTTP2xx] != 10 || record.Sum(br.Counters) != 10 {
		t.Errorf("h2tls: %+v, want 10 http_2xx", br.Counters)
	}
	if n := tlsSrv.Status().Services[0].HTTP2Requests; n != 10 {
		t.Errorf("h2tls: the fixture saw %d HTTP/2 requests, want 10", n)
	}
	checkTimelines(t, res)
}
