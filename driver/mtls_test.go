package driver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/engine"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/runca"
	"github.com/sortie-soak/sortie/record"
)

// noTLS are the test options without engine credentials: what a run
// gets from its flags alone.
func noTLS() Options {
	o := testOptions()
	o.EngineTLS = nil
	return o
}

// TestRunEngineCredentialFlags: a run needs the run's mTLS files or an
// explicit --insecure-plaintext, and is refused before any dial without
// them; with the files it runs over mTLS.
func TestRunEngineCredentialFlags(t *testing.T) {
	tg := newTarget(t)
	eng := startEngine(t, "node-a", 0)
	planPath := writePlan(t, twoTargetPlan, planData{Backends: []string{eng}, URL: tg.URL})
	d := testTLS().dir
	f := func(n string) string { return filepath.Join(d, n) }
	refused := []struct {
		name  string
		extra []string
		want  string
	}{
		{"no credentials", nil, "no --client-cert, --client-key and --engine-ca"},
		{"a part of them", []string{"--client-cert", f(runca.DriverCertFile)}, "go together"},
		{"files and plaintext", append(driverTLSArgs(), "--insecure-plaintext"), "one or the other"},
		{"a missing file", []string{"--client-cert", f("nope.crt"), "--client-key", f(runca.DriverKeyFile), "--engine-ca", f(runca.CAFile)}, "nope.crt"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			res := runDriver(t, context.Background(), noTLS(), planPath, tt.extra...)
			if res.code != cli.ExitUsage || res.err == nil || !strings.Contains(res.err.Error(), tt.want) {
				t.Errorf("exit %d, %v; want exit 2 saying %q", res.code, res.err, tt.want)
			}
		})
	}
	if n := tg.served.Load(); n != 0 {
		t.Fatalf("refused runs sent %d requests", n)
	}
	res := runDriver(t, context.Background(), noTLS(), planPath, driverTLSArgs()...)
	if res.code != cli.ExitOK {
		t.Fatalf("run with the run's mTLS files: exit %d, %v", res.code, res.err)
	}
	if tg.served.Load() == 0 {
		t.Error("the run over mTLS sent nothing")
	}
}

// TestRunAnotherRunsCertificate: an engine refuses a driver holding
// another run's certificate; its backend is named, nothing is sent.
func TestRunAnotherRunsCertificate(t *testing.T) {
	tg := newTarget(t)
	eng := startEngine(t, "node-a", 0)
	planPath := writePlan(t, twoTargetPlan, planData{Backends: []string{eng}, URL: tg.URL})
	b, err := runca.New(runca.Options{Run: "other", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "tls")
	if err := b.Write(other); err != nil {
		t.Fatal(err)
	}
	f := func(n string) string { return filepath.Join(other, n) }
	res := runDriver(t, context.Background(), noTLS(), planPath,
		"--client-cert", f(runca.DriverCertFile), "--client-key", f(runca.DriverKeyFile), "--engine-ca", f(runca.CAFile))
	if res.code != cli.ExitFail {
		t.Fatalf("exit %d, want 1", res.code)
	}
	e := res.execution(t, "mesh/svc-1")
	if _, ok := backendErrorOf(e, eng); e.Pass || !ok {
		t.Errorf("execution %+v: want failed with an error of backend %s", e, eng)
	}
	if n := tg.served.Load(); n != 0 {
		t.Errorf("a refused driver's run sent %d requests", n)
	}
}

// TestRunTargetOutsideAllowlist: an engine that may not send to the
// plan's target refuses the execution; the driver names it rejected.
func TestRunTargetOutsideAllowlist(t *testing.T) {
	tg := newTarget(t)
	allow, err := engine.ParseAllowlist("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	eng := startEngineWith(t, engine.Options{BackendName: "node-a", AllowTargets: allow})
	planPath := writePlan(t, twoTargetPlan, planData{Backends: []string{eng}, URL: tg.URL})
	res := runDriver(t, context.Background(), testOptions(), planPath)
	if res.code != cli.ExitFail {
		t.Fatalf("exit %d, want 1", res.code)
	}
	e := res.execution(t, "mesh/svc-1")
	be, ok := backendErrorOf(e, eng)
	if !ok || record.KindOf(be) != record.KindRejected || !strings.Contains(be.Error, "--allow-targets") {
		t.Errorf("backend error %+v, want rejected naming --allow-targets", be)
	}
	if n := tg.served.Load(); n != 0 {
		t.Errorf("the refused target was sent %d requests", n)
	}
}

// TestRunKeyNeverInPlaintext: a plan carrying a target's TLS client key
// is refused in plaintext before anything is dialled.
func TestRunKeyNeverInPlaintext(t *testing.T) {
	var dials atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	d := testTLS().dir
	planPath := filepath.Join(t.TempDir(), "plan.yaml")
	plan := fmt.Sprintf(`version: v1
pools:
  - {name: nodes, services: [%q]}
scenarios:
  - name: keyed
    pool: nodes
    target: "https://127.0.0.1:1/"
    tls: {cert_file: %q, key_file: %q, insecure_skip_verify: true}
    executor: {type: constant-rate, rate: 1, duration: 1s}
`, ln.Addr().String(), filepath.Join(d, runca.EngineCertFile), filepath.Join(d, runca.EngineKeyFile))
	if err := os.WriteFile(planPath, []byte(plan), 0o600); err != nil {
		t.Fatal(err)
	}
	res := runDriver(t, context.Background(), noTLS(), planPath, "--insecure-plaintext")
	if res.code != cli.ExitUsage || res.err == nil || !strings.Contains(res.err.Error(), `scenario "keyed" carries a TLS client key`) {
		t.Errorf("exit %d, %v; want exit 2 naming the scenario", res.code, res.err)
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("the engine was dialled %d times", n)
	}
}
