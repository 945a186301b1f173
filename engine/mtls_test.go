package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/runca"
)

// runTLS is a run's TLS directory, written by runca.
type runTLS string

func newRunTLS(t testing.TB) runTLS {
	t.Helper()
	b, err := runca.New(runca.Options{Run: t.Name(), Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tls")
	if err := b.Write(dir); err != nil {
		t.Fatal(err)
	}
	return runTLS(dir)
}

func (d runTLS) file(name string) string { return filepath.Join(string(d), name) }

func (d runTLS) server(t testing.TB) *tls.Config {
	t.Helper()
	c, err := runca.ServerConfig(d.file(runca.EngineCertFile), d.file(runca.EngineKeyFile), d.file(runca.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (d runTLS) client(t testing.TB) *tls.Config {
	t.Helper()
	c, err := runca.ClientConfig(d.file(runca.DriverCertFile), d.file(runca.DriverKeyFile), d.file(runca.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// lockedBuffer is a log sink safe for the engine's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveOn starts an engine on 127.0.0.1:0 and returns its address.
func serveOn(t testing.TB, opts Options) (*Engine, string) {
	t.Helper()
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
		<-served
	})
	return e, lis.Addr().String()
}

func dial(t testing.TB, addr string, creds credentials.TransportCredentials) enginev1.EngineClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return enginev1.NewEngineClient(cc)
}

// countingListener accepts TCP connections on ip:0 and counts them,
// closing each at once.
func countingListener(t testing.TB, ip string) (addr string, accepts *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	accepts = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = lis.Close(); <-done })
	return lis.Addr().String(), accepts
}

// TestMTLSRefusesUnauthenticated serves an engine with the run's mTLS and
// calls it as a driver with the run's certificate (it answers), and
// without one, in plaintext, and with another run's certificate: each of
// those is refused at the handshake, starts nothing (the target it named
// is never dialled), and the engine logs one line for the peer however
// many times it was refused.
func TestMTLSRefusesUnauthenticated(t *testing.T) {
	run, other := newRunTLS(t), newRunTLS(t)
	var logs lockedBuffer
	e, addr := serveOn(t, Options{TLS: run.server(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	target, accepts := countingListener(t, "127.0.0.1")

	noCert := &tls.Config{RootCAs: run.client(t).RootCAs, ServerName: runca.EngineName, MinVersion: tls.VersionTLS13}
	refused := []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"plaintext", insecure.NewCredentials()},
		{"TLS without a client certificate", credentials.NewTLS(noCert)},
		{"another run's certificate", credentials.NewTLS(other.client(t))},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			client := dial(t, addr, r.creds)
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := client.Info(ctx, &enginev1.InfoRequest{})
				cancel()
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("Info = %v, want UNAVAILABLE (refused at the handshake)", err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stream, err := client.Execute(ctx, req("x", "http://"+target+"/", 100, time.Second))
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Execute = %v, want UNAVAILABLE", err)
			}
		})
	}
	// The engine's side of a refused handshake may end a moment after
	// the client gave up; the bound only ends a hang.
	for hang := time.Now().Add(30 * time.Second); e.refused.count("127.0.0.1") < uint64(len(refused)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(hang) {
			t.Fatalf("engine counted %d refusals of 127.0.0.1, want at least %d", e.refused.count("127.0.0.1"), len(refused))
		}
	}
	if n := strings.Count(logs.String(), "control plane refused a peer"); n != 1 {
		t.Errorf("%d refusal lines logged, want 1 for the one peer:\n%s", n, logs.String())
	}

	// The run's driver is served, and its execution reaches the target:
	// the listener that saw nothing above does count.
	client := dial(t, addr, credentials.NewTLS(run.client(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Info(ctx, &enginev1.InfoRequest{}); err != nil {
		t.Fatalf("Info with the run's certificate: %v", err)
	}
	if accepts.Load() != 0 {
		t.Fatalf("target accepted %d connections before any authenticated call", accepts.Load())
	}
	got := collect(client.Execute(ctx, req("ok", "http://"+target+"/", 10, 100*time.Millisecond)))
	if got.err != nil {
		t.Fatalf("Execute with the run's certificate: %v", got.err)
	}
	if accepts.Load() == 0 {
		t.Error("the authenticated execution never reached its target")
	}
}

// TestHealthServedInPlaintext: the health service answers a probe that
// speaks no TLS on its own listener, while the control plane refuses it.
func TestHealthServedInPlaintext(t *testing.T) {
	run := newRunTLS(t)
	e, addr := serveOn(t, Options{TLS: run.server(t)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.ServeHealth(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := healthServing(ctx, cc); err != nil {
		t.Fatalf("health: %v", err)
	}
	// The health listener serves nothing else.
	if _, err := enginev1.NewEngineClient(cc).Info(ctx, &enginev1.InfoRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Info on the health listener = %v, want UNIMPLEMENTED", err)
	}
	if _, err := dial(t, addr, insecure.NewCredentials()).Info(ctx, &enginev1.InfoRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext Info on the control plane = %v, want UNAVAILABLE", err)
	}
}

// TestAllowlistRefusesOutsideTarget: an engine that may send to 127.0.0.1
// only refuses an execution aimed at 127.0.0.2, or whose statsd address is
// there, with the typed refusal naming it; nothing is dialled, nothing
// kept, and an allowed target is reached.
func TestAllowlistRefusesOutsideTarget(t *testing.T) {
	allow, err := ParseAllowlist("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	te := startEngine(t, Options{AllowTargets: allow, BackendName: "node-a"})
	outside, outsideAccepts := countingListener(t, "127.0.0.2")
	inside, insideAccepts := countingListener(t, "127.0.0.1")
	statsd, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer statsd.Close()

	withStats := req("stats", "http://"+inside+"/", 100, time.Second)
	withStats.Stats = &enginev1.Stats{Address: statsd.LocalAddr().String(), Scenario: "s", Target: "t"}
	tests := []struct {
		name              string
		req               *enginev1.ExecuteRequest
		field, wantTarget string
	}{
		{"target", req("out", "http://"+outside+"/", 100, time.Second), enginev1.FieldURL, "127.0.0.2"},
		{"statsd", withStats, enginev1.FieldStatsAddress, statsd.LocalAddr().String()},
		{"name", req("name", "http://localhost:1/", 100, time.Second), enginev1.FieldURL, "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := te.execute(t, tt.req)
			field, target, ok := enginev1.RefusedTarget(got.err)
			if !ok || field != tt.field || target != tt.wantTarget || got.started != nil {
				t.Fatalf("Execute = %v (started %v); want the target refusal of %s %s", got.err, got.started, tt.field, tt.wantTarget)
			}
		})
	}
	info, err := te.client.Info(context.Background(), &enginev1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.GetRunning()) != 0 || info.GetRetainedExecutions() != 0 {
		t.Errorf("refused executions left a trace: running %v, retained %d", info.GetRunning(), info.GetRetainedExecutions())
	}
	if n := outsideAccepts.Load(); n != 0 {
		t.Errorf("the refused target accepted %d connections", n)
	}
	if n := insideAccepts.Load(); n != 0 {
		t.Errorf("the target of the execution refused for its statsd accepted %d connections", n)
	}
	// The allowed target is reached: the counters above could count.
	if got := te.execute(t, req("in", "http://"+inside+"/", 10, 100*time.Millisecond)); got.err != nil || insideAccepts.Load() == 0 {
		t.Errorf("allowed execution: %v, %d accepts", got.err, insideAccepts.Load())
	}
}

// healthServing asks the Engine service's health on cc.
func healthServing(ctx context.Context, cc *grpc.ClientConn) error {
	r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: enginev1.Engine_ServiceDesc.ServiceName})
	if err != nil {
		return err
	}
	if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return status.Errorf(codes.Unavailable, "status %v", r.GetStatus())
	}
	return nil
}

// BenchmarkControlPlane is the control plane's cost, plaintext beside the
// run's mTLS, on loopback: "call" an Info round trip on an open
// connection (the per-call cost once connected), "execute" a whole
// Execute of one request to a loopback target through its Result (a
// Start/Result control round trip; the request itself is on the data
// path, the same in both), and "connect" a new connection's first Info
// (the handshake's cost, once per engine per driver).
func BenchmarkControlPlane(b *testing.B) {
	run := newRunTLS(b)
	target := fastServer(b)
	for _, mode := range []struct {
		name   string
		server *tls.Config
		creds  func() credentials.TransportCredentials
	}{
		{"plaintext", nil, insecure.NewCredentials},
		{"mtls", run.server(b), func() credentials.TransportCredentials { return credentials.NewTLS(run.client(b)) }},
	} {
		_, addr := serveOn(b, Options{TLS: mode.server})
		client := dial(b, addr, mode.creds())
		ctx := context.Background()
		if _, err := client.Info(ctx, &enginev1.InfoRequest{}); err != nil {
			b.Fatal(err)
		}
		b.Run(mode.name+"/call", func(b *testing.B) {
			for b.Loop() {
				if _, err := client.Info(ctx, &enginev1.InfoRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode.name+"/execute", func(b *testing.B) {
			n := 0
			for b.Loop() {
				n++
				// 1000/s for 1ms: one request.
				r := collect(client.Execute(ctx, req(fmt.Sprintf("%s-%d", mode.name, n), target, 1000, time.Millisecond)))
				if r.err != nil || r.result.GetCounters()["benchmark.http_2xx"] != 1 {
					b.Fatalf("execute: %v, %v", r.err, r.result.GetCounters())
				}
			}
		})
		b.Run(mode.name+"/connect", func(b *testing.B) {
			for b.Loop() {
				cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(mode.creds()))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := enginev1.NewEngineClient(cc).Info(ctx, &enginev1.InfoRequest{}); err != nil {
					b.Fatal(err)
				}
				_ = cc.Close()
			}
		})
	}
}

// TestIntegrationBinaryRefusesWithoutCertificate runs the real
// sortie-engine as the chart starts it (mTLS, an allowlist, health on its
// own port): a plaintext caller and a TLS caller without a certificate
// are refused, the health port answers without one, and stderr holds one
// refusal line for the peer however many calls it made.
func TestIntegrationBinaryRefusesWithoutCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sortie-engine")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sortie-soak/sortie/engine/cmd/sortie-engine").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := newRunTLS(t)
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0", "--allow-targets", "127.0.0.1",
		"--tls-cert", run.file(runca.EngineCertFile), "--tls-key", run.file(runca.EngineKeyFile), "--client-ca", run.file(runca.CAFile))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	br := bufio.NewReader(stdout)
	var addr, health string
	for _, want := range []string{"LISTEN ", "HEALTH "} {
		line, err := br.ReadString('\n')
		v, ok := strings.CutPrefix(strings.TrimSpace(line), want)
		if err != nil || !ok {
			t.Fatalf("stdout line %q, %v, want %s<address>; stderr:\n%s", line, err, want, stderr.String())
		}
		if want == "LISTEN " {
			addr = v
		} else {
			health = v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noCert := &tls.Config{RootCAs: run.client(t).RootCAs, ServerName: runca.EngineName, MinVersion: tls.VersionTLS13}
	for _, creds := range []credentials.TransportCredentials{insecure.NewCredentials(), credentials.NewTLS(noCert)} {
		client := dial(t, addr, creds)
		for range 3 {
			if _, err := client.Info(ctx, &enginev1.InfoRequest{}); status.Code(err) != codes.Unavailable {
				t.Fatalf("Info without the run's certificate = %v, want UNAVAILABLE", err)
			}
		}
	}
	if _, err := dial(t, addr, credentials.NewTLS(run.client(t))).Info(ctx, &enginev1.InfoRequest{}); err != nil {
		t.Fatalf("Info with the run's certificate: %v", err)
	}
	hc, err := grpc.NewClient(health, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	if err := healthServing(ctx, hc); err != nil {
		t.Errorf("health without a certificate: %v", err)
	}
	// The refusal line is written once the engine's side of the first
	// handshake failed; the bound only ends a hang.
	for hang := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "control plane refused a peer"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(hang) {
			t.Fatalf("no refusal line; stderr:\n%s", stderr.String())
		}
	}
	if n := strings.Count(stderr.String(), "control plane refused a peer"); n != 1 {
		t.Errorf("%d refusal lines for one peer, want 1:\n%s", n, stderr.String())
	}
}
