package gate

import (
	"debug/elf"
	"debug/gosym"
	"debug/macho"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// forbidden says why an import path must not be in the gate's build: the
// gate is run anywhere, on a copied report, and must carry no network code.
func forbidden(pkg string) (string, bool) {
	switch {
	case pkg == "net" || strings.HasPrefix(pkg, "net/"):
		return "the standard library's network packages", true
	case pkg == "google.golang.org/grpc" || strings.HasPrefix(pkg, "google.golang.org/grpc/"):
		return "gRPC", true
	case strings.HasPrefix(pkg, "k8s.io/"):
		return "client-go and the Kubernetes API", true
	case pkg == "golang.org/x/net" || strings.HasPrefix(pkg, "golang.org/x/net/"):
		return "golang.org/x/net", true
	}
	return "", false
}

func TestForbidden(t *testing.T) {
	// The check itself must be able to fail.
	for _, pkg := range []string{"net", "net/http", "net/netip", "google.golang.org/grpc", "google.golang.org/grpc/codes", "k8s.io/client-go/kubernetes", "golang.org/x/net/http2"} {
		if _, bad := forbidden(pkg); !bad {
			t.Errorf("%s is not flagged", pkg)
		}
	}
	for _, pkg := range []string{"encoding/json", "math/big", "github.com/sortie-soak/sortie/record", "network", "google.golang.org/protobuf/proto", "netx"} {
		if _, bad := forbidden(pkg); bad {
			t.Errorf("%s is flagged", pkg)
		}
	}
}

// depsPatterns are the packages whose whole build, tests included, must be
// free of network code: the gate, its command, and the record package it
// reads reports with.
var depsPatterns = []string{
	"github.com/sortie-soak/sortie/gate/...",
	"github.com/sortie-soak/sortie/record/...",
}

// TestNoNetworkDeps lists every package the gate, its command and the
// record package build from, tests included, and fails on any network
// package. It catches a network import added to a package the gate imports
// (record, internal/cli) as well as to the gate itself. A check that
// cannot run fails: a go command that cannot be found, or cannot list the
// module, is a failure, never a skip.
//
// Under Bazel the sandbox holds neither the go command nor the module's
// sources, so go list cannot run there; the same rule is then checked on
// what Bazel linked into this test binary (checkLinked), which is the
// gate with every package it imports.
func TestNoNetworkDeps(t *testing.T) {
	if os.Getenv("TEST_SRCDIR") != "" {
		t.Log("under Bazel: checking the functions linked into this test binary instead of go list")
		checkLinked(t)
		return
	}
	goBin, err := goCommand()
	if err != nil {
		t.Fatalf("the dependency check cannot run: %v", err)
	}
	cmd := exec.Command(goBin, append([]string{"list", "-deps", "-test"}, depsPatterns...)...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, msg)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list named only %d packages: %q", len(pkgs), pkgs)
	}
	for _, want := range []string{"github.com/sortie-soak/sortie/gate/cmd/sortie-gate", "github.com/sortie-soak/sortie/record", "github.com/sortie-soak/sortie/record.test"} {
		if !contains(pkgs, want) {
			t.Errorf("go list did not name %s: the check does not cover it", want)
		}
	}
	for _, pkg := range pkgs {
		if why, bad := forbidden(pkg); bad {
			t.Errorf("the gate depends on %s (%s); it must import no network code", pkg, why)
		}
	}
}

// TestNoNetworkLinked checks the functions linked into this test binary,
// so the check Bazel runs is itself run (and can fail) under go test.
func TestNoNetworkLinked(t *testing.T) { checkLinked(t) }

// goCommand finds the go command of the toolchain that built this test,
// else the one on PATH.
func goCommand() (string, error) {
	own := filepath.Join(runtime.GOROOT(), "bin", "go")
	if p, err := exec.LookPath(own); err == nil {
		return p, nil
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command at %s nor on PATH: %w", own, err)
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkLinked reads the Go function table (pclntab, kept even in a
// stripped binary) of the running test binary and fails on any function of
// a network package. It first makes sure the table was read: functions of
// the gate and of the record package must be in it.
func checkLinked(t *testing.T) {
	t.Helper()
	pkgs, err := linkedPackages()
	if err != nil {
		t.Fatalf("the link check cannot run: %v", err)
	}
	for _, want := range []string{"github.com/sortie-soak/sortie/gate", "github.com/sortie-soak/sortie/record", "encoding/json"} {
		if !pkgs[want] {
			t.Fatalf("no function of %s in the binary's function table (%d packages): the table was not read right", want, len(pkgs))
		}
	}
	var names []string
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if why, bad := forbidden(p); bad {
			t.Errorf("the gate's test binary links %s (%s); it must carry no network code", p, why)
		}
	}
}

// linkedPackages returns the packages that have a function in the running
// binary's function table.
func linkedPackages() (map[string]bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	pcln, text, err := pclntab(exe)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exe, err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(pcln, text))
	if err != nil {
		return nil, fmt.Errorf("%s: function table: %w", exe, err)
	}
	pkgs := map[string]bool{}
	for _, fn := range tab.Funcs {
		if p := fn.PackageName(); p != "" {
			pkgs[p] = true
		}
	}
	return pkgs, nil
}

// pclntab returns the function table section and the text start of an
// ELF or Mach-O executable.
func pclntab(exe string) ([]byte, uint64, error) {
	if f, err := elf.Open(exe); err == nil {
		defer f.Close()
		tab, text := f.Section(".gopclntab"), f.Section(".text")
		if tab == nil || text == nil {
			return nil, 0, errors.New("no .gopclntab or .text section")
		}
		b, err := tab.Data()
		return b, text.Addr, err
	}
	if f, err := macho.Open(exe); err == nil {
		defer f.Close()
		tab, text := f.Section("__gopclntab"), f.Section("__text")
		if tab == nil || text == nil {
			return nil, 0, errors.New("no __gopclntab or __text section")
		}
		b, err := tab.Data()
		return b, text.Addr, err
	}
	return nil, 0, fmt.Errorf("neither ELF nor Mach-O (%s/%s): its function table cannot be read", runtime.GOOS, runtime.GOARCH)
}
