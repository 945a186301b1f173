package bench

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseFlags(t *testing.T) {
	def := DefaultOptions("/peers")
	tests := []struct {
		name    string
		args    []string
		want    func(o *Options)
		wantErr string // a substring of the error; "" for none
	}{
		{name: "defaults", args: nil, want: func(*Options) {}},
		{name: "quick", args: []string{"--quick"}, want: func(o *Options) {
			o.Quick = true
			o.SoakDuration, o.HighDuration, o.StepDuration, o.LowDuration = quickSoak, quickHigh, quickStep, quickLow
		}},
		{name: "an explicit duration wins over quick", args: []string{"--quick", "--soak-duration", "10s"}, want: func(o *Options) {
			o.Quick = true
			o.SoakDuration, o.HighDuration, o.StepDuration, o.LowDuration = 10*time.Second, quickHigh, quickStep, quickLow
		}},
		{name: "selections", args: []string{"--scenarios", "low,soak", "--peers", "none", "--step-rates", "none", "--json"}, want: func(o *Options) {
			o.Scenarios, o.Peers, o.StepRates, o.JSON = []string{"low", "soak"}, nil, nil, true
		}},
		{name: "engine shape", args: []string{"--engine-workers", "2", "--engine-connections", "8", "--engine-max-pending", "0", "--engine-gomaxprocs", "2", "--step-rates", "20000,40000", "--nice", "-5"}, want: func(o *Options) {
			o.EngineWorkers, o.EngineConnections, o.EngineMaxPending, o.EngineGOMAXPROCS, o.StepRates, o.Nice = 2, 8, 0, 2, []int{20000, 40000}, -5
		}},
		{name: "timeline comparison", args: []string{"--engine-progress", "1s", "--baseline-engine", "/tmp/main/sortie-bench"}, want: func(o *Options) {
			o.EngineProgress, o.BaselineEngine = time.Second, "/tmp/main/sortie-bench"
		}},
		{name: "baselines together", args: []string{"--baseline-engine", "/tmp/main/sortie-bench", "--baseline-together"}, want: func(o *Options) {
			o.BaselineEngine, o.BaselineTogether = "/tmp/main/sortie-bench", true
		}},
		{name: "together without a baseline", args: []string{"--baseline-together"}, wantErr: "--baseline-together needs --baseline-engine"},
		{name: "progress too often", args: []string{"--engine-progress", "1ms"}, wantErr: "--engine-progress 1ms must be 0 or at least 10ms"},
		{name: "unknown scenario", args: []string{"--scenarios", "soak,fast"}, wantErr: `unknown scenario "fast"`},
		{name: "unknown peer", args: []string{"--peers", "k6"}, wantErr: `unknown peer "k6"`},
		{name: "same core", args: []string{"--target-cpu", "1"}, wantErr: "must differ"},
		{name: "rate not split evenly", args: []string{"--engine-workers", "3"}, wantErr: "not a multiple of --engine-workers 3"},
		{name: "fractional duration", args: []string{"--soak-duration", "1500ms"}, wantErr: "whole seconds"},
		{name: "descending steps", args: []string{"--step-rates", "2000,1000"}, wantErr: "must ascend"},
		{name: "bad step", args: []string{"--step-rates", "fast"}, wantErr: `rate "fast"`},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "nice out of range", args: []string{"--nice", "-21"}, wantErr: "--nice -21"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFlags(tt.args, io.Discard, "/peers")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := def
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	o := DefaultOptions("")
	o.Scenarios = nil
	o.LowRate = 0
	o.EngineConnections = 0
	o.LowDuration = -time.Second
	err := o.Validate()
	for _, want := range []string{"--scenarios", "--low-rate", "--engine-connections", "--low-duration"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want a problem with %s", err, want)
		}
	}
	if err := DefaultOptions("").Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseFlags([]string{"--help"}, &out, "")
	if !errors.Is(err, errHelp) {
		t.Fatalf("err = %v, want errHelp", err)
	}
	for _, want := range []string{"ASSERT", "GOAL", "CEILING", "SCENARIO TOOL RATE", "-cpuprofile-dir", "-engine-workers", "not installed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}
