package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/runca"
	"github.com/sortie-soak/sortie/record"
)

func TestTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("secure"))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	te := startEngine(t, Options{})

	r := req("tls", srv.URL, 20, 500*time.Millisecond)
	r.Tls = &enginev1.TLS{CaPem: ca}
	r.Connections = 1
	r.MaxPendingRequests = 10
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP2xx: 10})

	// Without the root the engine refuses the server's certificate: a
	// local connection failure, never a request.
	r = req("tls-unknown-ca", srv.URL, 20, 500*time.Millisecond)
	res = te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.PoolConnectionFailure: 10, record.PoolFailureLocal: 10})
}

func TestStatsd(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	lines := make(chan string, 1024)
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				close(lines)
				return
			}
			for _, l := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				lines <- l
			}
		}
	}()
	srv := okServer(t)
	te := startEngine(t, Options{BackendName: "Node-A.1"})
	r := req("statsd", srv.URL, 20, time.Second)
	r.Stats = &enginev1.Stats{
		Address: pc.LocalAddr().String(), Prefix: "sortie", Scenario: "mesh", Target: "svc-1",
		FlushInterval: durationpb.New(200 * time.Millisecond),
	}
	res := te.execute(t, r).mustResult(t)
	wantCounters(t, res, map[string]uint64{record.HTTP2xx: 20})

	const base = "sortie.mesh.svc-1.node_a_1.cluster.0."
	var counted, timed, packets int
	deadline := time.After(5 * time.Second)
	for counted < 20 || timed < 20 {
		var l string
		select {
		case l = <-lines:
		case <-deadline:
			t.Fatalf("after 5 s: %d of 20 counted, %d of 20 timed", counted, timed)
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("malformed statsd line %q", l)
		}
		switch name {
		case base + record.HTTP2xx:
			v, ok := strings.CutSuffix(value, "|c")
			n, err := strconv.Atoi(v)
			if !ok || err != nil || n <= 0 || n > 20 {
				t.Fatalf("counter line %q, want a delta of 1 to 20", l)
			}
			counted += n
			packets++
		case base + record.Latency2xx:
			v, ok := strings.CutSuffix(value, "|ms")
			ms, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil || ms < 0 {
				t.Fatalf("timer line %q, want a value in ms at sample rate 1", l)
			}
			timed++
		case base + record.LateSends:
			// Pacing accuracy depends on the machine; its name is checked.
		default:
			t.Fatalf("unexpected metric %q", l)
		}
	}
	if counted != 20 || timed != 20 {
		t.Errorf("statsd counted %d and timed %d of 20 responses", counted, timed)
	}
	if packets < 2 {
		t.Errorf("http_2xx came in %d flush(es), want deltas over several", packets)
	}
}

