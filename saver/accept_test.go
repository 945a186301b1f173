package saver

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/gate"
	"github.com/sortie-soak/sortie/internal/cli"
)

// TestSaverAcceptsWhatTheGateGrades puts one table of reports through the
// saver's decision (readReportFile: a copy is kept, and SAVED written,
// only for a report it reads) and through the gate's (sortie-gate
// --report: exit 2 for a report it cannot read). They must agree on every
// one: the saver must never write SAVED for a report the gate then
// refuses, nor refuse one the gate grades.
func TestSaverAcceptsWhatTheGateGrades(t *testing.T) {
	const exec = `{"label":"mesh/a","scenario":"mesh","rate":6,"per_backend":true,"duration_ms":1000,"elapsed_ms":1001,` +
		`"started_at":"2031-03-04T10:00:00.120Z","backends":["10.20.0.7:8443"],"results":[{"backend":"10.20.0.7:8443","elapsed_ms":1000,"counters":{"benchmark.http_2xx":6}}]}`
	for _, tc := range []struct {
		name   string
		report string // a file under testdata/, or the report itself
		accept bool
	}{
		{"this project's report", "@report.json", true},
		{"older stack, a failing execution with failures[] objects", "@older-stack-failing.json", true},
		{"an earlier report of ours, failures[] in words", `{"pass":false,"executions":[` + strings.Replace(exec, `"results"`, `"failures":["threshold counter:benchmark.http_5xx == 0 failed on the pool: actual 3"],"results"`, 1) + `]}`, true},
		{"no pass field", `{"executions":[` + exec + `]}`, true},
		{"an empty run", `{"pass":true,"executions":[]}`, true},
		{"refused at the cap, no started_at", `{"pass":false,"executions":[{"label":"mesh/a","rate":6,"refused":"execution_cap","error":"refused","backends":["x"]}]}`, true},
		{"older format: no started_at", `{"pass":true,"executions":[` + strings.Replace(exec, `"started_at":"2031-03-04T10:00:00.120Z",`, "", 1) + `]}`, false},
		{"older format: no results, nothing says why", `{"pass":true,"executions":[` + strings.Replace(exec, `,"results":[{"backend":"10.20.0.7:8443","elapsed_ms":1000,"counters":{"benchmark.http_2xx":6}}]`, "", 1) + `]}`, false},
		{"failures[] of neither shape", `{"pass":false,"executions":[` + strings.Replace(exec, `"results"`, `"failures":[3],"results"`, 1) + `]}`, false},
		{"a time that is not RFC 3339", `{"pass":true,"executions":[` + strings.Replace(exec, `2031-03-04T10:00:00.120Z`, `yesterday`, 1) + `]}`, false},
		{"a negative rate", `{"pass":true,"executions":[` + strings.Replace(exec, `"rate":6`, `"rate":-6`, 1) + `]}`, false},
		{"no label", `{"pass":true,"executions":[` + strings.Replace(exec, `"label":"mesh/a",`, "", 1) + `]}`, false},
		{"no executions", `{"pass":true}`, false},
		{"executions null", `{"pass":true,"executions":null}`, false},
		{"cut short", `{"pass":true,"executions":[` + exec[:100], false},
		{"trailing garbage", `{"pass":true,"executions":[]} {}`, false},
		{"not JSON", `<html>`, false},
		{"empty", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "report.json")
			data := []byte(tc.report)
			if name, ok := strings.CutPrefix(tc.report, "@"); ok {
				data = readFixture(t, name)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, serr := readReportFile(path)
			saver := serr == nil
			code := cli.Code(gate.Run(context.Background(), []string{"--report", path, "--backends", "1"}, io.Discard, io.Discard))
			gateReads := code != cli.ExitUsage
			if saver != gateReads {
				t.Fatalf("the saver accepts: %t (%v); the gate reads it: %t (exit %d)", saver, serr, gateReads, code)
			}
			if saver != tc.accept {
				t.Errorf("accepted: %t, want %t (%v)", saver, tc.accept, serr)
			}
		})
	}
}
