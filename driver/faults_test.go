package driver

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/record"
)

const twoTargetPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: mesh
    pool: nodes
    timeout: 1s
    executor: {type: constant-rate, rate: 20, duration: 3s, per_backend: true, open_loop: true}
    targets:
      - {name: svc-1, url: "{{.URL}}", weight: 1}
      - {name: svc-2, url: "{{.URL}}", weight: 1}
    thresholds: ["counter:benchmark.http_5xx == 0"]
`

// assertWhole checks that a backend answered an execution with every
// planned request a 2xx.
func assertWhole(t *testing.T, e record.Execution, backend string, planned uint64) {
	t.Helper()
	br, ok := backendOf(t, e, backend)
	if !ok {
		t.Errorf("%s: no result from the surviving backend %s", e.Label, backend)
		return
	}
	if br.Counters[record.HTTP2xx] != planned || record.Sum(br.Counters) != planned || br.Planned != planned || br.Cancelled {
		t.Errorf("%s on %s: %+v, want %d http_2xx of %d planned", e.Label, backend, br.Counters, planned, planned)
	}
	if _, bad := backendErrorOf(e, backend); bad {
		t.Errorf("%s: the surviving backend %s has an error", e.Label, backend)
	}
}

func TestIntegrationEngineKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes")
	}
	tg := newTarget(t)
	victim, p := startEngineProc(t)
	survivor := startEngine(t, "survivor", 0)
	planPath := writePlan(t, twoTargetPlan, planData{Backends: []string{victim, survivor}, URL: tg.URL})
	done := runDriverAsync(t, testOptions(), planPath)
	// Kill the engine once both are sending: about a second in.
	waitServed(t, tg, 40, 20*time.Second)
	p.signal(t, syscall.SIGKILL)
	res := <-done
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		e := res.execution(t, label)
		if e.Pass {
			t.Errorf("%s passed with a lost backend", label)
		}
		be, ok := backendErrorOf(e, victim)
		if !ok || be.Kind != record.KindLost || !strings.HasPrefix(be.Error, "lost: ") {
			t.Errorf("%s: backend error of the killed engine %+v, want lost", label, be)
		}
		// What it had counted before the kill, if a bucket was final by
		// then, is a partial result (TestIntegrationEngineKilledKeepsCounts).
		if br, ok := backendOf(t, e, victim); ok && !br.Partial {
			t.Errorf("%s: a whole result from the killed engine", label)
		}
		assertWhole(t, e, survivor, 30)
		// The survivor was judged.
		if len(e.Thresholds) != 1 || !e.Thresholds[0].Pass {
			t.Errorf("%s: thresholds %+v", label, e.Thresholds)
		}
	}
	if d := cmp.Diff(res.report.Executions, res.stream); d != "" {
		t.Errorf("stream differs from the report (-report +stream):\n%s", d)
	}
}

func TestIntegrationEngineFrozen(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes")
	}
	t.Parallel()
	tg := newTarget(t)
	victim, p := startEngineProc(t)
	survivor := startEngine(t, "", 0)
	planPath := writePlan(t, twoTargetPlan, planData{Backends: []string{victim, survivor}, URL: tg.URL})
	o := testOptions()
	o.Grace, o.AnswerWindow, o.CancelWait = 2*time.Second, 3*time.Second, 2*time.Second
	done := runDriverAsync(t, o, planPath)
	waitServed(t, tg, 40, 20*time.Second)
	p.signal(t, syscall.SIGSTOP)
	res := <-done
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	// How long the phases take on the clock is TestDeadlineCases' to
	// hold, on a fake one; here a real frozen process is named.
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		e := res.execution(t, label)
		be, ok := backendErrorOf(e, victim)
		if !ok || be.Kind != record.KindSilent || !strings.HasPrefix(be.Error, "silent: no answer within 5s of its deadline") || !strings.Contains(be.Error, "frozen or partitioned") {
			t.Errorf("%s: backend error of the frozen engine %+v, want silent", label, be)
		}
		assertWhole(t, e, survivor, 30)
		if e.Pass {
			t.Errorf("%s passed with a silent backend", label)
		}
	}
}

func TestIntegrationEngineStalled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes")
	}
	t.Parallel()
	tg := newTarget(t)
	victim, p := startEngineProc(t)
	survivor := startEngine(t, "", 0)
	planPath := writePlan(t, twoTargetPlan, planData{Backends: []string{victim, survivor}, URL: tg.URL})
	o := testOptions()
	// A deadline far enough that the stalled engine answers before it.
	o.Grace = 20 * time.Second
	done := runDriverAsync(t, o, planPath)
	waitServed(t, tg, 40, 20*time.Second)
	// Stopped for 6 s of a 3 s execution: its own elapsed time ends well
	// past duration + timeout + drain (5 s).
	p.signal(t, syscall.SIGSTOP)
	time.Sleep(6 * time.Second)
	p.signal(t, syscall.SIGCONT)
	res := <-done
	if res.code != 1 {
		t.Fatalf("exit %d, want 1", res.code)
	}
	for _, label := range []string{"mesh/svc-1", "mesh/svc-2"} {
		e := res.execution(t, label)
		be, ok := backendErrorOf(e, victim)
		if !ok || be.Kind != record.KindStalled || !strings.Contains(be.Error, "it stalled: its result took ") {
			t.Errorf("%s: backend error of the stalled engine %+v, want stalled", label, be)
		}
		if _, ok := backendOf(t, e, victim); !ok {
			t.Errorf("%s: the stalled result was not kept", label)
		}
		assertWhole(t, e, survivor, 30)
	}
}

const stepsPlan = `version: v1
pools:
  - {name: nodes, services: {{.Quoted}}}
