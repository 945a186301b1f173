package kickoff

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sortie-soak/sortie/internal/runca"
)

// TestKickoffRunTLS: soak run makes a CA for the run and stores it with
// the engine and driver certificates in the release's Secret before the
// engines are installed; the engines' allowlist is the targets' hosts and
// the statsd address. The certificates verify as the engines and the
// driver use them, and the CA's key is in no key of the Secret.
func TestKickoffRunTLS(t *testing.T) {
	fx := newKfix(t)
	fx.pvcFiles(ProfileE2E)
	var atInstall *corev1.Secret
	makeEngines := fx.helm.onInstall
	fx.helm.onInstall = func() {
		atInstall, _ = fx.cs.CoreV1().Secrets(kNS).Get(context.Background(), "soak-sortie-tls", metav1.GetOptions{})
		makeEngines()
	}
	err := fx.run(fx.runArgs(ProfileE2E, "--statsd", "auto", "--statsd-service", "o11y/otel-scraper")...)
	if exitCode(err) != 0 {
		t.Fatalf("exit %d: %v\n%s", exitCode(err), err, fx.stdout.String())
	}
	if atInstall == nil {
		t.Fatal("no Secret soak-sortie-tls when the engines were installed")
	}
	var keys []string
	for k := range atInstall.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{runca.CAFile, runca.DriverCertFile, runca.DriverKeyFile, runca.EngineCertFile, runca.EngineKeyFile}; !slices.Equal(keys, want) {
		t.Fatalf("Secret keys %q, want %q", keys, want)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(atInstall.Data[runca.CAFile]) {
		t.Fatal("ca.crt holds no certificate")
	}
	parse := func(key string) *x509.Certificate {
		blk, _ := pem.Decode(atInstall.Data[key])
		if blk == nil {
			t.Fatalf("%s is not PEM", key)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	at := kStart.Add(time.Minute)
	if _, err := parse(runca.EngineCertFile).Verify(x509.VerifyOptions{Roots: pool, DNSName: runca.EngineName, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("engine certificate: %v", err)
	}
	if _, err := parse(runca.DriverCertFile).Verify(x509.VerifyOptions{Roots: pool, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("driver certificate: %v", err)
	}
	if got := parse(runca.EngineCertFile).NotAfter; !got.Equal(kStart.Add(runca.DefaultValidity)) {
		t.Errorf("engine certificate valid until %v, want the kickoff's clock + %v", got, runca.DefaultValidity)
	}
	tr := fx.rec.String()
	for _, want := range []string{
		"create secrets ns=sortie name=soak-sortie-tls\nhelm install",
		`engine.allowTargets=["svc-a.soak.test","svc-b.soak.test","echo.soak.test","10.96.0.10"]`,
		"tls.enabled=true tls.secretName=soak-sortie-tls",
	} {
		if !strings.Contains(tr, want) {
			t.Errorf("transcript lacks %q:\n%s", want, tr)
		}
	}
}

// TestKickoffRunTLSReplacesAndOptsOut: a Secret an earlier run of the
// release left is replaced by this run's; with tls.enabled: false in
// --values no Secret is made and the run says it is in plaintext.
func TestKickoffRunTLSReplacesAndOptsOut(t *testing.T) {
	fx := newKfix(t)
	fx.pvcFiles(ProfileE2E)
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kNS, Name: "soak-sortie-tls"}, Data: map[string][]byte{"ca.crt": []byte("old")}}
	fx.objects = append(fx.objects, old)
	if err := fx.run(fx.runArgs(ProfileE2E)...); exitCode(err) != 0 {
		t.Fatalf("exit %d: %v", exitCode(err), err)
	}
	sec, err := fx.cs.CoreV1().Secrets(kNS).Get(context.Background(), "soak-sortie-tls", metav1.GetOptions{})
	if err != nil || string(sec.Data[runca.CAFile]) == "old" || !strings.Contains(fx.stdout.String(), "secret/soak-sortie-tls replaced") {
		t.Errorf("the earlier run's Secret was not replaced: %v\n%s", err, fx.stdout.String())
	}

	fx = newKfix(t)
	fx.pvcFiles(ProfileE2E)
	write(t, fx.values, standInValues+"tls:\n  enabled: false\n")
	if err := fx.run(fx.runArgs(ProfileE2E)...); exitCode(err) != 0 {
		t.Fatalf("plaintext run: exit %d: %v", exitCode(err), err)
	}
	tr := fx.rec.String()
	if strings.Contains(tr, "secrets") || !strings.Contains(tr, "tls.enabled=false") || !strings.Contains(fx.stdout.String(), "PLAINTEXT") {
		t.Errorf("plaintext run: transcript\n%s\noutput\n%s", tr, fx.stdout.String())
	}
}
