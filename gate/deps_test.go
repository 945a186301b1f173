package gate

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// TestNoNetworkDeps lists every package the gate and its command build
// from, tests included, and fails on any network package. It catches a
// network import added to a package the gate imports (driver/report,
// internal/counters, internal/cli) as well as to the gate itself.
func TestNoNetworkDeps(t *testing.T) {
	if os.Getenv("TEST_SRCDIR") != "" {
		// Bazel's sandbox has neither the go command nor the module; go
		// test, the toolchain of record, runs this check.
		t.Skip("under bazel")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to list the dependencies with")
		}
	}
	cmd := exec.Command(goBin, "list", "-deps", "-test", "github.com/sortie-soak/sortie/gate/...")
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, msg)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list named only %d packages: %q", len(pkgs), pkgs)
	}
	for _, pkg := range pkgs {
		if why, bad := forbidden(pkg); bad {
			t.Errorf("the gate depends on %s (%s); it must import no network code", pkg, why)
		}
	}
}
