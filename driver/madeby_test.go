package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/record"
)

// checkMadeBy checks the made_by of a real run: the plan as read, the
// driver's host, and each engine by its node name, with its CPUs.
func checkMadeBy(t *testing.T, mb *record.MadeBy, planPath string, backends []string, names map[string]string) {
	t.Helper()
	if mb == nil {
		t.Fatal("the report has no made_by")
	}
	data, err := os.ReadFile(planPath)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if mb.Plan == nil || mb.Plan.SHA256 != hex.EncodeToString(sum[:]) || mb.Plan.Text != string(data) || mb.Plan.Path != planPath {
		t.Errorf("made_by plan %+v, want %s with sha256 %x", mb.Plan, planPath, sum)
	}
	d := mb.Driver
	if d.Version == "" || d.GoVersion != runtime.Version() || d.CPUs != runtime.NumCPU() || d.Host == "" || (runtime.GOOS == "linux" && d.Kernel == "") {
		t.Errorf("made_by driver %+v", d)
	}
	var got []string
	for _, e := range mb.Engines {
		got = append(got, e.Backend)
		if e.Unknown || e.Node != names[e.Backend] || e.CPUs <= 0 || e.GOMAXPROCS <= 0 || e.Version != "test" || e.GoVersion == "" ||
			(runtime.GOOS == "linux" && e.Kernel == "") {
			t.Errorf("made_by engine %+v, want node %q with its CPUs", e, names[e.Backend])
		}
	}
	if diff := cmp.Diff(backends, got); diff != "" {
		t.Errorf("made_by engines (-want +got):\n%s", diff)
	}
}

// TestMadeByUnknownEngines: an engine that does not answer Info (nothing
// listens, or a server without the call) is recorded as unknown, with why,
// beside one that answers; each pool's backends once, in pool order.
func TestMadeByUnknownEngines(t *testing.T) {
	real := startEngine(t, "node-a", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := testServer()
	enginev1.RegisterEngineServer(srv, enginev1.UnimplementedEngineServer{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	noInfo := ln.Addr().String()
	// A port that was just free: nothing listens there.
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := dl.Addr().String()
	dl.Close()

	o := testOptions()
	r := &runner{opts: o, log: o.logger(&strings.Builder{})}
	defer r.close()
	scenarios := []*scenarioRun{{backends: []string{real, noInfo}}, {backends: []string{noInfo, nobody}}}
	mb := r.madeBy(context.Background(), "p.yaml", []byte("version: v1\n"), scenarios)
	if len(mb.Engines) != 3 {
		t.Fatalf("engines %+v, want 3", mb.Engines)
	}
	if e := mb.Engines[0]; e.Backend != real || e.Unknown || e.Node != "node-a" || e.CPUs != runtime.NumCPU() {
		t.Errorf("answering engine %+v", e)
	}
	for i, want := range []struct{ backend, code string }{{noInfo, "Unimplemented"}, {nobody, "DeadlineExceeded"}} {
		e := mb.Engines[i+1]
		if e.Backend != want.backend || !e.Unknown || !strings.Contains(e.Error, want.code) || e.Node != "" || e.CPUs != 0 {
			t.Errorf("engine %d: %+v, want %s unknown with %s", i+1, e, want.backend, want.code)
		}
	}
}

// TestMadeByWaitsForFirstConnection: an engine whose first connection is
// refused, as a NetworkPolicy refuses a driver pod the enforcer has not
// seen yet, is still read (the Info call waits for a connection within
// InfoTimeout), and the run's calls after it find the connection up.
func TestMadeByWaitsForFirstConnection(t *testing.T) {
	engine := startEngine(t, "node-a", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	refused := make(chan struct{})
	go refuseFirst(ln, engine, refused)

	o := testOptions()
	o.InfoTimeout = time.Minute // a bound for a loaded machine, not a measure
	r := &runner{opts: o, log: o.logger(&strings.Builder{})}
	defer r.close()
	mb := r.madeBy(context.Background(), "p.yaml", []byte("version: v1\n"), []*scenarioRun{{backends: []string{ln.Addr().String()}}})
	select {
	case <-refused:
	default:
		t.Fatal("the first connection was never made")
	}
	if e := mb.Engines[0]; e.Unknown || e.Node != "node-a" {
		t.Errorf("engine behind a refused first connection: %+v, want node-a read", e)
	}
}

// refuseFirst closes the first connection ln accepts at once and relays
// every later one to addr.
func refuseFirst(ln net.Listener, addr string, refused chan<- struct{}) {
	for n := 0; ; n++ {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if n == 0 {
			c.Close()
			close(refused)
			continue
		}
		up, err := net.Dial("tcp", addr)
		if err != nil {
			c.Close()
			continue
		}
		go func() { io.Copy(up, c); up.Close() }()
		go func() { io.Copy(c, up); c.Close() }()
	}
}
