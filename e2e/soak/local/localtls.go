package local

import (
	"fmt"
	"net"
	"path/filepath"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sortie-soak/sortie/internal/runca"
)

// tlsDir is the run directory's subdirectory of the run's CA files.
const tlsDir = "tls"

// localTargetHosts is what the engines of soak local may send to
// (--allow-targets): every local Service listens on it.
const localTargetHosts = "127.0.0.1"

// makeTLS makes the run's CA and the engine and driver certificates under
// the run directory, unless the run is in plaintext; the engine
// certificate names every node's loopback address.
func (l *local) makeTLS() error {
	if l.o.InsecurePlaintext {
		return nil
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	for i := 0; i < l.o.Nodes; i++ {
		ips = append(ips, nodeIP(i))
	}
	b, err := runca.New(runca.Options{Run: l.o.Tag, Now: time.Now(), EngineIPs: ips})
	if err != nil {
		return err
	}
	dir := filepath.Join(l.dir, tlsDir)
	if err := b.Write(dir); err != nil {
		return err
	}
	c, err := runca.ClientConfig(filepath.Join(dir, runca.DriverCertFile), filepath.Join(dir, runca.DriverKeyFile), filepath.Join(dir, runca.CAFile))
	if err != nil {
		return fmt.Errorf("run CA: %w", err)
	}
	l.clientTLS = c
	return nil
}

// nodeIP is the loopback address of node i's engine.
func nodeIP(i int) net.IP { return net.IPv4(127, 0, 0, byte(11+i)) }

// engineSecurity are the engines' control-plane flags: the run's mTLS (or
// plaintext) and the allowlist of the local targets.
func (l *local) engineSecurity() []string {
	args := []string{"--allow-targets", localTargetHosts}
	if l.clientTLS == nil {
		return append(args, "--insecure-plaintext")
	}
	dir := filepath.Join(l.dir, tlsDir)
	return append(args, "--tls-cert", filepath.Join(dir, runca.EngineCertFile), "--tls-key", filepath.Join(dir, runca.EngineKeyFile),
		"--client-ca", filepath.Join(dir, runca.CAFile))
}

// driverSecurity are the driver's flags for the engines' control plane.
func (l *local) driverSecurity() []string {
	if l.clientTLS == nil {
		return []string{"--insecure-plaintext"}
	}
	dir := filepath.Join(l.dir, tlsDir)
	return []string{"--client-cert", filepath.Join(dir, runca.DriverCertFile), "--client-key", filepath.Join(dir, runca.DriverKeyFile),
		"--engine-ca", filepath.Join(dir, runca.CAFile)}
}

// engineCreds are soak local's own credentials to the engines (it waits
// for each to answer Info).
func (l *local) engineCreds() credentials.TransportCredentials {
	if l.clientTLS == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(l.clientTLS)
}