scenarios:
  - name: steps
    pool: nodes
    timeout: 1s
    executor:
      type: staircase
      per_backend: true
      open_loop: true
      stages:
        - {rate: 2, duration: 1s}
        - {rate: 2, duration: 1s}
        - {rate: 2, duration: 1s}
        - {rate: 2, duration: 1s}
        - {rate: 2, duration: 1s}
    targets:
      - {name: a, url: "{{.URL}}", weight: 1}
      - {name: b, url: "{{.URL}}", weight: 1}
`

// TestIntegrationDriverKilled kills the driver process mid-run: its
// stream holds whole lines, plus at most one torn line; a driver that
// appends to it next closes the torn line first.
func TestIntegrationDriverKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	tg := newTarget(t)
	a := startEngine(t, "", 0)
	planPath := writePlan(t, stepsPlan, planData{Backends: []string{a}, URL: tg.URL})
	dir := t.TempDir()
	stream := filepath.Join(dir, "stream.jsonl")
	p := start(t, nil, binary(t, "sortie"), runArgs(planPath, "--results-stream", stream, "-o", filepath.Join(dir, "report.json"))...)
	p.waitLine(t, "PASS steps/b/stage-2", 30*time.Second)
	p.signal(t, syscall.SIGKILL)
	p.wait(t, 10*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "report.json")); err == nil {
		t.Errorf("a killed driver left a report")
	}
	src, err := record.ReadStreamFile(stream)
	if err != nil {
		t.Fatal(err)
	}
	execs, bad := record.Plain(src.All), len(src.Skipped)
	if bad > 1 || len(execs) < 4 || len(execs) == 10 {
		t.Fatalf("stream of a killed driver: %d whole lines (%v), %d bad; want at least 4, not all 10, and at most 1 bad", len(execs), labelsOf(execs), bad)
	}
	for i, e := range execs {
		if !e.Pass || len(e.Results) != 1 {
			t.Errorf("line %d: %+v", i, e)
		}
	}

	// Whatever the kill left, a torn tail is what a crash mid-write
	// leaves: add one, then run again on the same stream.
	raw, _ := os.ReadFile(stream)
	torn := []byte(`{"label":"steps/a/stage-9","scenario":"st`)
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		torn = nil // the kill tore a line itself
	}
	f, err := os.OpenFile(stream, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(torn)
	f.Close()
	before, _ := os.ReadFile(stream)
	res := runDriver(t, context.Background(), testOptions(), planPath, "--results-stream", stream)
	if res.code != 0 {
		t.Fatalf("second run: exit %d", res.code)
	}
	after, _ := os.ReadFile(stream)
	if !bytes.HasPrefix(after, before) || after[len(before)] != '\n' {
		t.Fatalf("the stream was not appended to after a newline closing the torn line")
	}
	src2, err := record.ReadStreamFile(stream)
	if err != nil {
		t.Fatal(err)
	}
	execs2, bad2 := record.Plain(src2.All), len(src2.Skipped)
	if bad2 != 1 || len(execs2) != len(execs)+10 {
		t.Errorf("after the second run: %d whole lines and %d bad, want %d and 1", len(execs2), bad2, len(execs)+10)
	}
	if d := cmp.Diff(res.report.Executions, execs2[len(execs):]); d != "" {
		t.Errorf("the second run's lines differ from its report (-report +stream):\n%s", d)
	}
}

