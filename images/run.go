package images

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"github.com/sortie-soak/sortie/record"
	"io"
	"log/slog"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sortie-soak/sortie/internal/cli"
)

const usage = `usage: sortie-images <command> [flags]

Builds sortie's OCI images without Docker (a static binary per image on an
empty base, CA certificates, user 65532:65532, all timestamps at the Unix
epoch), pins their digests in a lock file and copies them into the chart's
values and the README.

The CA certificates are Mozilla's roots from the Go module
` + RootsSource + `
(pinned in go.mod), rendered to PEM the same way on every machine; never the
build machine's /etc/ssl. --ca-certs FILE gives another bundle (a private
CA's), recorded in the lock.

Commands:
  build   build the images, write an OCI layout and the lock file, push
  check   rebuild and compare with the lock file (exit 1 on any difference)
  pin     copy the lock file's digests into values.yaml and the README
  release build, push, sign by digest, attach SLSA provenance, pin
  layer   write one image's layer tar (for Bazel's rules_oci, images/oci)
  roots   write the pinned CA bundle the images carry by default

Run "sortie-images <command> --help" for a command's flags and output.
Exit codes: 0 done / all digests agree, 1 a build, push or check failed,
2 unusable flags or files.
`

// Run is the sortie-images command with no environment: release then
// reads its key's password from --password-file only.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return Env{}.Run(ctx, args, stdout, stderr)
}

// Env is what the command reads from the process environment; main fills
// it, tests give their own.
type Env struct {
	// LookupEnv looks a variable up (COSIGN_PASSWORD), as os.LookupEnv
	// does: a variable set to "" is set. Nil: none is set.
	LookupEnv func(string) (string, bool)
}

func (e Env) lookup(k string) (string, bool) {
	if e.LookupEnv == nil {
		return "", false
	}
	return e.LookupEnv(k)
}

// Run is the sortie-images command.
func (e Env) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "sortie-images")
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.Usage(errors.New("no command given"))
	}
	switch args[0] {
	case "build":
		return runBuild(ctx, args[1:], stdout, stderr, log)
	case "check":
		return runCheck(ctx, args[1:], stdout, stderr, log)
	case "pin":
		return runPin(args[1:], stdout, stderr)
	case "release":
		return e.runRelease(ctx, args[1:], stdout, stderr, log)
	case "layer":
		return runLayer(args[1:], stdout, stderr)
	case "roots":
		return runRoots(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return cli.Usage(fmt.Errorf("unknown command %q", args[0]))
	}
}

// listFlag is a comma-separated list flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	*l = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// buildFlags are the flags build and check share.
type buildFlags struct {
	module    string
	platforms listFlag
	caCerts   string
	only      listFlag
	lock      string
}

func (b *buildFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.module, "module", ".", "root of the sortie module (the directory holding go.mod)")
	fs.Var(&b.platforms, "platform", "comma-separated platforms, linux/amd64 and/or linux/arm64; several give an OCI index per image (build default linux/amd64; check default: the lock's)")
	fs.StringVar(&b.caCerts, "ca-certs", "", "PEM CA bundle `FILE` every image carries at "+CACertsPath+", recorded in the lock (build default: the Mozilla roots of "+RootsSource+"; check default: the bundle the lock records)")
	fs.Var(&b.only, "only", "comma-separated image names to build (default: every image whose package exists): "+strings.Join(names0(), ", "))
	fs.StringVar(&b.lock, "lock", "images.lock", "the lock file")
}

