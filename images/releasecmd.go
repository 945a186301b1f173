package images

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/internal/clock"
	"github.com/sortie-soak/sortie/provenance"
)

// PasswordEnv is the variable the signing key's password is read from, the
// one cosign itself reads, so one CI secret serves both.
const PasswordEnv = "COSIGN_PASSWORD"

// DefaultSourceURI is the repository the provenance names as the source.
const DefaultSourceURI = "git+https://github.com/sortie-soak/sortie"

const releaseDoc = `usage: sortie-images release --registry HOST[:PORT][/PREFIX] --key cosign.key [flags]

The release pipeline, in one command:
  1. builds every image, as build does (reproducible; the lock's digests);
  2. pushes each to <registry>/<name>@<digest> (and :<tag> with --tag), then
     asks the registry for it and refuses if it serves another digest;
  3. signs each by digest with the cosign private key, as
     "cosign sign --key cosign.key --tlog-upload=false <ref>@<digest>" does
     (the signature under the tag sha256-<hex>.sig);
  4. attaches each image's SLSA v1.0 build provenance (an in-toto statement
     whose subject is the digest: package, platforms, source commit, Go
     toolchain, flags, CA bundle, builder, times) in a DSSE envelope signed
     with the same key, as "cosign attest --type slsaprovenance1" does
     (under sha256-<hex>.att);
  5. writes the lock file and pins the digests into the chart's values and
     the README, as pin does. Nothing is pinned unless every image was
     pushed, signed and attested.

Before building it refuses (exit 2) a missing key, a key without a password
(` + PasswordEnv + ` or --password-file) or one the password does not open,
and (exit 1) a registry that does not answer. The key is made with
"cosign generate-key-pair"; verify with "soak run ... --verify --key
cosign.pub" or "cosign verify --key cosign.pub --insecure-ignore-tlog".
Keyless signing (a CI's OIDC identity) is not done by this command; see
the README's Releasing section.

Output, one line each (stdout):
  IMAGE <name> <digest>                  an image built
  PUSHED <name> <ref> [<tag ref>]        pushed
  SIGNED <name> <ref>                    signature uploaded
  ATTESTED <name> <ref> <predicate type> provenance uploaded
  LOCK <file>
  PINNED|UNCHANGED <file>
  RELEASED <registry> images=<n> signed=<n> attested=<n>

Flags:
`

// releaseFlags are release's own flags, besides the build flags.
type releaseFlags struct {
	registry, tag, key, passwordFile string
	builderID, source, commit        string
	values, readme, binDir           string
}

func (r *releaseFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.registry, "registry", "", "registry `HOST[:PORT][/PREFIX]` to release to (required)")
	fs.StringVar(&r.tag, "tag", "", "also tag each image (default: by digest only)")
	fs.StringVar(&r.key, "key", "", "cosign private key `FILE` (cosign.key, from cosign generate-key-pair) (required)")
	fs.StringVar(&r.passwordFile, "password-file", "", "`FILE` holding the key's password (default: $"+PasswordEnv+")")
	fs.StringVar(&r.builderID, "builder-id", DefaultBuilderID, "the provenance's builder identity `URI` (a CI gives its workflow's)")
	fs.StringVar(&r.source, "source", DefaultSourceURI, "the source repository `URI` the provenance names")
	fs.StringVar(&r.commit, "commit", "", "the source commit the provenance names (default: git rev-parse HEAD in --module; a dirty tree is recorded as such)")
	fs.StringVar(&r.values, "values", "charts/sortie/values.yaml", "the chart's values file to pin (\"\": none)")
	fs.StringVar(&r.readme, "readme", "README.md", "the README to pin (\"\": none)")
	fs.StringVar(&r.binDir, "bin-dir", "", "keep the compiled binaries here (default: a temporary directory)")
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// validate returns every problem of the flags and the password, at once.
func (r *releaseFlags) validate(e Env, only []string) (password []byte, err error) {
	var errs []error
	if r.registry == "" {
		errs = append(errs, errors.New("--registry is required"))
	}
	if len(only) > 0 {
		errs = append(errs, errors.New("--only: a release ships every image"))
	}
	if r.commit != "" && !commitRE.MatchString(r.commit) {
		errs = append(errs, fmt.Errorf("--commit %q: want a full commit hash", r.commit))
	}
	switch {
	case r.key == "":
		errs = append(errs, errors.New("--key is required: a cosign private key (cosign generate-key-pair writes cosign.key)"))
	case r.passwordFile != "":
		b, err := readFile(r.passwordFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--password-file: %w", err))
		}
		password = []byte(strings.TrimRight(string(b), "\r\n"))
	default:
		p, ok := e.lookup(PasswordEnv)
		if !ok {
			errs = append(errs, fmt.Errorf("no password for the key %s: set %s (empty for a key without one) or give --password-file", r.key, PasswordEnv))
		}
		password = []byte(p)
	}
	return password, errors.Join(errs...)
}

