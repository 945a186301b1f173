package saver

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const fullRunEnv = `# written by the kickoff
CONTEXT=kind-soak
NAMESPACE=soak
JOB=sortie-run
PVC=sortie-report
REPORT=runs/r1/report.json
STREAM=runs/r1/results.jsonl
LIVE=runs/r1/results.live.jsonl
PLANNED_DURATION=900s
LOAD_START=2031-03-04T10:00:00Z
ENGINE_SELECTOR=app.kubernetes.io/component=engine,app.kubernetes.io/instance=soak
READER_IMAGE=registry.example/reader:1@sha256:0000
SOME_OTHER_TOOL=ignored
`

func TestParseRunEnv(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    RunEnv
		wantErr []string // substrings, all present; nil means no error
		invalid []string // substrings of Validate's error
	}{{
		name: "full",
		in:   fullRunEnv,
		want: RunEnv{
			Context: "kind-soak", Namespace: "soak", Job: "sortie-run", PVC: "sortie-report",
			Report: "runs/r1/report.json", Stream: "runs/r1/results.jsonl", Live: "runs/r1/results.live.jsonl",
			PlannedDuration: 900 * time.Second, LoadStart: time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC),
			EngineSelector: "app.kubernetes.io/component=engine,app.kubernetes.io/instance=soak",
			ReaderImage:    "registry.example/reader:1@sha256:0000",
		},
	}, {
		name: "shell-style: export, quotes, seconds, epoch, driver image, last wins",
		in: "export NAMESPACE='soak'\nJOB=\"old\"\nJOB=\"sortie-run\"\nPVC=p\nREPORT=r.json\n" +
			"PLANNED_DURATION=28800\nLOAD_START=1930384800\nDRIVER_IMAGE=reg/sortie:2\nREADER_COMMAND=/bin/cat --\n\n",
		want: RunEnv{
			Namespace: "soak", Job: "sortie-run", PVC: "p", Report: "r.json",
			PlannedDuration: 8 * time.Hour, LoadStart: time.Unix(1930384800, 0).UTC(),
			ReaderImage: "reg/sortie:2", ReaderCommand: []string{"/bin/cat", "--"},
		},
	}, {
		name:    "bad lines and values, each with its line",
		in:      "NAMESPACE=soak\nthis is not a line\nPLANNED_DURATION=fifteen minutes\nLOAD_START=yesterday\n9KEY=x\n",
		wantErr: []string{"run.env:2: want KEY=VALUE", "run.env:3: PLANNED_DURATION", "run.env:4: LOAD_START", "run.env:5: want KEY=VALUE"},
		want:    RunEnv{Namespace: "soak"},
	}, {
		name: "incomplete: every missing key named",
		in:   "NAMESPACE=soak\n",
		want: RunEnv{Namespace: "soak"},
		invalid: []string{"JOB is missing", "PVC is missing", "REPORT is missing",
			"READER_IMAGE (or DRIVER_IMAGE) is missing", "PLANNED_DURATION is missing"},
	}, {
		name: "paths that leave the PVC, bad names, bad selector",
		in: "NAMESPACE=Soak_1\nJOB=Sortie\nPVC=p\nREPORT=/etc/passwd\nSTREAM=../x.jsonl\nLIVE=/x.live.jsonl\n" +
			"PLANNED_DURATION=1s\nREADER_IMAGE=i\nENGINE_SELECTOR=a in (\n",
		want: RunEnv{Namespace: "Soak_1", Job: "Sortie", PVC: "p", Report: "/etc/passwd", Stream: "../x.jsonl", Live: "/x.live.jsonl",
			PlannedDuration: time.Second, ReaderImage: "i", EngineSelector: "a in ("},
		invalid: []string{"NAMESPACE \"Soak_1\"", "JOB \"Sortie\"", "REPORT: \"/etc/passwd\" must be relative",
			"STREAM: \"../x.jsonl\" must be a clean path", "LIVE: \"/x.live.jsonl\" must be relative", "ENGINE_SELECTOR"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRunEnv(strings.NewReader(tc.in))
			if tc.wantErr == nil && err != nil {
				t.Fatalf("ParseRunEnv: %v", err)
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want it to say %q", err, w)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RunEnv (-want +got):\n%s", diff)
			}
			verr := got.Validate()
			if tc.invalid == nil && tc.wantErr == nil && verr != nil {
				t.Errorf("Validate: %v", verr)
			}
			for _, w := range tc.invalid {
				if verr == nil || !strings.Contains(verr.Error(), w) {
					t.Errorf("Validate error %v, want it to say %q", verr, w)
				}
			}
		})
	}
}

func TestReaderDefaults(t *testing.T) {
	e := RunEnv{Job: "sortie-run"}
	if got := e.readerPod(); got != "sortie-run-reader" {
		t.Errorf("reader pod %q", got)
	}
	if got := e.readerCommand(); !cmp.Equal(got, []string{"cat"}) {
		t.Errorf("reader command %q", got)
	}
}

// FuzzParseRunEnv: run.env is written by another program and edited by
// hand. Whatever it holds, parsing never panics, and a run.env that parses
// and validates names paths that stay inside the PVC.
func FuzzParseRunEnv(f *testing.F) {
	f.Add(fullRunEnv)
	f.Add("export A='b'\nPLANNED_DURATION=900\n")
	f.Add("REPORT=../../etc/shadow\nSTREAM=a/./b\n")
	f.Add("LOAD_START=99999999999999999999\nPLANNED_DURATION=-5s\n")
	f.Add("=\n\"=\"\nK='\n")
	f.Fuzz(func(t *testing.T, in string) {
		env, err := ParseRunEnv(strings.NewReader(in))
		if err != nil || env.Validate() != nil {
			return
		}
		for _, p := range []string{env.Report, env.Stream} {
			if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "../") || p == ".." || strings.Contains(p, "/../") {
				t.Fatalf("path %q leaves the PVC", p)
			}
		}
		if env.PlannedDuration <= 0 {
			t.Fatalf("planned duration %s validated", env.PlannedDuration)
		}
	})
}
