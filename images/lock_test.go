package images

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hexB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestParseLock(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Lock
		wantErr []string // substrings of the error, each on its own line
	}{
		{
			name: "images and built-with",
			in:   "# comment\n# built with go1.26.8 for linux/amd64, CA bundle sha256:x\n\nsortie-engine sha256:" + hexA + "\r\nsortie sha256:" + hexB + "\n",
			want: Lock{
				BuiltWith: "go1.26.8 for linux/amd64, CA bundle sha256:x",
				Images: []LockEntry{
					{Name: "sortie-engine", Digest: "sha256:" + hexA},
					{Name: "sortie", Digest: "sha256:" + hexB},
				},
			},
		},
		{
			name: "CA bundle",
			in: "# built with go1.26.8 for linux/amd64, CA bundle sha256:" + hexB + "\n" +
				"# CA bundle sha256:" + hexB + " " + RootsSource + "\nsortie sha256:" + hexA + "\n",
			want: Lock{
				BuiltWith: "go1.26.8 for linux/amd64, CA bundle sha256:" + hexB,
				CA:        LockCA{Digest: "sha256:" + hexB, Source: RootsSource},
				Images:    []LockEntry{{Name: "sortie", Digest: "sha256:" + hexA}},
			},
		},
		{
			name: "CA bundle from a file",
			in:   "# CA bundle sha256:" + hexB + " file:certs/private ca.pem\n",
			want: Lock{CA: LockCA{Digest: "sha256:" + hexB, Source: "file:certs/private ca.pem"}},
		},
		{
			name: "every bad CA line named",
			in: "# CA bundle sha256:" + hexA + " " + RootsSource + "\n" +
				"# CA bundle sha256:" + hexB + " " + RootsSource + "\n" + // a second one
				"# CA bundle sha256:abc " + RootsSource + "\n" +
				"# CA bundle sha256:" + hexA + "\n" +
				"# CA bundle sha256:" + hexA + " file:\n" +
				"# CA bundle sha256:" + hexA + " golang.org/x/crypto/x509roots/fallback\n",
			wantErr: []string{
				"line 2: CA bundle already pinned on line 1",
				`line 3: CA bundle digest "sha256:abc"`,
				`line 4: CA bundle source ""`,
				`line 5: CA bundle source "file:": no path`,
				`line 6: CA bundle source "golang.org/x/crypto/x509roots/fallback": want <module>@<version>`,
			},
		},
		{name: "empty", in: "", want: Lock{}},
		{
			name: "every bad line named",
			in: "sortie-engine sha256:" + hexA + "\n" +
				"sortie-engine sha256:" + hexB + "\n" + // duplicate
				"Sortie sha256:" + hexA + "\n" + // upper case
				"sortie sha256:" + hexA[:63] + "\n" + // short digest
				"sortie  sha256:" + hexA + "\n" + // two spaces
				"sortie sha512:" + hexA + "\n",
			wantErr: []string{
				"line 2: image sortie-engine already pinned on line 1",
				`line 3: image name "Sortie"`,
				"line 4: digest",
				`line 5: want "<name> sha256:<hex>"`,
				`line 6: digest "sha512:`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLock([]byte(tt.in))
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("ParseLock: no error, want %q", tt.wantErr)
				}
				lines := strings.Split(err.Error(), "\n")
				if len(lines) != len(tt.wantErr) {
					t.Fatalf("ParseLock error has %d lines, want %d:\n%v", len(lines), len(tt.wantErr), err)
				}
				for i, w := range tt.wantErr {
					if !strings.Contains(lines[i], w) {
						t.Errorf("error line %d = %q, want it to contain %q", i+1, lines[i], w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLock: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseLock (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLockRoundTrip(t *testing.T) {
	l := Lock{
		BuiltWith: "go1.26.8 for linux/amd64, CA bundle sha256:" + hexA,
		CA:        LockCA{Digest: "sha256:" + hexA, Source: RootsSource},
		Images: []LockEntry{
			{Name: "sortie-engine", Digest: "sha256:" + hexA},
			{Name: "sortie", Digest: "sha256:" + hexB},
		},
	}
	got, err := ParseLock(l.Format())
	if err != nil {
		t.Fatalf("ParseLock(Format()): %v\n%s", err, l.Format())
	}
	if diff := cmp.Diff(l, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if d, ok := got.Digest("sortie"); !ok || d != "sha256:"+hexB {
		t.Errorf("Digest(sortie) = %q, %v", d, ok)
	}
	if _, ok := got.Digest("sortie-gate"); ok {
		t.Error("Digest(sortie-gate) found in a lock without it")
	}
}

// TestRepoLockParses holds the checked-in lock file to the format and to the
// table of images: every image it pins is one sortie builds.
func TestRepoLockParses(t *testing.T) {
	l, err := ReadLock("../images.lock")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Images) == 0 {
		t.Fatal("../images.lock pins no image")
	}
	for _, e := range l.Images {
		if _, ok := Lookup(e.Name); !ok {
			t.Errorf("../images.lock pins %s, which is not in Binaries", e.Name)
		}
	}
	if l.BuiltWith == "" {
		t.Error("../images.lock has no \"# built with\" line")
	}
	// The images were built with the pinned roots, and the lock says which.
	if want := (LockCA{Digest: "sha256:" + hexSum(MozillaRoots()), Source: RootsSource}); l.CA != want {
		t.Errorf("../images.lock pins CA bundle %+v, want the pinned roots %+v (run sortie-images build)", l.CA, want)
	}
}

func FuzzParseLock(f *testing.F) {
	f.Add([]byte("sortie-engine sha256:" + hexA + "\n"))
	f.Add([]byte("# built with go1.26.8 for linux/amd64\nsortie sha256:" + hexB))
	f.Add([]byte("sortie sha256:" + hexA + "\nsortie sha256:" + hexA + "\n"))
	f.Add([]byte("bad line\n\x00\n#\n"))
	f.Add([]byte("# CA bundle sha256:" + hexA + " " + RootsSource + "\nsortie sha256:" + hexB + "\n"))
	f.Add([]byte("# CA bundle sha256:" + hexA + " file: a\tb\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLock(data)
		if err != nil {
			return
		}
		// Whatever parses formats to a file that parses to the same lock.
		again, err := ParseLock(l.Format())
		if err != nil {
			t.Fatalf("ParseLock(Format()) of a parsed lock: %v", err)
		}
		if diff := cmp.Diff(l, again, cmp.Comparer(func(a, b Lock) bool {
			return cmp.Equal(a.Images, b.Images) && strings.TrimSpace(a.BuiltWith) == b.BuiltWith && a.CA == b.CA
		})); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
