package plan

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/record"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with the file, or rewrites the file under -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

// TestPlans drives every plan under testdata/plans: a valid-*.yaml plan must
// parse and compile (against its placeholders), and its description and
// engine requests must match the golden files beside it; an invalid-*.yaml
// plan must be refused with exactly the errors in its .err golden file,
// every one of them with its file:line:col.
func TestPlans(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "plans", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var valid, invalid int
	for _, file := range files {
		base := strings.TrimSuffix(file, ".yaml")
		name := filepath.Base(base)
		switch {
		case strings.HasPrefix(name, "valid-"):
			valid++
			t.Run(name, func(t *testing.T) {
				p, err := Load(file)
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				c, err := p.Compile(p.Placeholders())
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				var desc, reqs bytes.Buffer
				c.Describe(&desc)
				if err := c.WriteRequests(&reqs); err != nil {
					t.Fatalf("WriteRequests: %v", err)
				}
				golden(t, base+".describe.golden", desc.Bytes())
				golden(t, base+".requests.golden", reqs.Bytes())
			})
		case strings.HasPrefix(name, "invalid-"):
			invalid++
			t.Run(name, func(t *testing.T) {
				p, err := Load(file)
				if err == nil {
					_, err = p.Compile(p.Placeholders())
				}
				if err == nil {
					t.Fatal("the plan was accepted")
				}
				for _, line := range strings.Split(err.Error(), "\n") {
					if !strings.HasPrefix(line, file+":") {
						t.Errorf("error line without the plan's position: %q", line)
					}
				}
				var perr *Error
				if !errors.As(err, &perr) || perr.File != file || perr.Line < 1 || perr.Col < 1 {
					t.Errorf("errors.As(*Error) = %+v", perr)
				}
				golden(t, base+".err.golden", []byte(err.Error()+"\n"))
			})
		default:
			t.Errorf("%s: a plan under testdata/plans is named valid-* or invalid-*", file)
		}
	}
	if valid == 0 || invalid == 0 {
		t.Fatalf("found %d valid and %d invalid plans", valid, invalid)
	}
}

// TestLoadCap refuses a plan over MaxBytes, naming the file and the cap,
// without reading an endless one (/dev/zero) to its end.
func TestLoadCap(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("version: v1\n"+strings.Repeat("#", MaxBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{big, "/dev/zero"} {
		_, err := Load(path)
		var tl *record.TooLargeError
		if !errors.As(err, &tl) || tl.Path != path || tl.Max != MaxBytes {
			t.Fatalf("Load(%s): %v, want a *record.TooLargeError", path, err)
		}
		if !strings.Contains(err.Error(), "8 MiB") {
			t.Errorf("message %q does not name the cap", err)
		}
	}
	if _, err := Parse("big.yaml", make([]byte, MaxBytes+1)); err == nil || !strings.Contains(err.Error(), "big.yaml") {
		t.Fatalf("Parse of an over-cap plan: %v", err)
	}
}
