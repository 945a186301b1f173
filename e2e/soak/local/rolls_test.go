package local

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// TestLinesGolden: the lines soak local writes to rolls.log and
// faults.log, from the records it builds of its rolls and faults, are
// those of testdata/local/lines.golden, and record.ParseRolls (the gate's
// reader) reads them back as the same rolls and faults.
func TestLinesGolden(t *testing.T) {
	at := time.Date(2026, 11, 30, 15, 35, 30, 120e6, time.UTC)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	rolls := []record.Roll{
		rollRecord("svc-1", at, ms(1282), ms(2365), &record.Held{Conns: 2, Inflight: 0, AnsweredAfterTerm: 9}),
		rollRecord("svc-2", ms(5000), ms(6100), ms(7420), &record.Held{}),
		rollRecord("echo", ms(9000), ms(10001), ms(10050), nil),
		failedRollRecord("uds-echo", ms(12000), ms(12010), errors.New("target uds-echo: ready file lacks\n its addresses")),
	}
	faults := []record.Fault{
		faultRecord(Fault{Kind: TargetFail, Subject: "svc-3", At: 6 * time.Second, Count: 6}, ms(6001), ms(6410),
			record.Field{Key: "failed", Value: "6"}),
		faultRecord(Fault{Kind: TargetDown, Subject: "svc-2", At: 5 * time.Second, For: 5 * time.Second}, ms(5002), ms(10003),
			record.Field{Key: "failed", Value: "90"}),
		faultRecord(Fault{Kind: EngineKill, Subject: "node-b", At: 8 * time.Second}, ms(8000), ms(8000)),
		faultRecord(Fault{Kind: DriverFreeze, At: 10 * time.Second, For: 2 * time.Second}, ms(10000), ms(12001)),
	}
	var b strings.Builder
	for _, r := range rolls {
		b.WriteString(r.String() + "\n")
	}
	for _, f := range faults {
		b.WriteString(f.String() + "\n")
	}
	golden := filepath.Join("testdata", "local", "lines.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), b.String()); d != "" {
		t.Errorf("lines (-golden +written):\n%s", d)
	}
	got, err := record.ParseRolls(strings.NewReader(string(want)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range rolls {
		rolls[i].Line = i + 1
	}
	for i := range faults {
		faults[i].Line = len(rolls) + i + 1
	}
	if d := cmp.Diff(record.RollLog{Rolls: rolls, Faults: faults}, got); d != "" {
		t.Errorf("read back (-built +read):\n%s", d)
	}
	if !got.Rolls[0].Touched() || got.Rolls[1].Touched() || got.Rolls[2].Touched() {
		t.Errorf("touched: %v %v %v, want only the first", got.Rolls[0].Touched(), got.Rolls[1].Touched(), got.Rolls[2].Touched())
	}
}

// TestLocalRollsObserved grades a passing run directory with the rolls.log
// of its --rolls: UNOBSERVED (exit 3, its line after the gate's) when no
// rolled replica held anything at SIGTERM, PASS when one did; a failing
// run stays a FAIL.
func TestLocalRollsObserved(t *testing.T) {
	touched := "ROLLED svc-1 at=2026-11-30T15:35:30.120Z took=2s end=2026-11-30T15:35:32.485Z term=2026-11-30T15:35:31.402Z held_conns=2 held_inflight=0 answered_after_term=9\n"
	idle := "ROLLED svc-2 at=2026-11-30T15:35:30.120Z took=2s end=2026-11-30T15:35:32.485Z term=2026-11-30T15:35:31.402Z held_conns=0 held_inflight=0 answered_after_term=0\n"
	unknown := "ROLLED echo at=2026-11-30T15:35:30.120Z took=2s end=2026-11-30T15:35:32.485Z term=2026-11-30T15:35:31.402Z\n"
	failed := "FAILED uds-echo at=2026-11-30T15:35:30.120Z took=0s end=2026-11-30T15:35:30.200Z: start: no\n"
	for _, tc := range []struct {
		name, run, rolls string
		rollsFlag        bool
		code             int
		unobserved       string // the UNOBSERVED line's start, "" for none
	}{
		{"one roll touched", "clean", idle + touched + unknown, true, cli.ExitOK, ""},
		{"none touched", "clean", idle + unknown + failed, true, cli.ExitUnproven, "UNOBSERVED rolls=2 touched=0: "},
		{"no roll at all", "clean", failed, true, cli.ExitUnproven, "UNOBSERVED rolls=0 touched=0: "},
		{"without --rolls nothing is asked of rolls", "clean", idle, false, cli.ExitOK, ""},
		{"a FAIL stays a FAIL", "cancelled", idle, true, cli.ExitFail, ""},
		{"a rolls.log it cannot read", "clean", "ROLLED svc-1 at=never took=1s\n", true, cli.ExitFail, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := driverLocal(t, "")
			l.o.Rolls = tc.rollsFlag
			copyRun(t, filepath.Join("testdata", "local", tc.run), l.dir, reportFile, sharesFile, enginesFile)
			if err := os.WriteFile(filepath.Join(l.dir, rollsLog), []byte(tc.rolls), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout bytes.Buffer
			err := l.grade(context.Background(), &stdout, io.Discard)
			if code := cli.Code(err); code != tc.code {
				t.Fatalf("exit %d (%v), want %d\n%s", code, err, tc.code, stdout.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			last := lines[len(lines)-1]
			if tc.unobserved == "" {
				if strings.Contains(stdout.String(), "UNOBSERVED") {
					t.Errorf("an UNOBSERVED line in:\n%s", stdout.String())
				}
				return
			}
			if !strings.HasPrefix(last, tc.unobserved) || !strings.HasPrefix(lines[len(lines)-2], "VERDICT PASS") {
				t.Errorf("want the gate's VERDICT PASS, then %q...; got:\n%s", tc.unobserved, stdout.String())
			}
		})
	}
}

// TestLocalOptionsValidate covers the options this file's features add.
func TestLocalOptionsValidate(t *testing.T) {
	o := DefaultLocalOptions()
	o.Duration = 20 * time.Second
	o.RollIdle = true
	o.Protocol = "websocket"
	o.Faults = []Fault{
		{Kind: TargetFail, Subject: "svc-1", At: 19 * time.Second, For: 2 * time.Second},
		{Kind: TargetFail, Subject: "svc-1", At: 19 * time.Second, Count: 5},
		{Kind: TargetFail, Subject: "svc-1", At: 20 * time.Second, Count: 5},
		// node-b restarts twice, one after the other: taken; node-a's
		// second restart kills while the first's engine is still down.
		{Kind: EngineRestart, Subject: "node-b", At: 4 * time.Second, For: 3 * time.Second},
		{Kind: EngineRestart, Subject: "node-b", At: 10 * time.Second, For: 3 * time.Second},
		{Kind: EngineRestart, Subject: "node-a", At: 4 * time.Second, For: 5 * time.Second},
		{Kind: EngineRestart, Subject: "node-a", At: 8 * time.Second, For: 3 * time.Second},
	}
	err := o.Validate()
	if err != nil && strings.Contains(err.Error(), "node-b") {
		t.Errorf("two restarts of node-b one after the other were refused: %v", err)
	}
	for _, want := range []string{
		"--fault engine-restart:node-a@4s+5s and --fault engine-restart:node-a@8s+3s: the node's engine is still down",
		"--roll-idle: rolls nothing without --rolls",
		`--protocol "websocket": want http1, h2, grpc, tcp or udp`,
		"--fault target-fail:svc-1@19s+2s: the window ends after the load",
		"--fault target-fail:svc-1@20s+5: starts after the load ends",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "@19s+5:") {
		t.Errorf("a count that starts within the load was refused: %v", err)
	}
	// Target faults are HTTP answers: a raw protocol refuses them.
	o = DefaultLocalOptions()
	o.Protocol = ProtocolTCP
	o.Faults = []Fault{{Kind: TargetDown, Subject: "svc-1", At: time.Second, For: time.Second}}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--protocol tcp has none") {
		t.Errorf("Validate of a target fault with --protocol tcp: %v, want it refused", err)
	}
}
