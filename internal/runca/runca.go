// Package runca makes the certificate authority of one run and the two
// certificates of the engine control plane (an engine's serving
// certificate and the driver's client certificate), writes them as files,
// and reads them back into the TLS configurations of both ends.
//
// The CA is made for one run and its private key is never written: once
// the two certificates are issued nothing can mint another, so a
// certificate of one run opens no engine of another. Who holds the
// driver's key may command the run's engines; nobody else. The engine
// certificate names EngineName (the driver checks that name whatever
// address it dialled: pod IPs are not known when the CA is made), plus
// any names and addresses the caller adds, loopback by default.
package runca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// File names of a run's TLS directory (and keys of its Secret).
const (
	CAFile         = "ca.crt"
	EngineCertFile = "engine.crt"
	EngineKeyFile  = "engine.key"
	DriverCertFile = "driver.crt"
	DriverKeyFile  = "driver.key"
)

// EngineName is the DNS name every engine certificate carries and every
// driver verifies (tls.Config.ServerName), whatever address it dialled.
const EngineName = "sortie-engine"

// DriverName is the common name of the driver's client certificate.
const DriverName = "sortie-driver"

// DefaultValidity is how long the certificates of a run are valid: longer
// than a soak of a working day and its resumes, short enough that a
// leaked key is soon worthless.
const DefaultValidity = 72 * time.Hour

// skew is how far before now the certificates are valid from: the clocks
// of a cluster's nodes disagree by that much at most.
const skew = 5 * time.Minute

// maxFile bounds a certificate or key file read back: a few kilobytes are
// expected.
const maxFile = 1 << 20

// Options describe the CA of one run.
type Options struct {
	// Run names the run in the subjects (for people reading a
	// certificate); it may be empty.
	Run string
	// Now is when the certificates are made.
	Now time.Time
	// Validity is how long they are valid from Now; 0 is DefaultValidity.
	Validity time.Duration
	// EngineDNS and EngineIPs are the engine certificate's names beside
	// EngineName; nil EngineIPs is 127.0.0.1 and ::1.
	EngineDNS []string
	EngineIPs []net.IP
}

// Bundle is a run's TLS material in PEM. The CA's key is not in it.
type Bundle struct {
	CA         []byte
	EngineCert []byte
	EngineKey  []byte
	DriverCert []byte
	DriverKey  []byte
}

// New makes a CA for one run and issues the engine and driver certificates
// with it (ECDSA P-256). The CA's key is dropped when New returns.
func New(o Options) (*Bundle, error) {
	if o.Validity < 0 {
		return nil, fmt.Errorf("run CA: validity %v must not be negative", o.Validity)
	}
	if o.Validity == 0 {
		o.Validity = DefaultValidity
	}
	if o.EngineIPs == nil {
		o.EngineIPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	name := "sortie run CA"
	if o.Run != "" {
		name += " " + o.Run
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("run CA: key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          Serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             o.Now.Add(-skew),
		NotAfter:              o.Now.Add(o.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// It signs leaves only.
		MaxPathLenZero: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("run CA: self-sign: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("run CA: %w", err)
	}
	b := &Bundle{CA: PEM("CERTIFICATE", caDER)}
	leaf := func(cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: Serial(),
			Subject:      pkix.Name{CommonName: cn, OrganizationalUnit: []string{name}},
			NotBefore:    caTmpl.NotBefore,
			NotAfter:     caTmpl.NotAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return PEM("CERTIFICATE", der), PEM("PRIVATE KEY", keyDER), nil
	}
	// The engine's certificate serves only, the driver's is a client's
	// only: an engine's key cannot command another engine.
	dns := append([]string{EngineName}, o.EngineDNS...)
	if b.EngineCert, b.EngineKey, err = leaf(EngineName, x509.ExtKeyUsageServerAuth, dns, o.EngineIPs); err != nil {
		return nil, fmt.Errorf("run CA: engine certificate: %w", err)
	}
	if b.DriverCert, b.DriverKey, err = leaf(DriverName, x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return nil, fmt.Errorf("run CA: driver certificate: %w", err)
	}
	return b, nil
}

// Files returns the bundle by file name.
func (b *Bundle) Files() map[string][]byte {
	return map[string][]byte{
		CAFile: b.CA, EngineCertFile: b.EngineCert, EngineKeyFile: b.EngineKey,
		DriverCertFile: b.DriverCert, DriverKeyFile: b.DriverKey,
	}
}

// Write writes the bundle into dir (made 0700 if missing), each file
// atomically: keys 0600, certificates 0644.
func (b *Bundle) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("run CA: %w", err)
	}
	for name, data := range b.Files() {
		perm := os.FileMode(0o644)
		if filepath.Ext(name) == ".key" {
			perm = 0o600
		}
		if err := record.WriteFile(filepath.Join(dir, name), data, perm); err != nil {
			return fmt.Errorf("run CA: %w", err)
		}
	}
	return nil
}

// ServerConfig is an engine's TLS: its certificate and key, and a client
// certificate required and verified against the CA in clientCAFile.
func ServerConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, pool, err := load(certFile, keyFile, clientCAFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// ClientConfig is the driver's TLS: its client certificate and key, and
// an engine certificate verified against the CA in caFile for EngineName.
func ClientConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, pool, err := load(certFile, keyFile, caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   EngineName,
	}, nil
}

// load reads a key pair and a CA, every file bounded, and says which file
// a problem is in.
func load(certFile, keyFile, caFile string) (tls.Certificate, *x509.CertPool, error) {
	read := func(path, what string) ([]byte, error) {
		data, err := record.ReadInput(context.Background(), path, what, maxFile)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		return data, nil
	}
	certPEM, err1 := read(certFile, "certificate")
	keyPEM, err2 := read(keyFile, "key")
	caPEM, err3 := read(caFile, "CA")
	if err := errors.Join(err1, err2, err3); err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("key pair %s, %s: %w", certFile, keyFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return tls.Certificate{}, nil, fmt.Errorf("CA %s: no PEM certificate in it", caFile)
	}
	return cert, pool, nil
}

// Serial is a random 127-bit certificate serial number, the one way this
// project numbers the certificates it issues (the lab's cluster PKI too).
func Serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on the platforms Go supports
	}
	return n
}

// PEM encodes one DER block of the given type.
func PEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