// TestIntegrationDriverSignal sends SIGINT to a driver process mid-run:
// it cancels, writes the report and exits 1.
func TestIntegrationDriverSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	tg := newTarget(t)
	a := startEngine(t, "", 0)
	planPath := writePlan(t, interruptPlan, planData{Backends: []string{a}, URL: tg.URL})
	dir := t.TempDir()
	out := filepath.Join(dir, "report.json")
	p := start(t, nil, binary(t, "sortie"), runArgs(planPath, "-o", out, "--results-stream", filepath.Join(dir, "s.jsonl"))...)
	p.waitLine(t, "running long/two", 30*time.Second)
	waitServed(t, tg, 5, 20*time.Second)
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, p.Stderr())
	}
	src, err := record.ReadReportFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rep := src.Report()
	if rep.Pass || !rep.Cancelled || len(rep.Executions) != 3 || !rep.Executions[2].NotRun {
		t.Errorf("report of an interrupted run: pass=%v cancelled=%v executions=%v", rep.Pass, rep.Cancelled, labelsOf(rep.Executions))
	}
	for _, e := range rep.Executions[:2] {
		if len(e.Results) != 1 || !e.Results[0].Cancelled || e.Results[0].Counters[record.HTTP2xx] == 0 {
			t.Errorf("%s: what came back was not kept: %+v", e.Label, e.Results)
		}
	}
	if !strings.Contains(p.Stderr(), "sortie: the run was interrupted") {
		t.Errorf("stderr:\n%s", p.Stderr())
	}
}

// TestIntegrationDriverStopped stops the driver process itself with
// SIGSTOP past its engines' deadlines, answer window and cancel wait, and
// resumes it: the answers waiting for it are taken, nobody is silent.
func TestIntegrationDriverStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	t.Parallel()
	tg := newTarget(t)
	a, b := startEngine(t, "", 0), startEngine(t, "", 0)
	planPath := writePlan(t, frozenDriverPlan, planData{Backends: []string{a, b}, URL: tg.URL})
	dir := t.TempDir()
	out := filepath.Join(dir, "report.json")
	p := start(t, nil, binary(t, "sortie"), runArgs(planPath, "-o", out, "--progress", "0",
		"--deadline-grace", "500ms", "--answer-window", "500ms", "--cancel-wait", "500ms")...)
	// Stopped once the engines have the execution.
	waitServed(t, tg, 1, 30*time.Second)
	p.signal(t, syscall.SIGSTOP)
	// Deadline: start + 1s + timeout 1s + drain 5s + grace 0.5s; then
	// 0.5s + 0.5s. Stay stopped well past all of it.
	time.Sleep(10 * time.Second)
	if n := tg.served.Load(); n != 8 {
		t.Errorf("the engines served %d requests while the driver was stopped, want 8", n)
	}
	p.signal(t, syscall.SIGCONT)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, p.Stderr())
	}
	src, err := record.ReadReportFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rep := src.Report()
	e := rep.Executions[0]
	if !e.Pass || len(e.BackendErrors) != 0 || len(e.Results) != 2 || e.Totals[record.HTTP2xx] != 8 {
		t.Errorf("after the driver resumed: %+v", e)
	}
	if strings.Contains(p.Stderr(), "silent") {
		t.Errorf("someone was called silent:\n%s", p.Stderr())
	}
}
