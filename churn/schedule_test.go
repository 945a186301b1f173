package churn

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
)

func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want []Step // nil when an error is expected
		errs []string
	}{
		{
			name: "every step",
			text: "# comment\n\n0 roll deployment/svc-1\n12 roll ds/aether-proxy -n aether-system # trailing\n12 roll sts/db -n data\n30 shrink svc-5 90\n31 shrink deployment/svc-4 5 -n other\n40 new-serviceaccount auto\n41 new-serviceaccount -n t worker-1\n",
			want: []Step{
				{Minute: 0, Kind: StepRoll, Target: Ref{"ns", KindDeployment, "svc-1"}, Line: 3},
				{Minute: 12, Kind: StepRoll, Target: Ref{"aether-system", KindDaemonSet, "aether-proxy"}, Line: 4},
				{Minute: 12, Kind: StepRoll, Target: Ref{"data", KindStatefulSet, "db"}, Line: 5},
				{Minute: 30, Kind: StepShrink, Target: Ref{"ns", KindDeployment, "svc-5"}, Seconds: 90, Line: 6},
				{Minute: 31, Kind: StepShrink, Target: Ref{"other", KindDeployment, "svc-4"}, Seconds: 5, Line: 7},
				{Minute: 40, Kind: StepNewSA, Target: Ref{Namespace: "ns"}, Node: "auto", Line: 8},
				{Minute: 41, Kind: StepNewSA, Target: Ref{Namespace: "t"}, Node: "worker-1", Line: 9},
			},
		},
		{
			name: "sample",
			text: "30 sample ds/aether-proxy -n aether-system\n31 sample deployment/svc-1\n",
			want: []Step{
				{Minute: 30, Kind: StepSample, Target: Ref{"aether-system", KindDaemonSet, "aether-proxy"}, Line: 1},
				{Minute: 31, Kind: StepSample, Target: Ref{"ns", KindDeployment, "svc-1"}, Line: 2},
			},
		},
		{
			name: "daemon-outage",
			text: "162 daemon-outage --daemonset aether-uds-csi --victim aether-test/app=uds-echo -n aether-system\n270 daemon-outage --victim t/app in (a,b) --daemonset ds/csi\n",
			errs: []string{"s.txt:2:5: daemon-outage takes --daemonset"},
		},
		{
			name: "daemon-outage either order",
			text: "162 daemon-outage --daemonset aether-uds-csi --victim aether-test/app=uds-echo,tier!=x -n aether-system\n270 daemon-outage --victim t/app=uds-cr-echo --daemonset daemonset/csi\n",
			want: []Step{
				{Minute: 162, Kind: StepOutage, Target: Ref{"aether-system", KindDaemonSet, "aether-uds-csi"}, Victim: Victim{"aether-test", "app=uds-echo,tier!=x"}, Line: 1},
				{Minute: 270, Kind: StepOutage, Target: Ref{"ns", KindDaemonSet, "csi"}, Victim: Victim{"t", "app=uds-cr-echo"}, Line: 2},
			},
		},
		{name: "daemon-outage bad victim", text: "5 daemon-outage --daemonset d --victim app=x\n6 daemon-outage --daemonset d --victim t/=x\n7 daemon-outage --daemonset d --daemonset e\n", errs: []string{
			`s.txt:1:40: --victim "app=x": want <namespace>/<label selector>`, `s.txt:2:42: --victim selector "=x"`, "s.txt:3:31: --daemonset is given twice"}},
		{name: "sample without kind", text: "5 sample aether-proxy\n", errs: []string{`s.txt:1:10: "aether-proxy": want <kind>/<name>`}},
		{name: "empty", text: "# nothing\n\n", errs: []string{"s.txt: no steps"}},
		{name: "bad minute", text: "-1 roll deployment/a\nx roll deployment/a\n", errs: []string{
			`s.txt:1:1: "-1" is not a minute after T0`, `s.txt:2:1: "x" is not a minute after T0`}},
		{name: "no step", text: "5\n", errs: []string{"s.txt:1:2: a step is missing after the minute"}},
		{name: "unknown step", text: "5 restart deployment/a\n", errs: []string{`s.txt:1:3: unknown step "restart"`}},
		{name: "unknown kind", text: "5 roll pod/a\n", errs: []string{`s.txt:1:8: unknown kind "pod"`}},
		{name: "no kind", text: "5 roll svc-1\n", errs: []string{`s.txt:1:8: "svc-1": want <kind>/<name>`}},
		{name: "bad name", text: "5 roll deployment/Svc_1\n", errs: []string{`s.txt:1:19: name "Svc_1"`}},
		{name: "extra argument", text: "5 roll deployment/a b\n", errs: []string{"s.txt:1:21: roll takes <kind>/<name> [-n namespace]"}},
		{name: "bad namespace", text: "5 roll deployment/a -n Bad\n", errs: []string{`s.txt:1:24: namespace "Bad"`}},
		{name: "dangling -n", text: "5 roll deployment/a -n\n", errs: []string{"s.txt:1:21: -n needs a namespace"}},
		{name: "two namespaces", text: "5 roll deployment/a -n x -n y\n", errs: []string{"s.txt:1:26: the namespace is given twice"}},
		{name: "shrink a daemonset", text: "5 shrink daemonset/a 10\n", errs: []string{`s.txt:1:10: only a deployment can be shrunk`}},
		{name: "shrink seconds", text: "5 shrink a 0\n6 shrink b 1m\n", errs: []string{
			`s.txt:1:12: "0" is not a number of seconds`, `s.txt:2:12: "1m" is not a number of seconds`}},
		{name: "shrink arity", text: "5 shrink a\n", errs: []string{"s.txt:1:3: shrink takes <deployment> <seconds>"}},
		{name: "bad node", text: "5 new-serviceaccount Node_1\n", errs: []string{`s.txt:1:22: node "Node_1"`}},
		{name: "out of order", text: "10 roll deployment/a\n5 roll deployment/b\n", errs: []string{"s.txt:2:1: minute 5 comes after minute 10"}},
		{name: "rolled twice", text: "5 roll deployment/a\n5 roll deploy/a\n", errs: []string{"s.txt:2:1: ns/deployment/a is rolled twice at minute 5 (first on line 1)"}},
		{name: "roll during shrink", text: "5 shrink a 120\n6 roll deployment/a\n8 roll deployment/a\n", errs: []string{
			"s.txt:2:1: ns/deployment/a is held at 0 replicas by the shrink on line 1"}},
		{name: "every error at once", text: "x roll deployment/a\n5 roll pod/b\n6 jump\n", errs: []string{
			`s.txt:1:1: "x"`, `s.txt:2:8: unknown kind "pod"`, `s.txt:3:3: unknown step "jump"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSchedule("s.txt", strings.NewReader(tc.text), "ns")
			if tc.errs == nil {
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(tc.want, s.Steps); d != "" {
					t.Errorf("steps (-want +got):\n%s", d)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; steps %+v", s.Steps)
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error\n%v\nlacks %q", err, want)
				}
			}
			if n, want := len(strings.Split(err.Error(), "\n")), len(tc.errs); n != want {
				t.Errorf("%d errors, want %d:\n%v", n, want, err)
			}
		})
	}
}

func TestScheduleEndAndCounts(t *testing.T) {
	s, err := ParseSchedule("s", strings.NewReader("1 roll deployment/a\n2 shrink b 90\n2 new-serviceaccount auto\n"), "ns")
	if err != nil {
		t.Fatal(err)
	}
	r, sh, n := s.Counts()
	if r != 1 || sh != 1 || n != 1 || s.End().String() != "3m30s" {
		t.Errorf("counts %d %d %d end %v", r, sh, n, s.End())
	}
}

// FuzzParseSchedule: the parser never panics, and what it accepts is in
// time order with every step complete.
func FuzzParseSchedule(f *testing.F) {
	soak, err := os.ReadFile("schedules/soak.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(soak))
	f.Add("5 roll deployment/a -n x\n5 shrink b 10\n")
	f.Add("1 new-serviceaccount auto -n\n")
	f.Add("1 daemon-outage --daemonset csi --victim t/app=x,b!=c -n s\n")
	f.Add("# only\n\t\r\n3 roll ds/x -n -n\n")
	f.Add("99999999999999999999 roll deployment/a\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseSchedule("f", strings.NewReader(text), "ns")
		if err != nil {
			return
		}
		last := -1
		for _, st := range s.Steps {
			if st.Minute < last {
				t.Fatalf("accepted out of order: %+v", s.Steps)
			}
			last = st.Minute
			switch st.Kind {
			case StepRoll, StepSample:
				if st.Target.Kind == "" || st.Target.Name == "" || st.Target.Namespace == "" {
					t.Fatalf("incomplete %s %+v", st.Kind, st)
				}
			case StepShrink:
				if st.Seconds < 1 || st.Target.Name == "" {
					t.Fatalf("incomplete shrink %+v", st)
				}
			case StepNewSA:
				if st.Node == "" {
					t.Fatalf("incomplete new-serviceaccount %+v", st)
				}
			case StepOutage:
				if st.Target.Kind != KindDaemonSet || st.Target.Name == "" || st.Victim.Namespace == "" {
					t.Fatalf("incomplete daemon-outage %+v", st)
				}
				if _, err := labels.Parse(st.Victim.Selector); err != nil || st.Victim.Selector == "" {
					t.Fatalf("daemon-outage with selector %q: %v", st.Victim.Selector, err)
				}
			default:
				t.Fatalf("unknown kind %+v", st)
			}
		}
	})
}
