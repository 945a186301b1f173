package provenance

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImageRefs(t *testing.T) {
	b, err := os.ReadFile("testdata/release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ImageRefs(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"docker.io/library/busybox:1.36",
		"ghcr.io/sortie-soak/sortie-engine@sha256:" + strings.Repeat("1", 64),
		"ghcr.io/sortie-soak/sortie@sha256:" + strings.Repeat("2", 64),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ImageRefs (-want +got):\n%s", diff)
	}
	// What the kickoff does with them: the sidecar's tag is refused.
	_, err = Check(context.Background(), got, Options{})
	if !errors.Is(err, ErrTag) || !strings.Contains(err.Error(), "busybox:1.36") {
		t.Errorf("Check of the release's images: %v, want the busybox tag refused", err)
	}

	for _, bad := range []string{
		"kind: Pod\nspec:\n  containers:\n    - name: x\n      image: 7\n",
		"kind: Pod\nspec:\n  containers:\n    - name: x\n      image: \"\"\n",
		"kind: [\n",
	} {
		if _, err := ImageRefs([]byte(bad)); err == nil {
			t.Errorf("ImageRefs(%q): no error", bad)
		}
	}
	if refs, err := ImageRefs(nil); err != nil || len(refs) != 0 {
		t.Errorf("ImageRefs(nil) = %v, %v", refs, err)
	}
}

func FuzzImageRefs(f *testing.F) {
	if b, err := os.ReadFile("testdata/release.yaml"); err == nil {
		f.Add(string(b))
	}
	f.Add("containers: [{image: a@sha256:" + strings.Repeat("0", 64) + "}]\n")
	f.Add("a: &x [*x]\n")
	f.Add("---\n---\n")
	f.Fuzz(func(t *testing.T, s string) {
		refs, err := ImageRefs([]byte(s))
		if err != nil {
			return
		}
		for i, r := range refs {
			if r == "" || (i > 0 && refs[i-1] >= r) {
				t.Fatalf("ImageRefs(%q) = %q: empty, unsorted or repeated", s, refs)
			}
		}
	})
}