func TestMetricElement(t *testing.T) {
	for in, want := range map[string]string{
		"node-a":                   "node_a",
		"Kind-Worker2":             "kind_worker2",
		"ip-10-0-0-1.ec2.internal": "ip_10_0_0_1_ec2_internal",
		"already_fine_9":           "already_fine_9",
		"ünïcode":                  "_n_code",
	} {
		if got := metricElement(in); got != want {
			t.Errorf("metricElement(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	// plain are the control-plane flags every run needs when it is not
	// the case under test.
	plain := []string{"--insecure-plaintext", "--allow-targets", "*"}
	with := func(args ...string) []string { return append(append([]string(nil), plain...), args...) }
	def := RunOptions{Listen: "127.0.0.1:8443", MaxConcurrentExecutions: 16, ShutdownTimeout: 25 * time.Second,
		Retention: time.Hour, RetainBytes: 64 << 20, GCPercent: 25, MemoryLimitMiB: 64, InsecurePlaintext: true, AllowTargets: "*"}
	tests := []struct {
		args []string
		want RunOptions
		code int // -1: no error
	}{
		{args: plain, want: def, code: -1},
		{args: with("--listen", "0.0.0.0:9000", "--max-concurrent-executions", "4", "--backend-name", "node-a", "--retention", "10m", "--retain-bytes", "1048576"),
			want: RunOptions{Listen: "0.0.0.0:9000", MaxConcurrentExecutions: 4, BackendName: "node-a", ShutdownTimeout: 25 * time.Second,
				Retention: 10 * time.Minute, RetainBytes: 1 << 20, GCPercent: 25, MemoryLimitMiB: 64, InsecurePlaintext: true, AllowTargets: "*"}, code: -1},
		{args: with("--version"), want: func() RunOptions { o := def; o.PrintVersion = true; return o }(), code: -1},
		{args: with("--gc-percent", "50", "--memory-limit-mib", "0"),
			want: func() RunOptions { o := def; o.GCPercent, o.MemoryLimitMiB = 50, 0; return o }(), code: -1},
		{args: []string{"--tls-cert", "e.crt", "--tls-key", "e.key", "--client-ca", "ca.crt", "--allow-targets", "10.0.0.0/8, svc.ns.mesh", "--health-listen", "0.0.0.0:8444"},
			want: func() RunOptions {
				o := def
				o.InsecurePlaintext, o.TLSCert, o.TLSKey, o.ClientCA = false, "e.crt", "e.key", "ca.crt"
				o.AllowTargets, o.HealthListen = "10.0.0.0/8, svc.ns.mesh", "0.0.0.0:8444"
				return o
			}(), code: -1},
		{args: with("--retention", "0s"), code: cli.ExitUsage},
		{args: with("--retain-bytes", "-1"), code: cli.ExitUsage},
		{args: with("--gc-percent", "0"), code: cli.ExitUsage},
		{args: with("--memory-limit-mib", "-1"), code: cli.ExitUsage},
		{args: with("--max-concurrent-executions", "0"), code: cli.ExitUsage},
		{args: with("--listen", "nope"), code: cli.ExitUsage},
		{args: with("--health-listen", "nope"), code: cli.ExitUsage},
		{args: with("--no-such-flag"), code: cli.ExitUsage},
		{args: with("extra"), code: cli.ExitUsage},
		// Neither mTLS files nor an explicit plaintext: refused.
		{args: []string{"--allow-targets", "*"}, code: cli.ExitUsage},
		{args: []string{"--allow-targets", "*", "--tls-cert", "e.crt", "--tls-key", "e.key"}, code: cli.ExitUsage},
		{args: with("--tls-cert", "e.crt", "--tls-key", "e.key", "--client-ca", "ca.crt"), code: cli.ExitUsage},
		// No allowlist, or a bad one: refused.
		{args: []string{"--insecure-plaintext"}, code: cli.ExitUsage},
		{args: []string{"--insecure-plaintext", "--allow-targets", "10.0.0.1/8"}, code: cli.ExitUsage},
		{args: []string{"--help"}, code: cli.ExitOK},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		got, err := parseFlags(tt.args, &stderr)
		if tt.code == -1 {
			allow := got.Allow
			got.Allow = nil
			if err != nil || got != tt.want {
				t.Errorf("parseFlags(%q) = %+v, %v; want %+v", tt.args, got, err, tt.want)
			} else if want, _ := ParseAllowlist(tt.want.AllowTargets); allow == nil || allow.String() != want.String() {
				t.Errorf("parseFlags(%q) allowlist %v, want %v", tt.args, allow, want)
			}
			continue
		}
		if err == nil || cli.Code(err) != tt.code {
			t.Errorf("parseFlags(%q) error %v (code %d), want code %d", tt.args, err, cli.Code(err), tt.code)
		}
	}
	var stderr bytes.Buffer
	_, _ = parseFlags([]string{"--help"}, &stderr)
	for _, want := range []string{"LISTEN <address>", "HEALTH <address>", "-listen", "-max-concurrent-executions", "-backend-name", "-shutdown-timeout", "-gc-percent", "-memory-limit-mib", "-version",
		"-tls-cert", "-tls-key", "-client-ca", "-insecure-plaintext", "-allow-targets", "-health-listen"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stderr.String())
		}
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--listen", "127.0.0.1:0", "--insecure-plaintext", "--allow-targets", "*"}, pw, &bytes.Buffer{})
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "LISTEN 127.0.0.1:") {
		t.Fatalf("first stdout line %q, %v", line, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v, want nil", err)
	}
}

// TestIntegrationSIGTERM builds the real binary, starts an execution on it,
// and sends SIGTERM: the Result still arrives, cancelled, and the process
// exits 0.
func TestIntegrationSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "sortie-engine")
	build := exec.Command("go", "build", "-o", bin, "github.com/sortie-soak/sortie/engine/cmd/sortie-engine")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The binary as the chart and soak local start it: mTLS with the
	// run's files, targets on loopback only.
	run := newRunTLS(t)
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--backend-name", "node-a", "--allow-targets", "127.0.0.1",
		"--tls-cert", run.file(runca.EngineCertFile), "--tls-key", run.file(runca.EngineKeyFile), "--client-ca", run.file(runca.CAFile))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "LISTEN ")
	if err != nil || !ok {
		t.Fatalf("first stdout line %q, %v; stderr:\n%s", line, err, stderr.String())
	}
	go func() { exited <- cmd.Wait() }()

	inFlight := newSeen()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		inFlight.mark()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(run.client(t))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	te := &testEngine{client: enginev1.NewEngineClient(cc)}
	ch := startStream(t, te, req("sigterm", srv.URL, 20, 20*time.Second))
	// SIGTERM once a request was sent: the result must count it.
	inFlight.wait(t)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	got := <-ch
	res := got.mustResult(t)
	if !res.GetCancelled() || res.GetBackendName() != "node-a" || res.GetCounters()[record.HTTP2xx] == 0 {
		t.Errorf("result %v, want cancelled with counters", res)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("process exit: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("process still running 10 s after SIGTERM; stderr:\n%s", stderr.String())
	}
}
