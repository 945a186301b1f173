package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/runca"
)

// TestSoakCA: soak ca writes a run's CA and certificates that verify for
// the names asked, and never overwrites a CA in place.
func TestSoakCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	var stdout, stderr bytes.Buffer
	if err := Run([]string{"--out", dir, "--engine-dns", "e.ns.svc.cluster.local", "--engine-ip", "10.0.0.7"}, &stdout, &stderr); err != nil {
		t.Fatalf("soak ca: %v\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "CA "+dir+" valid until ") {
		t.Errorf("stdout %q", stdout.String())
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(read(runca.CAFile))
	blk, _ := pem.Decode(read(runca.EngineCertFile))
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{runca.EngineName, "e.ns.svc.cluster.local", "10.0.0.7"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("engine certificate for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err == nil {
		t.Error("the engine certificate names 127.0.0.1, which --engine-ip left out")
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", dir}, "already holds a ca.crt"},
		{[]string{}, "--out DIR is required"},
		{[]string{"--out", t.TempDir(), "--engine-ip", "10.0.0.300"}, `"10.0.0.300" is not an IP address`},
		{[]string{"--out", t.TempDir(), "--validity", "0s"}, "must be positive"},
	} {
		err := Run(tt.args, &stdout, &stderr)
		if cli.Code(err) != cli.ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("soak ca %q = %v, want exit 2 saying %q", tt.args, err, tt.want)
		}
	}
}
