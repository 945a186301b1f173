package churn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sortie-soak/sortie/internal/kube/kubetest"
)

// asMade is svc-N as the soak's workloads are made: 4 replicas, a 10 s
// preStop sleep and the default 30 s grace period.
func asMade(name string) *appsv1.Deployment {
	d := deployment("aether-test", name, 4)
	d.Spec.Template.Spec.Containers[0].Lifecycle.PreStop.Sleep.Seconds = 10
	return d
}

// caseWorkloads applies testdata/preflight/<name>.yaml to the five as-made
// workloads, leaving out the absent ones.
func caseWorkloads(t *testing.T, name string, absent []string) []runtime.Object {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "preflight", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patches := map[string][]byte{}
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if doc == nil {
			continue
		}
		meta, _ := doc["metadata"].(map[string]any)
		target, _ := meta["name"].(string)
		if target == "" {
			t.Fatalf("%s: a patch names no workload", name)
		}
		if patches[target], err = json.Marshal(doc); err != nil {
			t.Fatal(err)
		}
	}
	var objs []runtime.Object
	for i := 1; i <= 5; i++ {
		n := fmt.Sprintf("svc-%d", i)
		if slices.Contains(absent, n) {
			continue
		}
		d := asMade(n)
		if p, ok := patches[n]; ok {
			orig, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			merged, err := strategicpatch.StrategicMergePatch(orig, p, appsv1.Deployment{})
			if err != nil {
				t.Fatalf("%s: patch %s: %v", name, n, err)
			}
			d = &appsv1.Deployment{}
			if err := json.Unmarshal(merged, d); err != nil {
				t.Fatal(err)
			}
			delete(patches, n)
		}
		objs = append(objs, d)
	}
	if len(patches) > 0 {
		t.Fatalf("%s: patches of unknown workloads: %v", name, patches)
	}
	return objs
}

// TestPreflightBashCases runs the preflight over the cases of the bash
// harness's workload fixtures: what it refuses is refused here, each
// refusal names the workload and ends with its fix.
func TestPreflightBashCases(t *testing.T) {
	tests := []struct {
		name   string
		absent []string
		stuck  []string // workloads whose rollout the fake controller holds still
		want   []string // one substring per FAIL line, in order
	}{
		{name: "as-made"},
		{name: "absent", absent: []string{"svc-2"}, want: []string{"svc-2: does not exist"}},
		{name: "differs", want: []string{
			"svc-1: replicas=0",
			"svc-2: only 3 of 4 replicas available",
			"svc-2: container app's preStop sleeps 3s",
			"svc-3: its pods lack the label aether.io/managed=true",
			"svc-3: container app's preStop sleeps 3s",
			`svc-4: runs under ServiceAccount "default", not its own "svc-4"`,
			"svc-5: maxUnavailable=25%; want 0",
			"svc-5: minReadySeconds=0; want >= 10",
			"svc-5: container app has no preStop hook",
		}},
		{name: "midroll", stuck: []string{"svc-1", "svc-3", "svc-4"}, want: []string{
			"svc-1: a rollout is in progress (observedGeneration=4/4 updated=1/4 replicas=5)",
			"svc-3: a rollout is in progress (observedGeneration=4/8",
			"svc-4: a rollout is in progress (observedGeneration=4/4 updated=3/4 replicas=5)",
		}},
		{name: "noprobe", want: []string{
			"svc-2: container app has no readiness probe",
			`svc-4: container app's readiness probe runs "/bin/true"`,
		}},
		{name: "shortgrace", want: []string{
			"svc-1: terminationGracePeriodSeconds=0 is less than its preStop sleep 10s + drain 5s",
			"svc-2: terminationGracePeriodSeconds=10 is less than",
			"svc-3: terminationGracePeriodSeconds=11 is less than",
		}},
		{name: "shortsleep", want: []string{
			"svc-2: container app's preStop sleeps 3s, less than the 10s",
			"svc-3: container app's preStop sleeps 9s, less than the 10s",
		}},
		{name: "loud", want: []string{
			"svc-1: container app's preStop sleeps 3s",
		}},
	}
	var schedule strings.Builder
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&schedule, "%d roll deployment/svc-%d\n", i, i)
	}
	path := writeSchedule(t, schedule.String())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(caseWorkloads(t, tc.name, tc.absent)...)
			for _, n := range tc.stuck {
				s.stuck["aether-test/"+n] = true
			}
			stdout, code := run(t, context.Background(), s, "--schedule", path, "--preflight", "--namespace", "aether-test")
			var fails []string
			for _, l := range strings.Split(stdout, "\n") {
				if strings.HasPrefix(l, "PREFLIGHT FAIL ") {
					fails = append(fails, l)
				}
			}
			if len(fails) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(fails), len(tc.want), stdout)
			}
			for i := range min(len(fails), len(tc.want)) {
				if !strings.Contains(fails[i], "PREFLIGHT FAIL aether-test/deployment/"+tc.want[i]) {
					t.Errorf("problem %d:\n got %s\nwant it to name %s", i+1, fails[i], tc.want[i])
				}
				if !strings.Contains(fails[i], " -- fix: ") {
					t.Errorf("problem %d names no fix: %s", i+1, fails[i])
				}
			}
			wantCode := 0
			if len(tc.want) > 0 {
				wantCode = 2
			}
			if code != wantCode {
				t.Errorf("exit %d, want %d", code, wantCode)
			}
			kubetest.Golden(t, filepath.Join("testdata", "preflight", tc.name+".golden"), stdout, *update)
		})
	}
}

