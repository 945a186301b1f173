package teardown

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sortie-soak/sortie/e2e/soak/cluster"
	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/internal/kube/kubetest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The run of the teardown tests: release "soak" in namespace "sortie" of
// context "kind-soak", as the kickoff's tests install it.
const (
	kNS      = "sortie"
	kRelease = "soak"
	kContext = "kind-soak"
)

// fakeHelm is an installed release: it records the calls, and an uninstall
// removes it. The teardown never installs or upgrades.
type fakeHelm struct {
	rec       *kubetest.Recorder
	installed bool
}

var _ cluster.Helm = (*fakeHelm)(nil)

func (h *fakeHelm) Install(context.Context, string, string, map[string]any) error {
	return fmt.Errorf("the teardown installed a release")
}

func (h *fakeHelm) Upgrade(context.Context, string, string, map[string]any) error {
	return fmt.Errorf("the teardown upgraded a release")
}

func (h *fakeHelm) Uninstall(_ context.Context, release, ns string) error {
	h.rec.Add(fmt.Sprintf("helm uninstall %s ns=%s", release, ns))
	h.installed = false
	return nil
}

func (h *fakeHelm) Status(_ context.Context, release, ns string) (string, error) {
	h.rec.Add(fmt.Sprintf("helm status %s ns=%s", release, ns))
	if h.installed {
		return "deployed", nil
	}
	return "", cluster.ErrNoRelease
}

// tfix is one teardown test: a fake cluster holding objects, the release
// installed on a fake Helm, and the run directory.
type tfix struct {
	t      *testing.T
	cs     *fake.Clientset
	rec    *kubetest.Recorder
	helm   *fakeHelm
	dir    string
	stdout bytes.Buffer
	stderr bytes.Buffer
	// clients counts the API clients the teardown made.
	clients int
}

func newTfix(t *testing.T, objects ...runtime.Object) *tfix {
	fx := &tfix{t: t, cs: fake.NewClientset(objects...), rec: &kubetest.Recorder{}, dir: filepath.Join(t.TempDir(), "run")}
	fx.helm = &fakeHelm{rec: fx.rec, installed: true}
	fx.cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fx.rec.Add(kubetest.Line(a))
		return false, nil, nil
	})
	return fx
}

// run runs `soak teardown <args>` (args[0] is "teardown") against the fakes.
func (fx *tfix) run(args ...string) error {
	fx.t.Helper()
	env := cluster.Env{
		NewClient: func(kubeconfig, kctx, component string) (kubernetes.Interface, error) {
			if kctx != kContext {
				return nil, fmt.Errorf("context %q does not exist", kctx)
			}
			fx.clients++
			return fx.cs, nil
		},
		NewHelm: func(string, string) (cluster.Helm, error) { return fx.helm, nil },
		Clock:   clock.NewFake(time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return Run(ctx, env, args[1:], &fx.stdout, &fx.stderr)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exitCode(err error) int { return cli.Code(err) }

// exists reports whether the fake cluster holds an object.
func (fx *tfix) exists(gvr schema.GroupVersionResource, ns, name string) bool {
	_, err := fx.cs.Tracker().Get(gvr, ns, name)
	return err == nil
}

// golden is the transcript (the API actions and the Helm calls), the lines
// and the exit code, in the kickoff tests' format.
func (fx *tfix) golden(name string, err error) {
	fx.t.Helper()
	var b strings.Builder
	b.WriteString("# actions of the kickoff's client and the Helm calls, in order\n")
	b.WriteString(strings.ReplaceAll(fx.rec.String(), fx.dir, "RUNDIR"))
	b.WriteString("# output\n")
	b.WriteString(strings.ReplaceAll(fx.stdout.String(), fx.dir, "RUNDIR"))
	fmt.Fprintf(&b, "# exit %d\n", exitCode(err))
	kubetest.Golden(fx.t, filepath.Join("testdata", "kube", name+".golden"), b.String(), *update)
}

var gvrPVCs = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}

// TestTeardown runs soak teardown on the run directory of a run that was
// installed: refused without SAVED, forced, kept PVC, purged PVC.
func TestTeardown(t *testing.T) {
	const runEnv = "RUN_TAG=e2e-20310304T100000Z\nCONTEXT=kind-soak\nNAMESPACE=sortie\nRELEASE=soak\n" +
		"PVC=soak-sortie-report\nPRIORITY_CLASS=sortie-soak\nJOB=soak-sortie-driver\n"
	tests := []struct {
		name    string
		saved   bool
		runEnv  string
		args    []string
		wantPVC bool
		code    int
	}{
		{name: "refused-without-saved", runEnv: runEnv, wantPVC: true, code: cli.ExitFail},
		{name: "saved-keeps-pvc", saved: true, runEnv: runEnv, wantPVC: true},
		{name: "saved-purge", saved: true, runEnv: runEnv, args: []string{"--purge"}},
		{name: "forced-without-saved", runEnv: runEnv, args: []string{"--force"}, wantPVC: true},
		{
			// A run that aborted before run.env: the HINT's flags name it.
			name:    "forced-without-run-env",
			args:    []string{"--force", "--context", kContext, "--namespace", kNS, "--release", kRelease},
			wantPVC: true,
		},
		{name: "without-run-env-or-flags", args: []string{"--force"}, wantPVC: true, code: cli.ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newTfix(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: "soak-sortie-report"}})
			if err := os.MkdirAll(fx.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.runEnv != "" {
				write(t, filepath.Join(fx.dir, cluster.RunEnvFile), tt.runEnv)
			}
			if tt.saved {
				write(t, filepath.Join(fx.dir, "SAVED"), "2031-03-04T10:20:00Z\n")
			}
			err := fx.run(append([]string{"teardown", "--dir", fx.dir}, tt.args...)...)
			if got := exitCode(err); got != tt.code {
				t.Errorf("exit %d, want %d (%v):\n%s", got, tt.code, err, fx.stdout.String())
			}
			if got := fx.exists(gvrPVCs, kNS, "soak-sortie-report"); got != tt.wantPVC {
				t.Errorf("pvc exists: %t, want %t", got, tt.wantPVC)
			}
			if tt.code == cli.ExitUsage {
				return
			}
			fx.golden("teardown-"+tt.name, err)
		})
	}
}

// TestTeardownUsageExits checks the exit codes of --help and of a missing
// --dir, and that neither makes a client.
func TestTeardownUsageExits(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"help", []string{"teardown", "--help"}, cli.ExitOK, "Usage: soak teardown"},
		{"without dir", []string{"teardown"}, cli.ExitUsage, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newTfix(t)
			err := fx.run(tt.args...)
			if got := exitCode(err); got != tt.code {
				t.Errorf("exit %d, want %d: %v", got, tt.code, err)
			}
			if !strings.Contains(fx.stderr.String(), tt.out) {
				t.Errorf("stderr lacks %q:\n%s", tt.out, fx.stderr.String())
			}
			if asked := fx.rec.String(); fx.clients != 0 || asked != "" {
				t.Errorf("%d clients made, the cluster or Helm asked:\n%s", fx.clients, asked)
			}
		})
	}
}
