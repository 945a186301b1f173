package gate

import (
	"bytes"
	"context"
	"github.com/sortie-soak/sortie/record"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sortie-soak/sortie/internal/cli"
)

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{DirReport, DirShares, DirEngines, DirLog} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rolled := t.TempDir()
	for _, f := range []string{DirReport, DirChurn, DirRolls, DirFaults, DirLive} {
		if err := os.WriteFile(filepath.Join(rolled, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	streamOnly := t.TempDir()
	if err := os.WriteFile(filepath.Join(streamOnly, DirStream), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := func(d, f string) string { return filepath.Join(d, f) }
	for _, tc := range []struct {
		name string
		args []string
		want Options // compared when err is empty
		err  string  // parse or Validate error
	}{
		{name: "report", args: []string{"--report", "r.json", "--backends", "5"},
			want: Options{Report: "r.json", Backends: 5, FloorPct: "99", Settle: DefaultSettle}},
		{name: "every flag", args: []string{"--stream", "s.jsonl", "--shares", "sh.tsv", "--backends", "3", "--engines", "e.tsv", "--floor-pct", "99.5", "--per-node", "--log", "l", "--json", "--max-p99", "250ms"},
			want: Options{Stream: "s.jsonl", Shares: "sh.tsv", Backends: 3, Engines: "e.tsv", FloorPct: "99.5", PerNode: true, Log: "l", JSON: true, MaxP99: 250 * time.Millisecond, Settle: DefaultSettle}},
		{name: "dir fills every file", args: []string{"--dir", dir},
			want: Options{Dir: dir, Report: p(dir, DirReport), Shares: p(dir, DirShares), Engines: p(dir, DirEngines), Log: p(dir, DirLog), FloorPct: "99", Settle: DefaultSettle}},
		{name: "an explicit flag wins over dir", args: []string{"--dir", dir, "--shares", "other.tsv", "--backends", "4"},
			want: Options{Dir: dir, Report: p(dir, DirReport), Shares: "other.tsv", Engines: p(dir, DirEngines), Log: p(dir, DirLog), FloorPct: "99", Backends: 4, Settle: DefaultSettle}},
		{name: "dir without a report grades its stream", args: []string{"--dir", streamOnly, "--shares", "s", "--backends", "2"},
			want: Options{Dir: streamOnly, Stream: p(streamOnly, DirStream), Shares: "s", Backends: 2, FloorPct: "99", Settle: DefaultSettle}},
		{name: "dir fills the rolls, faults and live record", args: []string{"--dir", rolled, "--backends", "2"},
			want: Options{Dir: rolled, Report: p(rolled, DirReport), Rolls: []string{p(rolled, DirChurn), p(rolled, DirRolls), p(rolled, DirFaults)}, Live: p(rolled, DirLive), Backends: 2, FloorPct: "99", Settle: DefaultSettle}},
		{name: "explicit rolls, live and settle win over dir", args: []string{"--dir", rolled, "--backends", "2", "--rolls", "a.log", "--rolls", "b.log", "--live", "l.jsonl", "--settle", "3s"},
			want: Options{Dir: rolled, Report: p(rolled, DirReport), Rolls: []string{"a.log", "b.log"}, Live: "l.jsonl", Backends: 2, FloorPct: "99", Settle: 3 * time.Second}},
		{name: "html", args: []string{"--report", "r.json", "--backends", "5", "--html", "out/report.html"},
			want: Options{Report: "r.json", Backends: 5, FloorPct: "99", Settle: DefaultSettle, HTML: "out/report.html"}},
		{name: "negative settle", args: []string{"--report", "r", "--backends", "1", "--settle", "-1s"}, err: "--settle -1s must not be negative"},
		{name: "both sources", args: []string{"--report", "r", "--stream", "s", "--shares", "x", "--backends", "1"}, err: "exclusive"},
		{name: "no source", args: []string{"--backends", "1"}, err: "need --report FILE, --stream FILE or --dir RUNDIR"},
		{name: "empty dir", args: []string{"--dir", t.TempDir(), "--backends", "1"}, err: "holds neither report.json nor results.jsonl"},
		{name: "stream without shares", args: []string{"--stream", "s", "--backends", "1"}, err: "--stream needs --shares"},
		{name: "no backends", args: []string{"--report", "r"}, err: "need --backends N"},
		{name: "negative backends", args: []string{"--report", "r", "--backends", "-1"}, err: "must be positive"},
		{name: "floor not a number", args: []string{"--report", "r", "--backends", "1", "--floor-pct", "most"}, err: "not a number"},
		{name: "floor above 100", args: []string{"--report", "r", "--backends", "1", "--floor-pct", "101"}, err: "at most 100"},
		{name: "floor zero", args: []string{"--report", "r", "--backends", "1", "--floor-pct", "0"}, err: "above 0"},
		{name: "negative p99", args: []string{"--report", "r", "--backends", "1", "--max-p99", "-1s"}, err: "must not be negative"},
		{name: "every problem at once", args: []string{"--report", "r", "--stream", "s", "--floor-pct", "200"}, err: "exclusive: give one source\n--stream needs --shares"},
		{name: "every problem at once, to the last", args: []string{"--report", "r", "--stream", "s", "--floor-pct", "200"}, err: "at most 100\nneed --backends N"},
		{name: "positional argument", args: []string{"--report", "r", "extra"}, err: `unexpected argument "extra"`},
		{name: "unknown flag", args: []string{"--reprot", "r"}, err: "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, &bytes.Buffer{})
			if err == nil {
				o = o.withDir()
				err = o.Validate()
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			o.notes = nil
			if diff := cmp.Diff(tc.want, o, cmp.AllowUnexported(Options{})); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("--help: %v", err)
	}
	help := stderr.String()
	for _, want := range []string{
		"-report", "-stream", "-shares", "-backends", "-engines", "-floor-pct", "-per-node", "-log", "-dir", "-json", "-max-p99",
		DirReport, DirStream, DirShares, DirEngines, DirLog,
		"PASS  <target>  rate=", "FAIL  <target>", "NODE  <target>  <node>", "LOST  <node> (<address>)", "WINDOW  dispatched=",
		"VERDICT PASS|FAIL|UNOBSERVED targets= passed= failed= not_run= backends= lost_backends= report_pass=",
		"skipped_lines=", "driver saturated:", "in flight at the end:", "the LAST run is graded", "3 UNOBSERVED",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	// Every failure counter of the TCP, UDP and WebSocket modes is named.
	all := append(append([]string(nil), record.Outcomes...), append(record.TCPDetails, record.UDPDetails...)...)
	for _, name := range append(all, record.StreamDetails...) {
		if record.InZeroFailureSet(name) && (strings.Contains(name, "tcp_") || strings.Contains(name, "udp_") || strings.Contains(name, "stream_")) && !strings.Contains(help, short(name)) {
			t.Errorf("--help does not list %s of the zero-failure set", short(name))
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("--help wrote to stdout: %q", stdout.String())
	}
}

func TestRunUnusableInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"pass":true,"executions":[]}`)
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"missing report", []string{"--report", filepath.Join(dir, "nope.json"), "--backends", "2"}, "read report"},
		{"missing stream", []string{"--stream", filepath.Join(dir, "nope.jsonl"), "--shares", good, "--backends", "2"}, "read results stream"},
		{"missing shares", []string{"--report", good, "--shares", filepath.Join(dir, "nope.tsv"), "--backends", "2"}, "read share table"},
		{"bad shares", []string{"--report", good, "--shares", write("bad.tsv", "a b c\n"), "--backends", "2"}, "share table"},
		{"bad engines", []string{"--report", good, "--engines", write("bad-engines.tsv", "lonely\n")}, "engine list"},
		{"empty engines, no backends", []string{"--report", good, "--engines", write("empty.tsv", "")}, "lists no engine"},
		{"garbage report", []string{"--report", write("g.json", "\x00\x01"), "--backends", "2"}, "not a sortie JSON report"},
		{"bad flag", []string{"--floor-pct"}, "flag needs an argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := Run(context.Background(), tc.args, &stdout, &bytes.Buffer{})
			if code := cli.Code(err); code != cli.ExitUsage {
				t.Fatalf("exit %d (%v), want 2", code, err)
			}
			if !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %q, want one containing %q", err, tc.err)
			}
			if stdout.Len() != 0 {
				t.Errorf("unusable input wrote a verdict: %q", stdout.String())
			}
		})
	}
}
