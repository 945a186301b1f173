package runca

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeBundle makes a run's CA valid around now and writes it to a fresh
// directory.
func writeBundle(t *testing.T, now time.Time, dns ...string) string {
	t.Helper()
	b, err := New(Options{Run: "t", Now: now, EngineDNS: dns})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tls")
	if err := b.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func serverConf(t *testing.T, dir, clientCADir string) *tls.Config {
	t.Helper()
	c, err := ServerConfig(filepath.Join(dir, EngineCertFile), filepath.Join(dir, EngineKeyFile), filepath.Join(clientCADir, CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func clientConf(t *testing.T, dir, caDir, cert, key string) *tls.Config {
	t.Helper()
	c, err := ClientConfig(filepath.Join(dir, cert), filepath.Join(dir, key), filepath.Join(caDir, CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// handshake runs a TLS handshake over a real loopback connection and
// returns both ends' errors. In TLS 1.3 the client may finish before the
// server refuses its certificate, so the client reads once after: a
// refusal reaches it there.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		err = tc.Handshake()
		if err == nil {
			_, err = tc.Write([]byte("k"))
		}
		done <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		buf := make([]byte, 1)
		_, err = c.Read(buf)
		c.Close()
	}
	return <-done, err
}

func TestWritePermissions(t *testing.T) {
	dir := writeBundle(t, time.Now())
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", st.Mode().Perm())
	}
	for _, name := range []string{CAFile, EngineCertFile, EngineKeyFile, DriverCertFile, DriverKeyFile} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want := fs.FileMode(0o644)
		if strings.HasSuffix(name, ".key") {
			want = 0o600
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
	// The CA's key is never written.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 5 {
		t.Errorf("%d files in the TLS directory, want 5", len(entries))
	}
}

func TestCertificates(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := New(Options{Now: now, Validity: time.Hour, EngineDNS: []string{"x.ns.svc.cluster.local"}})
	if err != nil {
		t.Fatal(err)
	}
	parse := func(p []byte) *x509.Certificate {
		blk, _ := pem.Decode(p)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	eng, drv := parse(b.EngineCert), parse(b.DriverCert)
	if !slices.Equal(eng.DNSNames, []string{EngineName, "x.ns.svc.cluster.local"}) {
		t.Errorf("engine DNS names %v", eng.DNSNames)
	}
	if len(eng.IPAddresses) != 2 || !eng.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) || !eng.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Errorf("engine IPs %v, want loopback", eng.IPAddresses)
	}
	if !slices.Equal(eng.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || !slices.Equal(drv.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("key usages engine %v driver %v", eng.ExtKeyUsage, drv.ExtKeyUsage)
	}
	if !eng.NotAfter.Equal(now.Add(time.Hour)) || !eng.NotBefore.Equal(now.Add(-skew)) {
		t.Errorf("engine valid %v to %v", eng.NotBefore, eng.NotAfter)
	}
	if _, err := New(Options{Now: now, Validity: -time.Second}); err == nil {
		t.Error("a negative validity was accepted")
	}
}

func TestHandshake(t *testing.T) {
	now := time.Now()
	run, other := writeBundle(t, now), writeBundle(t, now)
	expired := writeBundle(t, now.Add(-2*DefaultValidity))
	tests := []struct {
		name       string
		server     *tls.Config
		client     *tls.Config
		wantRefuse bool
	}{
		{"the run's driver", serverConf(t, run, run), clientConf(t, run, run, DriverCertFile, DriverKeyFile), false},
		{"another run's driver", serverConf(t, run, run), clientConf(t, other, other, DriverCertFile, DriverKeyFile), true},
		{"an engine's key as a client", serverConf(t, run, run), clientConf(t, run, run, EngineCertFile, EngineKeyFile), true},
		{"another run's engine", serverConf(t, other, run), clientConf(t, run, run, DriverCertFile, DriverKeyFile), true},
		{"an expired driver certificate", serverConf(t, run, expired), clientConf(t, expired, run, DriverCertFile, DriverKeyFile), true},
		{"no client certificate", serverConf(t, run, run), &tls.Config{RootCAs: clientConf(t, run, run, DriverCertFile, DriverKeyFile).RootCAs, ServerName: EngineName}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serr, cerr := handshake(t, tt.server, tt.client)
			if tt.wantRefuse {
				if serr == nil || cerr == nil {
					t.Errorf("handshake not refused: server %v, client %v", serr, cerr)
				}
				return
			}
			if serr != nil || cerr != nil {
				t.Errorf("handshake failed: server %v, client %v", serr, cerr)
			}
		})
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := writeBundle(t, time.Now())
	missing := filepath.Join(dir, "nope.crt")
	_, err := ClientConfig(missing, filepath.Join(dir, DriverKeyFile), filepath.Join(dir, CAFile))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing certificate: %v", err)
	}
	// A CA file that holds a key and no certificate.
	_, err = ServerConfig(filepath.Join(dir, EngineCertFile), filepath.Join(dir, EngineKeyFile), filepath.Join(dir, EngineKeyFile))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, EngineKeyFile)) {
		t.Errorf("CA without a certificate: %v", err)
	}
	// A key that is not the certificate's.
	_, err = ServerConfig(filepath.Join(dir, EngineCertFile), filepath.Join(dir, DriverKeyFile), filepath.Join(dir, CAFile))
	if err == nil || !strings.Contains(err.Error(), DriverKeyFile) {
		t.Errorf("mismatched key pair: %v", err)
	}
}
