//go:build lab

package lab_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	chart "github.com/sortie-soak/sortie/charts"
	"github.com/sortie-soak/sortie/e2e/soak"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

// TestIntegrationLabTeardown holds `soak teardown` to the run's saved
// verdict on the real cluster: while a run's load is on (no SAVED yet) it
// refuses and leaves the release as it was; once the run is saved it
// uninstalls the release and keeps the report PVC; and a second run in the
// same namespace then installs over the kept PVC and passes with exact
// counts.
func TestIntegrationLabTeardown(t *testing.T) {
	m := theLab(t)
	cs := labClient(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := t.TempDir()
	first := filepath.Join(dir, "first")
	t.Cleanup(func() { teardown(t, first) })

	b := startRun(t, ctx, filepath.Join(dir, "first.txt"),
		append(runArgs(m), "--duration", "30s", "--settle", "5s", "--watch-interval", "20s", "--dir", first)...)
	b.waitLoad(t)
	out, err := teardownRun(ctx, first)
	t.Logf("%s", bytes.TrimSpace(out))
	if cli.Code(err) != cli.ExitFail || !regexp.MustCompile(`(?m)^REFUSED \S+ has no SAVED`).Match(out) {
		t.Errorf("soak teardown of a run under load: exit %d (%v), want %d and a REFUSED line", cli.Code(err), err, cli.ExitFail)
	}
	checkRelease(t, ctx, cs, m.Namespace, first, true)

	r := <-b.done
	logVerdicts(t, r.out)
	if r.err != nil {
		t.Fatalf("the first run: %v", r.err)
	}
	if _, err := os.Stat(filepath.Join(first, "SAVED")); err != nil {
		t.Fatalf("the first run saved nothing: %v", err)
	}
	out, err = teardownRun(ctx, first)
	t.Logf("%s", bytes.TrimSpace(out))
	if err != nil {
		t.Fatalf("soak teardown of a saved run: %v", err)
	}
	checkRelease(t, ctx, cs, m.Namespace, first, false)

	second := filepath.Join(dir, "second")
	t.Cleanup(func() { teardown(t, second) })
	out2, err := soakRun(t, ctx, filepath.Join(dir, "second.txt"), nil,
		append(runArgs(m), "--duration", "30s", "--settle", "5s", "--watch-interval", "20s", "--dir", second)...)
	logVerdicts(t, out2)
	if err != nil {
		t.Fatalf("a second run in %s: %v", m.Namespace, err)
	}
	checkE2E(t, out2, second, m.Nodes)
	a, b2 := runEnv(t, first), runEnv(t, second)
	if a.Get("NAMESPACE") != b2.Get("NAMESPACE") || a.Get("PVC") == "" || a.Get("PVC") != b2.Get("PVC") {
		t.Errorf("the two runs: namespace %s and %s, report PVC %q and %q; want one namespace and the kept PVC reused",
			a.Get("NAMESPACE"), b2.Get("NAMESPACE"), a.Get("PVC"), b2.Get("PVC"))
	}
}

// teardownRun runs `soak teardown --dir run`, and returns its output.
func teardownRun(ctx context.Context, run string) ([]byte, error) {
	var out bytes.Buffer
	err := soak.Run(ctx, []string{"teardown", "--dir", run}, &out, &out)
	return out.Bytes(), err
}

// runEnv reads a run directory's run.env.
func runEnv(t *testing.T, run string) record.Env {
	t.Helper()
	v, err := record.ReadEnvFile(filepath.Join(run, "run.env"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkRelease: the run's engines DaemonSet and driver Job are there
// (installed) or gone, and its report PVC is there either way.
func checkRelease(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, run string, installed bool) {
	t.Helper()
	env := runEnv(t, run)
	names := chart.NamesFor(env.Get("RELEASE"))
	_, derr := cs.AppsV1().DaemonSets(ns).Get(ctx, names.EngineWorkload, metav1.GetOptions{})
	_, jerr := cs.BatchV1().Jobs(ns).Get(ctx, names.Job, metav1.GetOptions{})
	if installed && (derr != nil || jerr != nil) {
		t.Errorf("after the refusal: daemonset/%s: %v, job/%s: %v; want the release untouched", names.EngineWorkload, derr, names.Job, jerr)
	}
	if !installed && (!apierrors.IsNotFound(derr) || !apierrors.IsNotFound(jerr)) {
		t.Errorf("after the teardown: daemonset/%s: %v, job/%s: %v; want both gone", names.EngineWorkload, derr, names.Job, jerr)
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, env.Get("PVC"), metav1.GetOptions{}); err != nil {
		t.Errorf("the report PVC %s: %v", env.Get("PVC"), err)
	}
	t.Logf("RELEASE %s installed=%v: daemonset/%s %v, job/%s %v, pvc/%s kept", env.Get("RELEASE"), installed, names.EngineWorkload, derr == nil, names.Job, jerr == nil, env.Get("PVC"))
}
