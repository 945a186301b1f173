package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// sampleOutput is an Output with a row of every kind, stable for golden
// files.
func sampleOutput() *Output {
	return &Output{
		StartedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Command: "sortie-bench --quick",
		Go: "go1.26.8", Platform: "linux/amd64", CPUs: 2, Model: "Test CPU", TargetCPU: 0, GeneratorCPU: 1,
		LoadavgBefore: [3]float64{1.5, 1.25, 1}, LoadavgAfter: [3]float64{2, 1.5, 1},
		Rows: []Row{
			{Scenario: "soak", Tool: "engine", Processes: 1, Installed: true, Rate: 60, Duration: "6s", Planned: 360,
				Sent: 360, OK: 360, AchievedRate: 60.1, Held: true, CPUSeconds: 0.02, WallSeconds: 6.5, CPUCores: 0.0031,
				USPerReq: 55.6, PeakRSSMiB: 14.9, TargetCores: 0.01, P50NS: 649000, P99NS: 16100000, LatencyFrom: "intended",
				Notes: []string{"p50/p99 worst of 8 executions"}},
			{Scenario: "soak", Tool: "vegeta x8", Processes: 8, Rate: 60, Duration: "6s", Notes: []string{"not installed"}},
			{Scenario: "high", Tool: "engine", Processes: 1, Installed: true, Rate: 50000, Duration: "3s", Planned: 150000,
				Sent: 21229, OK: 21229, Errors: 128771, AchievedRate: 6915, CPUSeconds: 0.96, WallSeconds: 3.4, CPUCores: 0.28,
				USPerReq: 45.2, PeakRSSMiB: 15.5, TargetCores: 0.2, P50NS: 164000000, P99NS: 1228000000, LatencyFrom: "intended",
				Notes: []string{"pool_overflow 128771"}},
			{Scenario: "high", Tool: "wrk", Processes: 1, Installed: true, Rate: 0, Duration: "3s", Sent: 45785, OK: 45785,
				Held: true, CPUSeconds: 0.48, WallSeconds: 3.1, CPUCores: 0.15, USPerReq: 10.5, PeakRSSMiB: 15.2, TargetCores: 0.3,
				P50NS: 2830000, P99NS: 28300000, LatencyFrom: "actual"},
		},
		Checks: []Check{
			{Kind: checkAssert, Scenario: "soak", Tool: "engine", What: "sent=360 want=360", Pass: true},
			{Kind: checkGoal, Scenario: "soak", Tool: "engine", What: "cpu_cores=0.0031 <= 0.005", Pass: true},
			{Kind: checkAssert, Scenario: "high", Tool: "engine", What: "sent=21229 ok=21229 errors=128771 planned=150000", Pass: false},
			{Kind: checkGoal, Scenario: "high", Tool: "engine", What: "held=false sent=21229/150000 (14.15%) achieved=6915/50000 rps", Pass: false},
			{Kind: checkGoal, Scenario: "high", Tool: "engine", What: "us_per_req=45.20 <= 7.7", Pass: false},
		},
		Ceiling: &Ceiling{Held: 0, NotHeld: 50000, EngineCores: 0.28, TargetCores: 0.2, Bottleneck: "neither"},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

func TestWriteOutputGolden(t *testing.T) {
	var text, js bytes.Buffer
	if err := writeOutput(&text, sampleOutput(), false); err != nil {
		t.Fatal(err)
	}
	golden(t, "output.golden.txt", text.Bytes())
	if err := writeOutput(&js, sampleOutput(), true); err != nil {
		t.Fatal(err)
	}
	golden(t, "output.golden.json", js.Bytes())
	var back Output
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*sampleOutput(), back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
}

func TestChecks(t *testing.T) {
	o := DefaultOptions("")
	o.SoakDuration = 60 * time.Second
	soak := Row{Scenario: scenarioSoak, Tool: "engine", Sent: 3600, OK: 3600, CPUCores: 0.004, PeakRSSMiB: 25}
	short := soak
	short.Sent, short.OK = 3599, 3599
	high := Row{Scenario: scenarioHigh, Tool: "engine", Held: true, Planned: 750000, Sent: 750000, OK: 750000, USPerReq: 8}
	// Every request sent and answered, but not at the rate: the counts
	// hold, the rate is a goal missed.
	slow := high
	slow.Held = false
	overflow := high
	overflow.Held, overflow.Sent, overflow.OK, overflow.Errors = false, 749000, 749000, 1000
	low := Row{Scenario: scenarioLow, Tool: "engine", Held: true, Planned: 20000, Sent: 20000, OK: 20000, USPerReq: 12, P99NS: 300000}
	fortio := Row{Scenario: scenarioLow, Tool: "fortio", Installed: true, P99NS: 400000}
	vegeta := Row{Scenario: scenarioLow, Tool: "vegeta", Installed: true, P99NS: 250000}
	absent := Row{Scenario: scenarioLow, Tool: "wrk", P99NS: 1}
	// Beside a baseline engine: the ratios of their CPU.
	soakOn := Row{Scenario: scenarioSoak, Tool: toolEngine, Sent: 3600, OK: 3600, CPUSeconds: 0.21, CPUCores: 0.0035, PeakRSSMiB: 16}
	soakBase := Row{Scenario: scenarioSoak, Tool: toolBaseline, Installed: true, Planned: 3600, Sent: 3600, OK: 3600, CPUSeconds: 0.2, CPUCores: 0.0033, PeakRSSMiB: 15.8}
	highOn := high
	highOn.USPerReq = 10.6
	highBase := high
	highBase.Tool, highBase.Installed, highBase.USPerReq = toolBaseline, true, 10

	pass := func(cs []Check) []string {
		var out []string
		for _, c := range cs {
			v := "pass"
			if !c.Pass {
				v = "fail"
			}
			out = append(out, c.Kind+" "+c.Scenario+" "+strings.Fields(c.What)[0]+" "+v)
		}
		return out
	}
	tests := []struct {
		name string
		rows []Row
		want []string
	}{
		{"soak exact", []Row{soak}, []string{"ASSERT soak sent=3600 pass", "GOAL soak cpu_cores=0.0040 pass", "GOAL soak peak_rss_mib=25.0 fail"}},
		{"soak one short", []Row{short}, []string{"ASSERT soak sent=3599 fail", "GOAL soak cpu_cores=0.0040 pass", "GOAL soak peak_rss_mib=25.0 fail"}},
		{"high", []Row{high}, []string{"ASSERT high sent=750000 pass", "GOAL high held=true pass", "GOAL high us_per_req=8.00 fail"}},
		{"high not held", []Row{slow}, []string{"ASSERT high sent=750000 pass", "GOAL high held=false fail", "GOAL high us_per_req=8.00 fail"}},
		{"high with overflow", []Row{overflow}, []string{"ASSERT high sent=749000 fail", "GOAL high held=false fail", "GOAL high us_per_req=8.00 fail"}},
		// The best peer is the installed one with the lowest p99.
		{"low beside peers", []Row{low, fortio, vegeta, absent}, []string{"ASSERT low sent=20000 pass", "GOAL low held=true pass", "GOAL low us_per_req=12.00 pass", "GOAL low p99=300µs fail"}},
		{"low alone", []Row{low}, []string{"ASSERT low sent=20000 pass", "GOAL low held=true pass", "GOAL low us_per_req=12.00 pass"}},
		{"peers only", []Row{fortio}, nil},
		{"soak beside a baseline", []Row{soakOn, soakBase}, []string{"GOAL soak cpu_ratio=1.050 pass", "ASSERT soak sent=3600 pass",
			"GOAL soak cpu_cores=0.0035 pass", "GOAL soak peak_rss_mib=16.0 pass", "ASSERT soak sent=3600 pass"}},
		{"high beside a baseline", []Row{highOn, highBase}, []string{"GOAL high us_per_req_ratio=1.060 fail", "ASSERT high sent=750000 pass",
			"GOAL high held=true pass", "GOAL high us_per_req=10.60 fail", "ASSERT high sent=750000 pass"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, pass(checks(o, tt.rows))); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBottleneck(t *testing.T) {
	tests := []struct {
		engine, target float64
		want           string
	}{
		{0.5, 0.98, "target"},
		{0.95, 0.5, "engine"},
		{0.95, 0.99, "both"},
		{0.3, 0.2, "neither"},
	}
	for _, tt := range tests {
		if got := bottleneck(tt.engine, tt.target); got != tt.want {
			t.Errorf("bottleneck(%v, %v) = %s, want %s", tt.engine, tt.target, got, tt.want)
		}
	}
}

func TestFmtDur(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "-"},
		{649400 * time.Nanosecond, "649µs"},
		{16123456, "16.1ms"},
		{1500 * time.Millisecond, "1.5s"},
	}
	for _, tt := range tests {
		if got := fmtDur(tt.in); got != tt.want {
			t.Errorf("fmtDur(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
