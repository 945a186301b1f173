//go:build lab

package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sortie-soak/sortie/churn"
	"github.com/sortie-soak/sortie/e2e/soak/lab"
)

// TestIntegrationLabNewSA runs a new-serviceaccount step of sortie-churn on
// the real cluster: its pod, under an account made a moment before, runs
// the pushed engine image as `sortie-engine oneshot` against the fixture
// targets, and the step reads the tally back from the pod's log. Every
// request of the burst is a 2xx in the tally, and the step's objects are
// gone afterwards.
func TestIntegrationLabNewSA(t *testing.T) {
	m := theLab(t)
	img := m.Images["sortie-engine"]
	if img == "" {
		t.Fatalf("the lab pushed no sortie-engine image: %v", m.Images)
	}
	cs := labClient(t, m)
	dir := t.TempDir()
	sched := filepath.Join(dir, "newsa.txt")
	if err := os.WriteFile(sched, []byte("0 new-serviceaccount auto -n "+lab.TargetNamespace+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var targets, want []string
	for _, tg := range lab.Targets {
		targets = append(targets, fmt.Sprintf("%s=http://%s.%s:%d/", tg.Name, tg.Name, lab.TargetNamespace, lab.TargetPort))
		want = append(want, tg.Name+":ok=20,non2xx=0,connerr=0,codes=-")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	args := []string{"--kubeconfig", m.Kubeconfig, "--context", m.Context, "--schedule", sched,
		"--t0", time.Now().UTC().Format(time.RFC3339), "--namespace", lab.TargetNamespace,
		"--newsa-image", img, "--newsa-targets", strings.Join(targets, ","),
		"--newsa-requests", "20", "--newsa-rate", "5", "--newsa-hold", "60", "--poll", "2", "--rollout-timeout", "3m"}
	var stdout, stderr bytes.Buffer
	err := churn.Run(ctx, args, &stdout, &stderr)
	t.Logf("sortie-churn:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("sortie-churn: %v\n%s", err, stderr.String())
	}
	mustMatch(t, stdout.String(),
		`(?m)^ROLLED `+lab.TargetNamespace+`/newsa/sa-new-\d+ at=\S+ took=\d+s node=\S+ ready=\d+s tally=`+strings.Join(want, ";")+`$`,
		`(?m)^CHURN COMPLETE steps=1 rolled=0 shrunk=0 new_serviceaccounts=1 findings=0 `)
	// The step deleted its objects; the Deployment's pod goes with it.
	sel := metav1.ListOptions{LabelSelector: "sortie.io/new-serviceaccount"}
	waitFor(t, time.Minute, "the step's objects to be gone", func(ctx context.Context) (bool, error) {
		sas, err := cs.CoreV1().ServiceAccounts(lab.TargetNamespace).List(ctx, sel)
		if err != nil {
			return false, err
		}
		deps, err := cs.AppsV1().Deployments(lab.TargetNamespace).List(ctx, sel)
		if err != nil {
			return false, err
		}
		return len(sas.Items) == 0 && len(deps.Items) == 0, nil
	})
}
