package images

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/<name>, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := "testdata/" + name
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func testLock(t *testing.T) Lock {
	t.Helper()
	l, err := ReadLock("testdata/pinned.lock")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestPinValues(t *testing.T) {
	in, err := os.ReadFile("testdata/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := testLock(t)
	got, err := PinValues(in, l)
	if err != nil {
		t.Fatalf("PinValues: %v", err)
	}
	golden(t, "values.pinned.yaml", got)

	// The pinned file reads back with the lock's digests, and only the two
	// digest lines changed.
	for _, k := range []struct{ key, image string }{{"engine", "sortie-engine"}, {"driver", "sortie"}} {
		d, err := ValuesDigest(got, k.key)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := l.Digest(k.image); d != want {
			t.Errorf("images.%s.digest = %s, want %s", k.key, d, want)
		}
	}
	inLines, gotLines := strings.Split(string(in), "\n"), strings.Split(string(got), "\n")
	if len(inLines) != len(gotLines) {
		t.Fatalf("PinValues changed the number of lines: %d -> %d", len(inLines), len(gotLines))
	}
	changed := 0
	for i := range inLines {
		if inLines[i] != gotLines[i] {
			changed++
		}
	}
	if changed != 2 {
		t.Errorf("PinValues changed %d lines, want 2", changed)
	}

	// Pinning again changes nothing.
	again, err := PinValues(got, l)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(got) {
		t.Error("PinValues is not idempotent")
	}
}

func TestPinValuesErrors(t *testing.T) {
	l := testLock(t)
	tests := []struct {
		name, values string
		lock         Lock
		want         []string
	}{
		{
			name:   "keys missing",
			values: "images:\n  engine:\n    repository: x\n",
			lock:   l,
			want:   []string{"images.engine.digest not found", "images.driver not found"},
		},
		{
			name:   "image missing from the lock",
			values: "images:\n  engine: {digest: \"\"}\n  driver: {digest: \"\"}\n",
			lock:   Lock{Images: []LockEntry{{Name: "sortie-engine", Digest: "sha256:" + hexA}}},
			want:   []string{"lock has no digest for sortie (images.driver.digest)"},
		},
		{
			name:   "empty digest",
			values: "images:\n  engine:\n    digest:\n  driver:\n    digest: \"\"\n",
			lock:   l,
			want:   []string{"images.engine.digest", `write digest: ""`},
		},
		{name: "not yaml", values: "images: [\n", lock: l, want: []string{"values:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := PinValues([]byte(tt.values), tt.lock)
			if err == nil {
				t.Fatal("PinValues: no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestPinValuesFlowStyle(t *testing.T) {
	in := "images:\n  engine: {repository: r, digest: \"\"}\n  driver: {digest: '', repository: r}\n"
	got, err := PinValues([]byte(in), testLock(t))
	if err != nil {
		t.Fatal(err)
	}
	want := "images:\n  engine: {repository: r, digest: \"sha256:" + strings.Repeat("e", 64) + "\"}\n" +
		"  driver: {digest: 'sha256:" + strings.Repeat("d", 64) + "', repository: r}\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("PinValues (-want +got):\n%s", diff)
	}
}

func TestPinReadme(t *testing.T) {
	in, err := os.ReadFile("testdata/readme.md")
	if err != nil {
		t.Fatal(err)
	}
	l := testLock(t)
	got, err := PinReadme(in, l)
	if err != nil {
		t.Fatalf("PinReadme: %v", err)
	}
	golden(t, "readme.pinned.md", got)
	ds := ReadmeDigests(got)
	want := map[string][]string{
		"sortie-engine": {"sha256:" + strings.Repeat("e", 64)},
		"sortie":        {"sha256:" + strings.Repeat("d", 64)},
		"sortie-gate":   {"sha256:" + strings.Repeat("9", 64)},
	}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Errorf("ReadmeDigests (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(got), "busybox@sha256:"+strings.Repeat("0", 64)) {
		t.Error("PinReadme changed a third-party image")
	}

	// An image the lock does not pin is an error, not left behind.
	_, err = PinReadme([]byte("sortie-old@sha256:"+hexA), l)
	if err == nil || !strings.Contains(err.Error(), "sortie-old") {
		t.Errorf("PinReadme of an unknown image: %v, want an error naming sortie-old", err)
	}
}

func TestReadmeSnippet(t *testing.T) {
	l := testLock(t)
	s := ReadmeSnippet(l)
	if diff := cmp.Diff(map[string][]string{
		"sortie-engine": {"sha256:" + strings.Repeat("e", 64)},
		"sortie":        {"sha256:" + strings.Repeat("d", 64)},
		"sortie-gate":   {"sha256:" + strings.Repeat("9", 64)},
	}, ReadmeDigests([]byte(s))); diff != "" {
		t.Errorf("ReadmeDigests(ReadmeSnippet) (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(s, "```text\nsortie-engine@sha256:") || !strings.HasSuffix(s, "\n```\n") {
		t.Errorf("ReadmeSnippet = %q", s)
	}
}

func FuzzPinValues(f *testing.F) {
	if b, err := os.ReadFile("testdata/values.yaml"); err == nil {
		f.Add(string(b))
	}
	f.Add("images:\n  engine: {digest: \"\"}\n  driver: {digest: ''}\n")
	f.Add("images:\n  engine:\n    digest: \"a\\\"b\"\n  driver:\n    digest: x\n")
	f.Add("images: [1, 2]\n")
	l := Lock{Images: []LockEntry{
		{Name: "sortie-engine", Digest: "sha256:" + hexA},
		{Name: "sortie", Digest: "sha256:" + hexB},
	}}
	f.Fuzz(func(t *testing.T, values string) {
		out, err := PinValues([]byte(values), l)
		if err != nil {
			return
		}
		// Whatever pins reads back with the lock's digests.
		for key, want := range map[string]string{"engine": "sha256:" + hexA, "driver": "sha256:" + hexB} {
			got, err := ValuesDigest(out, key)
			if err != nil {
				t.Fatalf("pinned values do not parse: %v\n%s", err, out)
			}
			if got != want {
				t.Fatalf("images.%s.digest = %q after pinning, want %q\nin:\n%s\nout:\n%s", key, got, want, values, out)
			}
		}
	})
}

func FuzzPinReadme(f *testing.F) {
	if b, err := os.ReadFile("testdata/readme.md"); err == nil {
		f.Add(string(b))
	}
	f.Add("sortie@sha256:" + hexA + " x/sortie-engine@sha256:" + hexB)
	l := Lock{Images: []LockEntry{
		{Name: "sortie-engine", Digest: "sha256:" + hexA},
		{Name: "sortie", Digest: "sha256:" + hexB},
	}}
	f.Fuzz(func(t *testing.T, readme string) {
		out, err := PinReadme([]byte(readme), l)
		if err != nil {
			return
		}
		for n, ds := range ReadmeDigests(out) {
			want, _ := l.Digest(n)
			for _, d := range ds {
				if d != want {
					t.Fatalf("%s@%s left after pinning", n, d)
				}
			}
		}
	})
}