func (e Env) runRelease(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) error {
	fs := newFlagSet("release", releaseDoc, stderr)
	var bf buildFlags
	bf.register(fs)
	var rf releaseFlags
	rf.register(fs)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if len(bf.platforms) == 0 {
		bf.platforms = listFlag{"linux/amd64"}
	}
	password, err := rf.validate(e, bf.only)
	o, sel, berr := bf.options(stderr)
	if err := errors.Join(err, berr); err != nil {
		return cli.Usage(err)
	}
	signer, err := provenance.LoadSigner(rf.key, password)
	if err != nil {
		return cli.Usage(err)
	}
	src := Source{URI: rf.source, Commit: rf.commit}
	if src.Commit == "" {
		if src, err = GitSource(ctx, bf.module, rf.source); err != nil {
			return cli.Usage(err)
		}
		if src.Dirty {
			log.Warn("the working tree has uncommitted changes: the provenance records it as dirty", "commit", src.Commit)
		}
	}
	ro := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if err := ProbeRegistry(ctx, rf.registry, ro...); err != nil {
		return cli.Fail(err)
	}
	bins, missing := Available(bf.module, sel)
	if len(missing) > 0 {
		return cli.Usage(fmt.Errorf("a release ships every image; no main package for %s under %s", strings.Join(missing, ", "), bf.module))
	}
	clk := clock.Clock(clock.Real{})
	started := clk.Now()
	o.BinDir = rf.binDir
	log.Info("building", "images", len(bins), "platforms", bf.platforms.String())
	res, err := Build(ctx, o, bins)
	if err != nil {
		return cli.Fail(err)
	}
	for _, a := range res.Artifacts {
		fmt.Fprintf(stdout, "IMAGE %s %s\n", a.Name, a.Digest)
	}
	log.Info("releasing", "registry", rf.registry, "commit", src.Commit)
	rel, err := Release(ctx, ReleaseOptions{Registry: rf.registry, Tag: rf.tag, Signer: signer, Source: src,
		BuilderID: rf.builderID, Started: started, Clock: clk, Remote: ro}, res)
	printReleased(stdout, rel)
	if err != nil {
		return cli.Fail(fmt.Errorf("release to %s: %w (nothing was pinned)", rf.registry, err))
	}
	if err := WriteLock(bf.lock, res.Lock()); err != nil {
		return cli.Fail(err)
	}
	fmt.Fprintf(stdout, "LOCK %s\n", bf.lock)
	if err := pinFiles(stdout, res.Lock(), rf.values, rf.readme); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "RELEASED %s images=%d signed=%d attested=%d\n", rf.registry, len(rel), len(rel), len(rel))
	return nil
}

// printReleased prints what a release did, image by image, as far as it
// got.
func printReleased(stdout io.Writer, rel []Released) {
	for _, r := range rel {
		fmt.Fprintf(stdout, "PUSHED %s %s", r.Name, r.Ref)
		if r.Tag != "" {
			fmt.Fprintf(stdout, " %s", r.Tag)
		}
		fmt.Fprintln(stdout)
	}
	for _, r := range rel {
		if r.Signed {
			fmt.Fprintf(stdout, "SIGNED %s %s\n", r.Name, r.Ref)
		}
		if r.Attested {
			fmt.Fprintf(stdout, "ATTESTED %s %s %s\n", r.Name, r.Ref, provenance.SLSAPredicateType)
		}
	}
}
