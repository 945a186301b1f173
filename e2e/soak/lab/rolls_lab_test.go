//go:build lab

package lab_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/e2e/soak/lab"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// rollsDuration is the load of a rolls run: both targets are rolled one
// minute in and each roll (two replicas, one at a time, each new one ready
// for minReadySeconds and each old one given its preStop) is over well
// before the end.
const rollsDuration = "150s"

// rollSchedule is a churn schedule that rolls every fixture target once,
// together, a minute after T0.
func rollSchedule(t *testing.T, dir string) string {
	t.Helper()
	s := "# Every fixture target rolled once, a minute into the load.\n"
	for _, tg := range lab.Targets {
		s += fmt.Sprintf("1  roll deployment/%s  -n %s\n", tg.Name, lab.TargetNamespace)
	}
	p := filepath.Join(dir, "rolls.txt")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// soakArgs are the flags of `soak run soak` against the lab with the
// schedule rolls, into run.
func soakArgs(m lab.Manifest, rolls, run string) []string {
	args := runArgs(m)
	args[1] = "soak"
	return append(args, "--rolls", rolls, "--duration", rollsDuration, "--settle", "5s", "--watch-interval", "20s", "--dir", run)
}

// TestIntegrationLabSoakRolls is `soak run soak` with real rollout
// restarts of the fixture targets, and its negative control. With
// draining targets (the lab's: maxUnavailable 0, minReadySeconds, preStop,
// sortie-target draining on SIGTERM) every planned request is answered 2xx
// on every node while both are rolled: SOAK PASS, each roll ROLLED and
// without failures. With the same targets run --no-drain, the rolls reset
// the connections the engines held to the old replicas: SOAK FAIL, the
// failures counted against each rolled target's ROLL, none unattributed.
func TestIntegrationLabSoakRolls(t *testing.T) {
	m := theLab(t)
	cs := labClient(t, m)
	dir := t.TempDir()
	rolls := rollSchedule(t, dir)

	// Both runs hold each request in the targets for a while, as a real
	// backend does: without it the fixture answers in about a millisecond,
	// almost nothing is in flight when an old replica exits, and a
	// non-draining exit would cost the engines nothing to catch.
	setTargetFlags(t, cs, respondDelay)
	t.Cleanup(func() { setTargetFlags(t, cs) })

	t.Run("draining", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
		defer cancel()
		run := filepath.Join(dir, "drain")
		t.Cleanup(func() { teardown(t, run) })
		out, err := soakRun(t, ctx, filepath.Join(dir, "drain.txt"), nil, soakArgs(m, rolls, run)...)
		logVerdicts(t, out)
		if err != nil {
			t.Fatalf("soak run soak with draining targets: %v", err)
		}
		mustMatch(t, out,
			`(?m)^SOAK PASS gate=0 watchdog=PASS churn=complete saver=saved dir=`+regexp.QuoteMeta(run)+`$`,
			fmt.Sprintf(`(?m)^VERDICT PASS targets=%d passed=%d failed=0 not_run=0 backends=%d lost_backends=0 report_pass=true$`, len(lab.Targets), len(lab.Targets), len(m.Nodes)))
		checkRolls(t, out, false)
		r, err := record.ReadReportFile(filepath.Join(run, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		checkCounts(t, r, m.Nodes)
	})

	t.Run("no-drain", func(t *testing.T) {
		setTargetFlags(t, cs, respondDelay, "--no-drain")
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
		defer cancel()
		run := filepath.Join(dir, "nodrain")
		t.Cleanup(func() { teardown(t, run) })
		out, err := soakRun(t, ctx, filepath.Join(dir, "nodrain.txt"), nil, soakArgs(m, rolls, run)...)
		logVerdicts(t, out)
		if cli.Code(err) != cli.ExitFail {
			t.Fatalf("soak run soak with non-draining targets: exit %d (%v), want %d", cli.Code(err), err, cli.ExitFail)
		}
		mustMatch(t, out,
			`(?m)^SOAK FAIL gate=1 watchdog=PASS churn=complete saver=saved dir=`+regexp.QuoteMeta(run)+`$`,
			`(?m)^VERDICT FAIL .* lost_backends=0 `)
		checkRolls(t, out, true)
	})
}

// rollLine is the gate's line of one roll of the churn driver.
var rollLine = regexp.MustCompile(`(?m)^ROLL  (\S+)  at=\S+ end=\S+ settle=\S+  failures=(none|\d+)(?: \[([^\]]*)\])?(?: classes=(\S+))?`)

// checkRolls holds the run's lines to one ROLLED line per target and one
// gate ROLL line per target: without failures, or (failing) with failures
// on that target only, counted on nodes of the lab, and nothing
// unattributed.
func checkRolls(t *testing.T, out string, failing bool) {
	t.Helper()
	for _, tg := range lab.Targets {
		ref := lab.TargetNamespace + "/deployment/" + tg.Name
		mustMatch(t, out, `(?m)^ROLLED `+regexp.QuoteMeta(ref)+` at=\S+ took=\d+s`)
		var seen bool
		for _, l := range rollLine.FindAllStringSubmatch(out, -1) {
			if l[1] != ref {
				continue
			}
			seen = true
			switch {
			case !failing && l[2] != "none":
				t.Errorf("the roll of %s with draining targets has failures: %s", ref, l[0])
			case failing && l[2] == "none":
				t.Errorf("the roll of %s with non-draining targets has no failures: %s", ref, l[0])
			case failing:
				checkRollNodes(t, l)
				if !regexp.MustCompile(`(^|,)stream_resets=\d+`).MatchString(l[4]) {
					t.Errorf("the failures of the roll of %s are not resets: %s", ref, l[0])
				}
				t.Logf("ROLL %s failures=%s [%s] classes=%s", ref, l[2], l[3], l[4])
			}
		}
		if !seen {
			t.Errorf("no ROLL line of %s", ref)
		}
	}
	if regexp.MustCompile(`(?m)^UNATTRIBUTED `).MatchString(out) {
		t.Errorf("failures outside every roll's bracket: the negative control's resets must be the rolls'")
	}
}

// checkRollNodes: the failures of a ROLL line are counted per node, on
// nodes of the lab.
func checkRollNodes(t *testing.T, l []string) {
	t.Helper()
	nodes := regexp.MustCompile(`(\S+)=\d+`).FindAllStringSubmatch(l[3], -1)
	if len(nodes) == 0 {
		t.Errorf("the failures of %s are not attributed to a node: %s", l[1], l[0])
	}
	for _, n := range nodes {
		if !slices.Contains(labNodes(), n[1]) {
			t.Errorf("the failures of %s are counted on %s, not a node of the lab: %s", l[1], n[1], l[0])
		}
	}
}

// labNodes are the names the lab gives its nodes.
func labNodes() []string {
	var out []string
	for _, n := range (lab.Layout{Nodes: lab.MaxNodes}).NodeList() {
		out = append(out, n.Name)
	}
	return out
}

// respondDelay is the fixture targets' response delay in the rolls runs:
// at the lab's rates it keeps several requests in flight on every replica
// (about 5 of svc-1's and 2 of svc-2's per node).
const respondDelay = "--response-delay=250ms"

// setTargetFlags runs every fixture target with the given flags of
// sortie-target (--no-drain, --response-delay) and without the others, as
// the lab deploys them otherwise, and waits for the rollout.
func setTargetFlags(t *testing.T, cs kubernetes.Interface, flags ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, tg := range lab.Targets {
		d, err := cs.AppsV1().Deployments(lab.TargetNamespace).Get(ctx, tg.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := &d.Spec.Template.Spec.Containers[0]
		c.Args = slices.DeleteFunc(c.Args, func(a string) bool {
			return a == "--no-drain" || strings.HasPrefix(a, "--response-delay=")
		})
		c.Args = append(c.Args, flags...)
		if _, err := cs.AppsV1().Deployments(lab.TargetNamespace).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tg := range lab.Targets {
		waitFor(t, 5*time.Minute, "the rollout of "+tg.Name, func(ctx context.Context) (bool, error) {
			d, err := cs.AppsV1().Deployments(lab.TargetNamespace).Get(ctx, tg.Name, metav1.GetOptions{})
			return err == nil && rolledOut(d), err
		})
	}
	t.Logf("TARGETS flags=%q on %d targets, rolled out", flags, len(lab.Targets))
}

// rolledOut says whether a Deployment's last change has rolled out: every
// replica updated and available, no old one left.
func rolledOut(d *appsv1.Deployment) bool {
	want := *d.Spec.Replicas
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}
