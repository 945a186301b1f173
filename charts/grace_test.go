package chart

import (
	"testing"
	"time"

	"github.com/sortie-soak/sortie/driver"
)

// kubeletDefaultGrace is what Kubernetes gives a pod that does not say.
const kubeletDefaultGrace = 30 * time.Second

// minWriteMargin is the least time the test accepts between the end of
// the driver's wait for cancelled executions and the kubelet's SIGKILL:
// the report and the results stream are written and synced in it.
const minWriteMargin = 10 * time.Second

// driverGrace is the driver pod's terminationGracePeriodSeconds.
func driverGrace(t *testing.T, r *rendered) time.Duration {
	t.Helper()
	if r.job == nil {
		t.Fatal("no driver Job")
	}
	g := r.job.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil {
		return kubeletDefaultGrace
	}
	return time.Duration(*g) * time.Second
}

// TestDriverGraceOutlastsItsInterrupt holds the driver pod's grace to the
// driver's own interrupt path. On SIGTERM (eviction, a node drain, kubectl
// delete pod) sortie run cancels every running execution, waits up to its
// InterruptWait for the engines' answers (they drain the cancelled
// executions and answer), then writes the report and the stream. The
// kubelet kills the pod terminationGracePeriodSeconds after the SIGTERM:
// a grace no longer than the wait loses the report.
func TestDriverGraceOutlastsItsInterrupt(t *testing.T) {
	wait := driver.DefaultOptions().InterruptWait

	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	job, _ := c.Values["job"].(map[string]any)
	switch def, ok := job["interruptWaitSeconds"].(float64); {
	case !ok:
		t.Errorf("values.yaml has no job.interruptWaitSeconds (%v)", job["interruptWaitSeconds"])
	case time.Duration(def)*time.Second < wait:
		t.Errorf("job.interruptWaitSeconds defaults to %vs, shorter than the driver's InterruptWait %s", def, wait)
	}

	for _, tc := range []struct {
		name   string
		values map[string]any
		wait   time.Duration
	}{
		{"defaults", vals("plan", readPlan(t)), wait},
		{"a longer wait", vals("plan", readPlan(t), "job.interruptWaitSeconds", 120), 120 * time.Second},
		{"the least margin", vals("plan", readPlan(t), "job.writeMarginSeconds", int(minWriteMargin/time.Second)), wait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			grace := driverGrace(t, renderDecode(t, tc.values))
			if grace < tc.wait+minWriteMargin {
				t.Errorf("driver pod grace %s: the kubelet kills it %s after the driver's %s wait for cancelled engines, before the report is surely written (want at least %s)",
					grace, grace-tc.wait, tc.wait, minWriteMargin)
			}
		})
	}
}
