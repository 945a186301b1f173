package lab

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sortie-soak/sortie/internal/runca"
	"github.com/sortie-soak/sortie/record"
)

// Cert is one certificate the lab's PKI issues.
type Cert struct {
	// File is the base name of the .crt and .key files in the PKI directory.
	File string
	// CN and Org are the subject: Kubernetes reads the user from CN and the
	// groups from O.
	CN  string
	Org []string
	// DNS and IPs are the serving names; a certificate with none is a client
	// certificate.
	DNS []string
	IPs []string
}

// Serving reports whether c is a serving certificate.
func (c Cert) Serving() bool { return len(c.DNS)+len(c.IPs) > 0 }

// Kubeconfig is a component's kubeconfig: File in the PKI directory, whose
// user is the client certificate Cert.
type Kubeconfig struct {
	File string
	Cert string
}

// Certs lists every certificate of the lab with nodes nodes.
func Certs(l Layout) []Cert {
	certs := []Cert{
		{File: "apiserver", CN: "kube-apiserver",
			DNS: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain, "localhost"},
			IPs: []string{"127.0.0.1", APIServerIP, APIServiceIP}},
		{File: "admin", CN: "sortie-lab-admin", Org: []string{"system:masters"}},
		{File: "apiserver-kubelet-client", CN: "kube-apiserver-kubelet-client", Org: []string{"system:masters"}},
		{File: "controller-manager", CN: "system:kube-controller-manager"},
		{File: "scheduler", CN: "system:kube-scheduler"},
		{File: "proxy", CN: "system:kube-proxy"},
	}
	for _, n := range l.NodeList() {
		user := "system:node:" + n.Name
		certs = append(certs,
			Cert{File: "kubelet-" + nodeNum(n), CN: user, Org: []string{"system:nodes"}},
			Cert{File: "kubelet-" + nodeNum(n) + "-serving", CN: user, Org: []string{"system:nodes"}, DNS: []string{n.Name}, IPs: []string{n.IP}})
	}
	return certs
}

// Kubeconfigs lists the kubeconfigs of the lab's components.
func Kubeconfigs(l Layout) []Kubeconfig {
	ks := []Kubeconfig{
		{File: "controller-manager.kubeconfig", Cert: "controller-manager"},
		{File: "scheduler.kubeconfig", Cert: "scheduler"},
		{File: "proxy.kubeconfig", Cert: "proxy"},
	}
	for _, n := range l.NodeList() {
		ks = append(ks, Kubeconfig{File: filepath.Base(n.KubeletKubeconfig), Cert: "kubelet-" + nodeNum(n)})
	}
	return ks
}

func nodeNum(n Node) string { return fmt.Sprint(n.Index + 1) }

// CA is the lab's certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	PEM  []byte
}

// NewCA makes a self-signed CA valid from now-1h for ten years.
func NewCA(now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          runca.Serial(),
		Subject:               pkix.Name{CommonName: "sortie-lab-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: runca.PEM("CERTIFICATE", der)}, nil
}

// Issue signs c with the CA and returns the certificate's and the key's PEM.
func (ca *CA) Issue(c Cert, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: runca.Serial(),
		Subject:      pkix.Name{CommonName: c.CN, Organization: c.Org},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     c.DNS,
	}
	if c.Serving() {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, s := range c.IPs {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, nil, fmt.Errorf("certificate %s: bad IP %q", c.File, s)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s: %w", c.File, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return runca.PEM("CERTIFICATE", der), runca.PEM("PRIVATE KEY", keyDER), nil
}

// WritePKI makes a new CA and every certificate, the service-account key
// pair and the kubeconfigs (the components' in the PKI directory, the
// admin's at Layout.Kubeconfig). Every `up` makes a new PKI: the cluster
// it serves is new too.
func WritePKI(l Layout, now time.Time) error {
	dir := l.PKI()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := NewCA(now)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return err
	}
	files := map[string][]byte{"ca.crt": ca.PEM, "ca.key": runca.PEM("PRIVATE KEY", keyDER)}
	for _, c := range Certs(l) {
		crt, key, err := ca.Issue(c, now)
		if err != nil {
			return err
		}
		files[c.File+".crt"], files[c.File+".key"] = crt, key
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saDER, _ := x509.MarshalPKCS8PrivateKey(saKey)
	saPub, _ := x509.MarshalPKIXPublicKey(saKey.Public())
	files["sa.key"], files["sa.pub"] = runca.PEM("PRIVATE KEY", saDER), runca.PEM("PUBLIC KEY", saPub)
	for name, data := range files {
		if err := record.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return writeKubeconfigs(l)
}

func writeKubeconfigs(l Layout) error {
	var errs []error
	for _, k := range Kubeconfigs(l) {
		errs = append(errs, WriteKubeconfig(filepath.Join(l.PKI(), k.File), l, k.Cert))
	}
	errs = append(errs, WriteKubeconfig(l.Kubeconfig(), l, "admin"))
	return errors.Join(errs...)
}

// WriteKubeconfig writes a kubeconfig for the user of the client
// certificate cert, with the one context ContextName, at path.
func WriteKubeconfig(path string, l Layout, cert string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{
		Server:               "https://" + net.JoinHostPort(APIServerIP, "6443"),
		CertificateAuthority: filepath.Join(l.PKI(), "ca.crt"),
	}
	cfg.AuthInfos[cert] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(l.PKI(), cert+".crt"),
		ClientKey:         filepath.Join(l.PKI(), cert+".key"),
	}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: cert}
	cfg.CurrentContext = ContextName
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return record.WriteFile(path, data, 0o600)
}