// options turns the flags into build options and the selected images,
// returning every problem at once.
func (b *buildFlags) options(stderr io.Writer) (BuildOptions, []Binary, error) {
	var errs []error
	o := BuildOptions{ModuleDir: b.module, CACerts: b.caCerts, Stderr: stderr}
	for _, s := range b.platforms {
		p, err := ParsePlatform(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o.Platforms = append(o.Platforms, p)
	}
	sel, err := Select(b.only)
	if err != nil {
		errs = append(errs, err)
	}
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	return o, sel, errors.Join(errs...)
}

func newFlagSet(name, doc string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sortie-images "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), doc)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags, mapping --help to a clean exit and errors to exit 2.
func parse(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, cli.Usage(err)
	}
	if fs.NArg() > 0 {
		return false, cli.Usage(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	return false, nil
}

const buildDoc = `usage: sortie-images build [flags]

Compiles each image's binary (go build, CGO_ENABLED=0, -trimpath,
-buildvcs=false, -ldflags "-s -w -buildid="), wraps it in its image, writes
the OCI layout and the lock file, and pushes when --push is given.

Output, one line each (stdout):
  IMAGE <name> <digest>             an image built
  SKIPPED <name> <package>          an image whose main package does not exist
  LAYOUT <dir>                      the OCI layout written
  LOCK <file>                       the lock file written
  PUSHED <name> <registry>/<name>@<digest> [<tag reference>]

Flags:
`

func runBuild(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) error {
	fs := newFlagSet("build", buildDoc, stderr)
	var bf buildFlags
	bf.register(fs)
	out := fs.String("out", "out/oci", "OCI layout directory to write (empty: none)")
	push := fs.String("push", "", "registry (host[:port][/prefix]) to push every image to, as <registry>/<name>@<digest>")
	tag := fs.String("tag", "", "with --push, also tag each image (default: by digest only)")
	binDir := fs.String("bin-dir", "", "keep the compiled binaries here (default: a temporary directory)")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if len(bf.platforms) == 0 {
		bf.platforms = listFlag{"linux/amd64"}
	}
	var errs []error
	if *tag != "" && *push == "" {
		errs = append(errs, errors.New("--tag needs --push"))
	}
	o, sel, err := bf.options(stderr)
	if err != nil {
		errs = append(errs, err)
	}
	bins, missing := Available(bf.module, sel)
	if err == nil && len(bf.only) > 0 && len(missing) > 0 {
		errs = append(errs, fmt.Errorf("no main package for %s", strings.Join(missing, ", ")))
	}
	if err == nil && len(bins) == 0 {
		errs = append(errs, fmt.Errorf("no image's package exists under %s", bf.module))
	}
	if err := errors.Join(errs...); err != nil {
		return cli.Usage(err)
	}
	o.BinDir = *binDir
	for _, n := range missing {
		b, _ := Lookup(n)
		fmt.Fprintf(stdout, "SKIPPED %s %s\n", n, b.Package)
	}
	log.Info("building", "images", len(bins), "platforms", bf.platforms.String())
	res, err := Build(ctx, o, bins)
	if err != nil {
		return cli.Fail(err)
	}
	for _, a := range res.Artifacts {
		fmt.Fprintf(stdout, "IMAGE %s %s\n", a.Name, a.Digest)
	}
	if *out != "" {
		if err := WriteLayout(*out, res.Artifacts); err != nil {
			return cli.Fail(err)
		}
		fmt.Fprintf(stdout, "LAYOUT %s\n", *out)
	}
	if bf.lock != "" {
		if err := WriteLock(bf.lock, res.Lock()); err != nil {
			return cli.Fail(err)
		}
		fmt.Fprintf(stdout, "LOCK %s\n", bf.lock)
	}
	if *push != "" {
		pushed, err := Push(ctx, *push, *tag, res.Artifacts, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		for _, p := range pushed {
			fmt.Fprintf(stdout, "PUSHED %s %s", p.Name, p.Ref)
			if p.Tag != "" {
				fmt.Fprintf(stdout, " %s", p.Tag)
			}
			fmt.Fprintln(stdout)
		}
		if err != nil {
			return cli.Fail(err)
		}
	}
	return nil
}

const checkDoc = `usage: sortie-images check [flags]

Rebuilds the images and compares each digest, and the CA bundle's, with the
lock file. Exit 1 if any differs, is missing from the lock, or is pinned but
cannot be built. Without --ca-certs it rebuilds with the bundle the lock
records: the pinned Mozilla roots, or the file a build was given.

Output, one line each (stdout):
  CA OK <digest> <source>                  the CA bundle is the pinned one
  CA CHANGED lock=<digest> built=<digest> <source>
  CA UNPINNED built=<digest> <source>      the lock records no CA bundle
  OK <name> <digest>                       the rebuilt digest is the pinned one
  CHANGED <name> lock=<digest> built=<digest>
  UNPINNED <name> built=<digest>           built but not in the lock
  UNBUILT <name> lock=<digest>             pinned but no such image or package
  CHECK PASS|FAIL images=<n> ok=<n> changed=<n> unpinned=<n> unbuilt=<n>

Flags:
`

var builtForRE = regexp.MustCompile(` for (\S+), CA bundle `)

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) error {
	fs := newFlagSet("check", checkDoc, stderr)
	var bf buildFlags
	bf.register(fs)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	lock, err := ReadLock(bf.lock)
	if err != nil {
		return cli.Usage(err)
	}
	if len(bf.platforms) == 0 {
		// Rebuild for the platforms the lock was built for.
		if m := builtForRE.FindStringSubmatch(lock.BuiltWith); m != nil {
			_ = bf.platforms.Set(m[1])
		}
	}
	if bf.caCerts == "" {
		// The bundle the lock was built with: a file given to build, else
		// the pinned roots.
		if bf.caCerts = lock.CA.File(); bf.caCerts != "" {
			log.Info("rebuilding with the CA bundle the lock records", "file", bf.caCerts)
		}
	}
	if len(bf.only) == 0 {
		// Rebuild what the lock pins, so a pinned image whose package is
		// gone is reported rather than skipped.
		for _, e := range lock.Images {
			if _, ok := Lookup(e.Name); ok {
				bf.only = append(bf.only, e.Name)
			}
		}
	}
	o, sel, err := bf.options(stderr)
	if err != nil {
		return cli.Usage(err)
	}
	// An image pinned whose package is gone is not built, and so reported
	// as UNBUILT below.
	bins, _ := Available(bf.module, sel)
	log.Info("rebuilding", "images", len(bins), "lock", bf.lock)
	var res Result
	if len(bins) > 0 {
		res, err = Build(ctx, o, bins)
		if err != nil {
			return cli.Fail(err)
		}
	}
	rep := Compare(lock, res.Lock())
	for _, l := range rep.Lines {
		fmt.Fprintln(stdout, l)
	}
	if !rep.Pass() {
		if lock.BuiltWith != "" && res.builtWith() != lock.BuiltWith {
			log.Warn("the lock was built with something else", "lock", lock.BuiltWith, "now", res.builtWith())
		}
		return cli.Silent(cli.ExitFail)
	}
	return nil
}

// CheckReport is the comparison of a lock file with a rebuild.
type CheckReport struct {
	OK, Changed, Unpinned, Unbuilt int
	// CAChanged says the CA bundle's digest differs from the pinned one.
	CAChanged bool
	// Lines are the output lines, one per image then the CHECK line.
	Lines []string
}

// Pass reports whether every image agreed.
func (r CheckReport) Pass() bool { return r.Changed+r.Unpinned+r.Unbuilt == 0 && !r.CAChanged }

// Compare compares the pinned lock with the built one: the CA bundle first
// (a changed bundle changes every image), then image by image in the pinned
// lock's order, then the images only built. A lock that records no bundle
// (written before bundles were recorded) is compared by its images alone.
func Compare(pinned, built Lock) CheckReport {
	var r CheckReport
	switch b := built.CA; {
	case b.Digest == "":
	case pinned.CA.Digest == "":
		r.Lines = append(r.Lines, fmt.Sprintf("CA UNPINNED built=%s %s", b.Digest, b.Source))
	case pinned.CA.Digest == b.Digest:
		r.Lines = append(r.Lines, fmt.Sprintf("CA OK %s %s", b.Digest, b.Source))
	default:
		r.CAChanged = true
		r.Lines = append(r.Lines, fmt.Sprintf("CA CHANGED lock=%s built=%s %s", pinned.CA.Digest, b.Digest, b.Source))
	}
	for _, e := range pinned.Images {
		d, ok := built.Digest(e.Name)
		switch {
		case !ok:
			r.Unbuilt++
			r.Lines = append(r.Lines, fmt.Sprintf("UNBUILT %s lock=%s", e.Name, e.Digest))
		case d == e.Digest:
			r.OK++
			r.Lines = append(r.Lines, fmt.Sprintf("OK %s %s", e.Name, e.Digest))
		default:
			r.Changed++
			r.Lines = append(r.Lines, fmt.Sprintf("CHANGED %s lock=%s built=%s", e.Name, e.Digest, d))
		}
	}
	for _, e := range built.Images {
		if _, ok := pinned.Digest(e.Name); !ok {
			r.Unpinned++
			r.Lines = append(r.Lines, fmt.Sprintf("UNPINNED %s built=%s", e.Name, e.Digest))
		}
	}
	verdict := "PASS"
	if !r.Pass() {
		verdict = "FAIL"
	}
	r.Lines = append(r.Lines, fmt.Sprintf("CHECK %s images=%d ok=%d changed=%d unpinned=%d unbuilt=%d",
		verdict, r.OK+r.Changed+r.Unpinned+r.Unbuilt, r.OK, r.Changed, r.Unpinned, r.Unbuilt))
	return r
}

const pinDoc = `usage: sortie-images pin [flags]

Copies the lock file's digests into the chart's values (images.<key>.digest
for the engine and the driver) and into every sortie image reference
(<name>@sha256:...) of the README. A file given as "" is left alone.

Output, one line per file (stdout):
  PINNED <file>      the file changed
  UNCHANGED <file>   it already held the lock's digests

Flags:
`

func runPin(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("pin", pinDoc, stderr)
	lockPath := fs.String("lock", "images.lock", "the lock file")
	values := fs.String("values", "charts/sortie/values.yaml", "the chart's values file")
	readme := fs.String("readme", "README.md", "the README")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	lock, err := ReadLock(*lockPath)
	if err != nil {
		return cli.Usage(err)
	}
	return pinFiles(stdout, lock, *values, *readme)
}

// pinFiles copies the lock's digests into the values file and the README
// (either skipped when its path is ""), printing PINNED or UNCHANGED per
// file: the one writer of pins, for pin and release.
func pinFiles(stdout io.Writer, lock Lock, values, readme string) error {
	type target struct {
		path string
		pin  func([]byte, Lock) ([]byte, error)
	}
	for _, t := range []target{{values, PinValues}, {readme, PinReadme}} {
		if t.path == "" {
			continue
		}
		old, err := readFile(t.path)
		if err != nil {
			return cli.Usage(err)
		}
		data, err := t.pin(old, lock)
		if err != nil {
			return cli.Usage(fmt.Errorf("%s: %w", t.path, err))
		}
		if string(data) == string(old) {
			fmt.Fprintf(stdout, "UNCHANGED %s\n", t.path)
			continue
		}
		if err := record.WriteFile(t.path, data, 0o644); err != nil {
			return cli.Fail(err)
		}
		fmt.Fprintf(stdout, "PINNED %s\n", t.path)
	}
	return nil
}

const layerDoc = `usage: sortie-images layer --name NAME --binary FILE --out FILE [flags]

Writes the uncompressed tar of an image's only layer, exactly as build puts
it in the image: the binary at /usr/local/bin/NAME, the CA bundle (the
pinned Mozilla roots unless --ca-certs), passwd
and group with user 65532, its home and /tmp, every time the Unix epoch.
Bazel's oci_image (images/oci) wraps it; build does not need this command.

Output (stdout):
  LAYER <file> <sha256 of the tar>

Flags:
`

func runLayer(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("layer", layerDoc, stderr)
	name := fs.String("name", "", "the image and binary name, e.g. sortie-engine")
	binary := fs.String("binary", "", "the static binary")
	caCerts := fs.String("ca-certs", "", "PEM CA bundle `FILE` installed at "+CACertsPath+" (default: the Mozilla roots of "+RootsSource+")")
	out := fs.String("out", "", "the tar file to write")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	var errs []error
	for _, f := range []struct{ flag, value string }{{"--name", *name}, {"--binary", *binary}, {"--out", *out}} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.flag))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cli.Usage(err)
	}
	bin, err := readFile(*binary)
	if err != nil {
		return cli.Usage(err)
	}
	ca, err := LoadCABundle(*caCerts)
	if err != nil {
		return cli.Usage(err)
	}
	tarBytes, err := LayerTar(*name, bin, ca.PEM)
	if err != nil {
		return cli.Usage(err)
	}
	if err := record.WriteFile(*out, tarBytes, 0o644); err != nil {
		return cli.Fail(err)
	}
	fmt.Fprintf(stdout, "LAYER %s sha256:%x\n", *out, sha256.Sum256(tarBytes))
	return nil
}

const rootsDoc = `usage: sortie-images roots --out FILE

Writes the CA bundle every image carries unless build is given --ca-certs:
Mozilla's roots from the Go module ` + RootsSource + `,
as PEM, each certificate under its SHA-256 fingerprint, sorted by it; the
same bytes on every machine. A private CA's bundle for --ca-certs can start
from it (cat FILE private-ca.pem > bundle.pem).

Output (stdout):
  ROOTS <file> <digest> <source>

Flags:
`

func runRoots(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("roots", rootsDoc, stderr)
	out := fs.String("out", "", "the PEM `FILE` to write")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *out == "" {
		return cli.Usage(errors.New("--out is required"))
	}
	ca, err := LoadCABundle("")
	if err != nil {
		return cli.Fail(err)
	}
	if err := record.WriteFile(*out, ca.PEM, 0o644); err != nil {
		return cli.Fail(err)
	}
	fmt.Fprintf(stdout, "ROOTS %s %s %s\n", *out, ca.Digest(), ca.Source)
	return nil
}
