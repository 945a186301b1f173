// Package ca is `soak ca`: a run's CA and the engines' and the driver's
// certificates (internal/runca) as files, for engines and a driver started
// by hand or the chart installed with helm.
package ca

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/runca"
)

const caUsage = `Usage: soak ca --out DIR [--validity 72h] [--engine-dns NAME,...] [--engine-ip IP,...]

Makes a CA for one run and writes it with the engines' and the driver's
certificates into DIR (made 0700; it must not hold them yet): ca.crt,
engine.crt, engine.key, driver.crt, driver.key (keys 0600). The CA's key is
written nowhere. soak local and soak run make their own; this is for
engines and a driver started by hand, or the chart installed with helm:

  soak ca --out tls
  kubectl -n NS create secret generic RELEASE-sortie-tls --from-file=tls/

Every engine certificate names sortie-engine, the name the driver checks
whatever address it dialled.

Flags:
`

// Run is `soak ca`.
func Run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("soak ca", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, caUsage)
		fs.PrintDefaults()
	}
	out := fs.String("out", "", "`DIR` to write the five files into")
	validity := fs.Duration("validity", runca.DefaultValidity, "how long the certificates are valid")
	dns := fs.String("engine-dns", "", "more DNS `NAMES` of the engine certificate, comma-separated")
	ips := fs.String("engine-ip", "127.0.0.1,::1", "IP `ADDRESSES` of the engine certificate, comma-separated")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return cli.Usage(err)
	}
	var problems []error
	if *out == "" {
		problems = append(problems, errors.New("--out DIR is required"))
	}
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if *validity <= 0 {
		problems = append(problems, fmt.Errorf("--validity %v must be positive", *validity))
	}
	o := runca.Options{Now: time.Now(), Validity: *validity, EngineIPs: []net.IP{}}
	o.EngineDNS = splitList(*dns)
	for _, s := range splitList(*ips) {
		ip := net.ParseIP(s)
		if ip == nil {
			problems = append(problems, fmt.Errorf("--engine-ip %q is not an IP address", s))
			continue
		}
		o.EngineIPs = append(o.EngineIPs, ip)
	}
	if *out != "" {
		if _, err := os.Stat(filepath.Join(*out, runca.CAFile)); err == nil {
			problems = append(problems, fmt.Errorf("--out %s already holds a %s: a run's CA is never replaced in place", *out, runca.CAFile))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return cli.Usage(err)
	}
	b, err := runca.New(o)
	if err != nil {
		return cli.Usage(err)
	}
	if err := b.Write(*out); err != nil {
		return cli.Fail(err)
	}
	_, err = fmt.Fprintf(stdout, "CA %s valid until %s\n", *out, o.Now.Add(*validity).UTC().Format(time.RFC3339))
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
