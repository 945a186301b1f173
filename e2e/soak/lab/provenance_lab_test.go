//go:build lab

package lab_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sortie-soak/sortie/e2e/soak/lab"
	"github.com/sortie-soak/sortie/images"
	"github.com/sortie-soak/sortie/provenance"
)

// labKey is a cosign key pair made for the test, as `cosign
// generate-key-pair` writes it.
type labKey struct{ priv, pub, password string }

func newLabKey(t *testing.T, password string) labKey {
	t.Helper()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte(password), nil })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	k := labKey{priv: filepath.Join(dir, "cosign.key"), pub: filepath.Join(dir, "cosign.pub"), password: password}
	for path, data := range map[string][]byte{k.priv: kb.PrivateBytes, k.pub: kb.PublicBytes} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// TestIntegrationLabProvenance is provenance for real: this checkout's
// images are released to the lab's registry with `sortie-images release`
// and a key made for the test (built, pushed, signed, their SLSA provenance
// attached), and `soak run e2e --verify --key` passes its pre-flight over
// them. The same run with the driver image re-pushed unsigned, then signed
// by another key, is refused in the pre-flight, naming that image, before
// anything is installed: no Helm release, no pod.
func TestIntegrationLabProvenance(t *testing.T) {
	m := theLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	key, other := newLabKey(t, "lab-test"), newLabKey(t, "other")
	cs := labClient(t, m)
	if n := installed(t, ctx, cs, m.Namespace); n != "" {
		t.Fatalf("namespace %s is not empty before the test (%s): the refusals below could not be told apart", m.Namespace, n)
	}

	driver := releaseToLab(t, ctx, m, key, dir)
	verifyArgs := append(runArgs(m), "--verify", "--key", key.pub)

	t.Run("signed images pass the pre-flight", func(t *testing.T) {
		t0 := time.Now()
		out, err := soakRun(t, ctx, filepath.Join(dir, "preflight-unverified.txt"), nil, append(runArgs(m), "--preflight")...)
		t.Logf("pre-flight without --verify: %s", time.Since(t0).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("preflight without --verify: %v\n%s", err, out)
		}
		t0 = time.Now()
		out, err = soakRun(t, ctx, filepath.Join(dir, "preflight.txt"), nil, append(verifyArgs, "--preflight")...)
		t.Logf("pre-flight with --verify --key: %s", time.Since(t0).Round(time.Millisecond))
		logVerdicts(t, out)
		if err != nil {
			t.Fatalf("preflight --verify: %v", err)
		}
		mustMatch(t, out, `(?m)^STEP preflight ok$`,
			`(?m)^PREFLIGHT ok provenance: VERIFIED image `+regexp.QuoteMeta(driver)+` signatures=1 provenance=1$`,
			`(?m)^PREFLIGHT ok provenance: VERIFIED image `+regexp.QuoteMeta(m.Images["sortie-engine"])+` signatures=1 provenance=1$`)
		// Every image the release runs was verified, each with its
		// provenance found.
		verified := regexp.MustCompile(`(?m)^PREFLIGHT ok provenance: VERIFIED image \S+ signatures=1 provenance=1$`).FindAllString(out, -1)
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^PREFLIGHT ok provenance: provenance VERIFIED mode=key images=%d chart=1$`, len(verified))).MatchString(out) {
			t.Errorf("the summary does not count the %d images verified with their provenance:\n%s", len(verified), out)
		}
		if strings.Contains(out, "PREFLIGHT FAIL") {
			t.Errorf("a pre-flight check failed:\n%s", out)
		}
	})
	if t.Failed() {
		return
	}

	// The driver image re-pushed: changed (any change is another digest),
	// pushed unsigned to the same repository, and named by the values.
	repushed := repush(t, ctx, driver)
	values := filepath.Join(dir, "values-repushed.yaml")
	b, err := os.ReadFile(m.Values)
	if err != nil {
		t.Fatal(err)
	}
	_, oldDigest, _ := strings.Cut(driver, "@")
	_, newDigest, _ := strings.Cut(repushed.String(), "@")
	if err := os.WriteFile(values, []byte(strings.ReplaceAll(string(b), oldDigest, newDigest)), 0o644); err != nil {
		t.Fatal(err)
	}
	refusedArgs := append(runArgs(m), "--values", values, "--verify", "--key", key.pub,
		"--duration", "60s", "--settle", "5s", "--watch-interval", "20s")
	refused := func(t *testing.T, name, reason string) {
		t.Helper()
		run := filepath.Join(dir, name)
		out, err := soakRun(t, ctx, filepath.Join(dir, name+".txt"), nil, append(refusedArgs, "--dir", run)...)
		logVerdicts(t, out)
		if err == nil {
			t.Fatalf("the run with %s was not refused:\n%s", repushed, out)
		}
		mustMatch(t, out, `(?m)^PREFLIGHT FAIL provenance: image `+regexp.QuoteMeta(repushed.String())+`: `+regexp.QuoteMeta(reason))
		if n := strings.Count(out, "PREFLIGHT FAIL"); n != 1 {
			t.Errorf("%d pre-flight failures, want the re-pushed image's alone:\n%s", n, out)
		}
		if strings.Contains(out, "STEP preflight ok") {
			t.Errorf("the pre-flight passed:\n%s", out)
		}
		if n := installed(t, ctx, cs, m.Namespace); n != "" {
			t.Errorf("the refused run installed %s", n)
		}
	}
	t.Run("re-pushed unsigned is refused", func(t *testing.T) {
		refused(t, "unsigned", provenance.ErrNoSignature.Error())
	})
	t.Run("re-pushed signed by another key is refused", func(t *testing.T) {
		s, err := provenance.LoadSigner(other.priv, []byte(other.password))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Sign(ctx, repushed); err != nil {
			t.Fatal(err)
		}
		refused(t, "other-key", provenance.ErrWrongKey.Error())
	})
}

// releaseToLab runs `sortie-images release` of this checkout to the lab's
// registry with key (the lock, values and README it pins are copies in
// dir), and returns the driver's reference. Images build reproducibly, so
// the release has the digests `soak lab up` pushed and the lab's values
// name; the test checks that it does.
func releaseToLab(t *testing.T, ctx context.Context, m lab.Manifest, key labKey, dir string) string {
	t.Helper()
	env := images.Env{LookupEnv: func(k string) (string, bool) { return key.password, k == images.PasswordEnv }}
	logf, err := os.Create(filepath.Join(dir, "release.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	var out strings.Builder
	t0 := time.Now()
	err = env.Run(ctx, []string{"release", "--module", "../../..", "--registry", m.Registry, "--key", key.priv,
		"--lock", filepath.Join(dir, "images.lock"), "--values", "", "--readme", ""}, io.MultiWriter(&out, logf), logf)
	t.Logf("sortie-images release of every image to %s: %s", m.Registry, time.Since(t0).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("release: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`(?m)^RELEASED \S+ images=6 signed=6 attested=6$`).MatchString(out.String()) {
		t.Fatalf("release did not sign and attest every image:\n%s", out.String())
	}
	for _, img := range []string{"sortie-engine", "sortie"} {
		ref := m.Images[img]
		if ref == "" || !strings.Contains(out.String(), "SIGNED "+img+" "+ref+"\n") {
			t.Fatalf("the lab runs %s %q, which the release did not sign:\n%s", img, ref, out.String())
		}
	}
	return m.Images["sortie"]
}

// repush pushes ref's image changed by an annotation to its repository,
// unsigned, and returns the new reference.
func repush(t *testing.T, ctx context.Context, ref string) name.Digest {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(d, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	changed := mutate.Annotations(img, map[string]string{"org.sortie.test": "re-pushed"}).(v1.Image)
	h, err := changed.Digest()
	if err != nil {
		t.Fatal(err)
	}
	nd, err := name.NewDigest(d.Context().Name() + "@" + h.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(nd, changed, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	return nd
}

// installed names what a run installed in ns, "" when nothing: Helm
// release records and pods.
func installed(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) string {
	t.Helper()
	secrets, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, s := range secrets.Items {
		found = append(found, "helm release "+s.Labels["name"]+" ("+s.Name+")")
	}
	for _, p := range pods.Items {
		found = append(found, "pod "+p.Name)
	}
	return strings.Join(found, ", ")
}
