package gate

import (
	"bytes"
	"context"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// Small seeds on purpose: the fuzzer minimizes every new input it finds,
// and on the multi-kilobyte fixture files that takes minutes per input.
// Even so, stream inputs minimize slowly; fuzz them with a cap, e.g.
//
//	go test ./gate -run '^$' -fuzz '^FuzzGradeStream$' -fuzztime 2m -fuzzminimizetime 3s
const (
	seedClean    = `{"label":"s/a","scenario":"s","rate":9,"per_backend":true,"duration_ms":1000,"elapsed_ms":1001,"started_at":"2026-05-01T08:00:00.000Z","ended_at":"2026-05-01T08:00:01.001Z","backends":["10.0.1.5:8443","10.0.2.6:8443"],"results":[{"backend":"10.0.1.5:8443","elapsed_ms":1000,"started_at":"2026-05-01T08:00:00.100Z","counters":{"benchmark.http_2xx":9},"statistics":{"benchmark_http_client.latency_2xx":{"count":9,"unit":"ns","max":9e6,"p50":1e6,"p99":5e6}}},{"backend":"10.0.2.6:8443","elapsed_ms":1000,"counters":{"benchmark.http_2xx":8,"benchmark.pool_overflow":1}}]}`
	seedLost     = `{"label":"s/b","scenario":"s","rate":0.5,"duration_ms":2000,"ramp_ms":1000,"elapsed_ms":2100,"started_at":"2026-05-01T08:00:00.000Z","backends":["10.0.1.5:8443","10.0.2.6:8443"],"results":[{"backend":"10.0.2.6:8443","elapsed_ms":9000,"cancelled":true,"counters":{"benchmark.http_2xx":1,"benchmark.stream_resets":1,"benchmark.stream_resets_remote_reset":1}}],"backend_errors":[{"backend":"10.0.1.5:8443","error":"lost\nagain"}],"thresholds":[{"expr":"counter:benchmark.stream_resets == 0","pass":false,"actual":"1"}]}`
	seedRefused  = `{"label":"s/c","rate":3,"duration_ms":1000,"elapsed_ms":5,"started_at":"2026-05-01T08:00:00.000Z","refused":"execution_cap","error":"backend x refused a start because the engine is at its cap","backends":["10.0.1.5:8443"],"backend_errors":[{"backend":"10.0.1.5:8443","error":"cap","refused":"execution_cap"}]}`
	seedNotRun   = `{"label":"s/d","rate":6,"duration_ms":1000,"elapsed_ms":0,"not_run":true,"error":"not run","backends":["10.0.1.5:8443"]}`
	seedNoResult = `{"label":"s/e","rate":9,"duration_ms":1000,"elapsed_ms":10,"started_at":"2026-05-01T08:00:00.000Z","error":"execution cancelled","backends":["10.0.1.5:8443","10.0.1.5:8443"]}`
)

// seedLines are the small seeds as stream lines.
var seedLines = []string{seedClean, seedLost, seedRefused, seedNotRun, seedNoResult}

// gradeAll grades a source every way the command can, and checks the
// verdict is one the command can print.
func gradeAll(t *testing.T, src *record.Source) {
	shares := []Share{{Name: "a", RPS: "9", rps: big.NewRat(9, 1)}, {Name: "s/b", RPS: "0.5", rps: big.NewRat(1, 2)}}
	for _, in := range []Input{
		{Source: src, Backends: 2, FloorPct: big.NewRat(99, 1)},
		{Source: src, Backends: 1, FloorPct: big.NewRat(995, 10), Shares: shares, MaxP99: 1e6,
			Engines: []Engine{{"10.0.1.5", "node-a"}}, Log: &LogSummary{Skipped: []string{"s/a"}, NotRun: 1}},
	} {
		v := Grade(in)
		if v.Result != ResultPass && v.Result != ResultFail && v.Result != ResultUnobserved {
			t.Fatalf("verdict %q", v.Result)
		}
		if v.Counts.Passed+v.Counts.Failed != v.Counts.Targets {
			t.Fatalf("passed %d + failed %d != targets %d", v.Counts.Passed, v.Counts.Failed, v.Counts.Targets)
		}
		for _, tg := range v.Targets {
			if tg.Status == ResultPass && len(tg.Reasons) > 0 {
				t.Fatalf("%s passes with reasons %v", tg.Name, tg.Reasons)
			}
			if tg.Status == ResultFail && len(tg.Reasons) == 0 {
				t.Fatalf("%s fails without a reason", tg.Name)
			}
		}
		var buf bytes.Buffer
		if err := WriteText(&buf, v, true); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		if last := lines[len(lines)-1]; !strings.HasPrefix(last, "VERDICT "+v.Result+" targets=") {
			t.Fatalf("the last line is not the VERDICT line: %q", last)
		}
		for _, l := range lines {
			if l == "" {
				t.Fatalf("an empty output line (a report text was not kept on one line):\n%s", buf.String())
			}
		}
		if err := WriteJSON(io.Discard, v); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzGradeReport grades every report the reader accepts: whatever it
// holds, the verdict is one the command can print.
func FuzzGradeReport(f *testing.F) {
	f.Add([]byte(`{"pass":false,"cancelled":true,"executions":[` + strings.Join(seedLines, ",") + `]}`))
	f.Add([]byte(`{"pass":true,"executions":[` + seedClean + `,` + seedClean + `]}`))
	for _, s := range []string{
		`{"pass":true,"executions":[]}`,
		`{"pass":false,"executions":[{"label":"s/a","rate":9,"per_backend":true,"duration_ms":1000,"ramp_ms":500,"started_at":"2026-05-01T08:00:00.000Z","backends":["10.0.1.5:8443","10.0.1.5:8443"],"results":[{"backend":"10.0.1.5:8443","counters":{"benchmark.http_2xx":9}},{"backend":"10.0.1.5:8443","counters":{}}],"backend_errors":[{"backend":"x","error":"a\nb"}]}]}`,
		`{"executions":[{"label":"a","rate":1e30,"duration_ms":9223372036854775807,"started_at":"2026-05-01T08:00:00Z","error":"x"}]}`,
		`{"executions":[{"label":"s/a","not_run":true},{"label":"s/a","refused":"execution_cap","error":"e","started_at":"2026-05-01T08:00:00Z"}]}`,
		"<html>", "", "null", "[]",
		// Hostile numbers: a string rate, a counter twice, a p99 out of
		// its domain, totals that would wrap at 2^64, a long error.
		`{"executions":[{"label":"s/a","rate":"9","duration_ms":1000,"started_at":"2026-05-01T08:00:00Z","error":"x"}]}`,
		`{"executions":[{"label":"s/a","rate":9,"duration_ms":1000,"started_at":"2026-05-01T08:00:00Z","results":[{"backend":"b","counters":{"benchmark.http_5xx":1,"benchmark.http_5xx":0}}]}]}`,
		`{"executions":[{"label":"s/a","rate":9,"duration_ms":1000,"started_at":"2026-05-01T08:00:00Z","results":[{"backend":"b","counters":{"benchmark.http_2xx":9},"statistics":{"benchmark_http_client.latency_2xx":{"count":9,"unit":"ns","p99":-1}}}]}]}`,
		`{"executions":[{"label":"s/a","rate":9,"duration_ms":1000,"started_at":"2026-05-01T08:00:00Z","results":[{"backend":"a","counters":{"benchmark.http_5xx":9223372036854775808}},{"backend":"b","counters":{"benchmark.http_5xx":9223372036854775808}}]}]}`,
		// A node whose engine restarted: its gap, and gaps no driver
		// writes (out of order, counts past the planned).
		`{"executions":[{"label":"s/a","rate":9,"per_backend":true,"duration_ms":1000,"started_at":"2026-05-01T08:00:00Z","backends":["a"],"results":[{"backend":"a","backend_name":"node-b","started_at":"2026-05-01T08:00:00Z","planned":9,"counters":{"benchmark.http_2xx":7},"gap_unsent":[{"from":"2026-05-01T08:00:00.100Z","to":"2026-05-01T08:00:00.300Z","count":2,"why":"engine restarted"}]}]}]}`,
		`{"executions":[{"label":"s/a","rate":9,"duration_ms":1000,"started_at":"2026-05-01T08:00:00Z","results":[{"backend":"a","planned":1,"counters":{},"gap_unsent":[{"from":"2026-05-01T08:00:05Z","to":"2026-05-01T08:00:06Z","count":18446744073709551615,"why":"` + strings.Repeat("w", 2000) + `"},{"from":"2026-05-01T08:00:06Z","to":"2026-05-01T08:00:06Z","count":1}]}]}]}`,
		`{"executions":[{"label":"s/a","rate":2,"duration_ms":2000,"started_at":"2026-05-01T08:00:00Z","error":"` + strings.Repeat("e", 5000) + `","results":[{"backend":"a","elapsed_ms":1000,"counters":{"benchmark.http_2xx":4}}]}]}`,
		// A key twice at the top level; the classes of hostile peers.
		`{"executions":[],"executions":[` + seedClean + `],"Pass":true}`,
		`{"executions":[{"label":"s/a","rate":9,"duration_ms":1000,"started_at":"2026-05-01T08:00:00Z","results":[{"backend":"b","planned":9,"counters":{"benchmark.http_2xx":5,"benchmark.request_timeout":2,"benchmark.late_dropped":2,"benchmark.connection_protocol_error":1}}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src, err := record.ReadReport(bytes.NewReader(data))
		if err != nil {
			return
		}
		gradeAll(t, src)
	})
}

// FuzzGradeStream does the same for a results stream.
func FuzzGradeStream(f *testing.F) {
	all := strings.Join(seedLines, "\n") + "\n"
	for _, s := range []string{
		all,
		all + all,                     // two runs
		all[:len(all)/2] + "\n" + all, // a fragment, then a run
		all + seedClean[:80],          // a torn last line
		"", "\n\n", "{}\n", "garbage\n", `{"label":"s/a"}` + "\n" + `{"label":"s/a","started_at":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src, err := record.ReadStream(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(src.Runs) == 0 || len(src.Executions) == 0 {
			t.Fatalf("no error, yet %d runs and %d executions", len(src.Runs), len(src.Executions))
		}
		last := src.Runs[len(src.Runs)-1]
		if last.Executions != len(src.Executions) {
			t.Fatalf("the last run has %d executions, the source %d", last.Executions, len(src.Executions))
		}
		gradeAll(t, src)
	})
}

// FuzzRun runs the whole command on a fuzzed report and stream: whatever
// the bytes, it never panics, and input the readers refuse is exit 2.
func FuzzRun(f *testing.F) {
	for _, s := range []string{
		`{"pass":true,"executions":[` + seedClean + `,` + seedNotRun + `]}`,
		seedClean + "\n" + seedLost + "\n",
		"garbage", "{",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		rep := filepath.Join(dir, DirReport)
		stream := filepath.Join(dir, DirStream)
		shares := filepath.Join(dir, DirShares)
		for p, b := range map[string][]byte{rep: data, stream: data, shares: []byte("svc-a 9\n")} {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_, rerr := record.ReadReport(bytes.NewReader(data))
		_, serr := record.ReadStream(bytes.NewReader(data))
		for _, tc := range []struct {
			args    []string
			refused bool
		}{
			{[]string{"--report", rep, "--backends", "2"}, rerr != nil},
			{[]string{"--stream", stream, "--shares", shares, "--backends", "2", "--per-node"}, serr != nil},
			{[]string{"--report", rep, "--backends", "2", "--json"}, rerr != nil},
		} {
			var stdout bytes.Buffer
			code := cli.Code(Run(context.Background(), tc.args, &stdout, io.Discard))
			switch {
			case tc.refused && code != cli.ExitUsage:
				t.Fatalf("%v: refused input exits %d, want 2", tc.args, code)
			case !tc.refused && code == cli.ExitUsage:
				t.Fatalf("%v: readable input exits 2", tc.args)
			case code != 0 && code != 1 && code != 2 && code != 3:
				t.Fatalf("%v: exit %d", tc.args, code)
			}
		}
	})
}
