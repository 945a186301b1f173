package images

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sort"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The roots every image trusts unless told otherwise: Mozilla's root store
// (the NSS trust store) as the Go project publishes it in a module of its
// own, pinned in go.mod like any dependency and updated with go get. An
// image never carries the build machine's /etc/ssl: that bundle is the
// machine's (it may hold a CA of the machine alone, and on some machines it
// is regenerated at every boot), so images built from it differ from
// machine to machine and trust what their builder trusts.
const (
	// RootsModule is the module the roots come from.
	RootsModule = "golang.org/x/crypto/x509roots/fallback"
	// RootsVersion is its version, the one go.mod requires (a test holds
	// the two equal).
	RootsVersion = "v0.0.0-20261030153154-30a33513ff6d"
)

// RootsSource names the pinned roots in the lock file and in output.
const RootsSource = RootsModule + "@" + RootsVersion

// fileSourcePrefix starts the source of a bundle given with --ca-certs.
const fileSourcePrefix = "file:"

// CABundle is the CA bundle an image carries at CACertsPath.
type CABundle struct {
	// PEM is the file's content.
	PEM []byte
	// Source says where it came from: RootsSource, or "file:<path>" for a
	// bundle given with --ca-certs.
	Source string
}

// Digest is the bundle's sha256, "sha256:<hex>".
func (b CABundle) Digest() string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b.PEM)) }

// MozillaRoots renders the roots of RootsModule as a PEM bundle: a header
// naming the module and version, then each certificate under a comment with
// its SHA-256 fingerprint, sorted by that fingerprint. The bytes depend on
// the module version alone (not on the Go release, the machine or the order
// the module lists them in), so the same go.mod gives the same bundle.
//
// A root the module marks with a constraint (Mozilla's distrust-after date
// for certificates issued after it) is left out: a PEM file cannot carry the
// constraint, and every TLS stack reading the file would trust the root
// without it.
func MozillaRoots() []byte {
	type root struct {
		fp  string
		der []byte
	}
	var roots []root
	skipped := 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			skipped++
			continue
		}
		sum := sha256.Sum256(r.Certificate)
		roots = append(roots, root{fp: hex.EncodeToString(sum[:]), der: r.Certificate})
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].fp < roots[j].fp })

	var b bytes.Buffer
	fmt.Fprintf(&b, "# Mozilla's root store (NSS) from %s,\n", RootsSource)
	fmt.Fprintf(&b, "# %d roots sorted by SHA-256 fingerprint; %d with a distrust-after\n", len(roots), skipped)
	b.WriteString("# constraint left out (a PEM file cannot carry it). Written by sortie-images.\n")
	for _, r := range roots {
		fmt.Fprintf(&b, "\n# sha256 %s\n", r.fp)
		// pem.Encode writes to a bytes.Buffer, which does not fail.
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.der})
	}
	return b.Bytes()
}

// LoadCABundle returns the bundle an image carries: the pinned Mozilla roots
// when path is empty, else the file at path, which must hold at least one
// PEM certificate, every one of them parsing (a private CA's bundle, given
// with --ca-certs).
func LoadCABundle(path string) (CABundle, error) {
	if path == "" {
		return CABundle{PEM: MozillaRoots(), Source: RootsSource}, nil
	}
	source := fileSourcePrefix + path
	if err := checkCASource(source); err != nil {
		return CABundle{}, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return CABundle{}, fmt.Errorf("CA bundle: %w", err)
	}
	if err := checkPEMBundle(data); err != nil {
		return CABundle{}, fmt.Errorf("CA bundle %s: %w", path, err)
	}
	return CABundle{PEM: data, Source: source}, nil
}

// checkPEMBundle accepts one or more PEM blocks, every one a CERTIFICATE
// that parses. Text between blocks is left alone, as every reader of such
// a file skips it (curl's and Fedora's bundles put titles there); a block of
// another type (a private key above all) is refused, as it has no business
// in an image.
func checkPEMBundle(data []byte) error {
	n, line := 0, 1
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			break
		}
		consumed := data[:len(data)-len(rest)]
		end := line + bytes.Count(bytes.TrimSuffix(consumed, []byte("\n")), []byte("\n"))
		line += bytes.Count(consumed, []byte("\n"))
		n++
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("PEM block %d (ending on line %d) is %q, want CERTIFICATE", n, end, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("certificate %d (ending on line %d): %w", n, end, err)
		}
		data = rest
	}
	if n == 0 {
		return errors.New("no PEM certificate in it")
	}
	return nil
}
