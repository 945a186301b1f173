package lab

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWritePKI(t *testing.T) {
	l := Layout{State: t.TempDir(), Nodes: 2}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := WritePKI(l, now); err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, filepath.Join(l.PKI(), "ca.crt"))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, c := range Certs(l) {
		cert := readCert(t, filepath.Join(l.PKI(), c.File+".crt"))
		usage := x509.ExtKeyUsageClientAuth
		if c.Serving() {
			usage = x509.ExtKeyUsageServerAuth
		}
		opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}
		if c.Serving() {
			opts.DNSName = c.DNS[0]
		}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("%s: %v", c.File, err)
		}
		if cert.Subject.CommonName != c.CN || !slices.Equal(cert.Subject.Organization, c.Org) {
			t.Errorf("%s: subject %v, want CN=%s O=%v", c.File, cert.Subject, c.CN, c.Org)
		}
		if st, err := os.Stat(filepath.Join(l.PKI(), c.File+".key")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: %v, mode %v; want 0600", c.File, err, st.Mode())
		}
	}
	api := readCert(t, filepath.Join(l.PKI(), "apiserver.crt"))
	var ips []string
	for _, ip := range api.IPAddresses {
		ips = append(ips, ip.String())
	}
	for _, want := range []string{APIServerIP, APIServiceIP, "127.0.0.1"} {
		if !slices.Contains(ips, want) {
			t.Errorf("apiserver certificate lacks IP %s: %v", want, ips)
		}
	}
	n2 := readCert(t, filepath.Join(l.PKI(), "kubelet-2-serving.crt"))
	if len(n2.IPAddresses) != 1 || n2.IPAddresses[0].String() != l.Node(1).IP || n2.Subject.CommonName != "system:node:sortie-lab-2" {
		t.Errorf("node 2 serving certificate: CN %s IPs %v", n2.Subject.CommonName, n2.IPAddresses)
	}
}

func TestKubeconfigs(t *testing.T) {
	l := Layout{State: t.TempDir(), Nodes: 2}
	if err := WritePKI(l, time.Now()); err != nil {
		t.Fatal(err)
	}
	files := []string{l.Kubeconfig()}
	for _, k := range Kubeconfigs(l) {
		files = append(files, filepath.Join(l.PKI(), k.File))
	}
	if len(files) != 6 {
		t.Errorf("%d kubeconfigs, want admin, controller manager, scheduler, proxy, two kubelets", len(files))
	}
	for _, f := range files {
		cfg, err := clientcmd.LoadFromFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if cfg.CurrentContext != ContextName {
			t.Errorf("%s: context %q", f, cfg.CurrentContext)
		}
		rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if rc.Host != "https://"+APIServerIP+":6443" {
			t.Errorf("%s: server %s", f, rc.Host)
		}
		if _, err := os.Stat(rc.CertFile); err != nil {
			t.Errorf("%s: client certificate: %v", f, err)
		}
	}
}
