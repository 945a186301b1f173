package render

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// FuzzParseTargets checks that the targets-file parser never panics, that
// what it accepts keeps the file's rules, and that writing the accepted
// targets back out parses to the same targets.
func FuzzParseTargets(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "targets", "*.txt"))
	for _, path := range seeds {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "#", "a http://a/ 1", "a http://a/ 1 # c", "a\thttp://[::1]:80/ 1",
		"a http://a:0/ 1", "a http://%zz/ 1", "a http:// 1", "a http://a/ 99999999999999999999",
		"a http://a/ 1\r\na http://a/ 1", "\x00 \x00 \x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		targets, err := ParseTargets("fuzz.txt", data)
		if err != nil {
			if targets != nil {
				t.Fatalf("targets %v with error %v", targets, err)
			}
			if !strings.HasPrefix(err.Error(), "fuzz.txt") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(targets) == 0 || len(targets) > MaxTargets {
			t.Fatalf("%d targets accepted", len(targets))
		}
		seen := map[string]bool{}
		var b strings.Builder
		for _, tg := range targets {
			if !nameRE.MatchString(tg.Name) || seen[tg.Name] {
				t.Fatalf("bad or repeated name %q accepted", tg.Name)
			}
			seen[tg.Name] = true
			if tg.Weight < 1 || tg.Weight > maxWeight {
				t.Fatalf("weight %d accepted", tg.Weight)
			}
			if checkURL(tg.URL) != nil {
				t.Fatalf("bad url %q accepted", tg.URL)
			}
			fmt.Fprintf(&b, "%s %s %d\n", tg.Name, tg.URL, tg.Weight)
		}
		again, err := ParseTargets("fuzz.txt", []byte(b.String()))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b.String(), err)
		}
		for i := range again {
			a, o := again[i], targets[i]
			if a.Name != o.Name || a.URL != o.URL || a.Weight != o.Weight {
				t.Fatalf("round trip: %+v became %+v", o, a)
			}
		}
		// Whatever parses renders, or is refused with a share error.
		if _, err := ComputeShares(targets, 60, 1); err != nil && !strings.Contains(err.Error(), "does not split") {
			t.Fatalf("shares: %v", err)
		}
	})
}