// TestPreflightMeshOptions: the mesh bar is configurable, and applies to the
// mesh namespaces only.
func TestPreflightMeshOptions(t *testing.T) {
	objs := caseWorkloads(t, "differs", nil)
	path := writeSchedule(t, "1 roll deployment/svc-3\n2 roll deployment/svc-4\n")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 3}, // svc-3: label and sleep; svc-4: its account
		{[]string{"--managed-label", "", "--sa-rule", "any"}, 1},
		{[]string{"--managed-label", "", "--sa-rule", "any", "--min-prestop-sleep", "3"}, 0},
		{[]string{"--managed-label", "", "--sa-rule", "any", "--min-prestop-sleep", "0"}, 0},
		{[]string{"--mesh-namespaces", "aether-system"}, 0},                                                   // svc-N are not mesh workloads then
		{[]string{"--drain", "30", "--managed-label", "", "--sa-rule", "any", "--min-prestop-sleep", "3"}, 2}, // 30 s grace < sleep + 30 s
	} {
		s := newSim(objs...)
		stdout, _ := run(t, context.Background(), s, append([]string{"--schedule", path, "--preflight", "--namespace", "aether-test"}, tc.args...)...)
		if got := strings.Count(stdout, "PREFLIGHT FAIL "); got != tc.want {
			t.Errorf("%v: %d problems, want %d\n%s", tc.args, got, tc.want, stdout)
		}
	}
}

func TestPreStopSleep(t *testing.T) {
	for _, tc := range []struct {
		cmd  []string
		want int
		ok   bool
	}{
		{[]string{"sleep", "10"}, 10, true},
		{[]string{"/bin/sleep", "12"}, 12, true},
		{[]string{"/bin/sh", "-c", "sleep 15"}, 15, true},
		{[]string{"sh", "-c", "exec sleep 20"}, 20, true},
		{[]string{"sh", "-c", "sleep 5 && kill 1"}, 0, false},
		{[]string{"/drain.sh"}, 0, false},
		{[]string{"sleep", "-1"}, 0, false},
		{[]string{"sleep", "1e9"}, 0, false},
	} {
		d, ok := preStopSleep(&corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: tc.cmd}})
		if ok != tc.ok || int(d.Seconds()) != tc.want {
			t.Errorf("%q: %v, %v; want %ds, %v", tc.cmd, d, ok, tc.want, tc.ok)
		}
	}
}
