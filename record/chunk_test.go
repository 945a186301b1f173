package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bigFile writes a file of JSON lines larger than the kubelet's 10 MiB
// log rotation, ending in a torn line.
func bigFile(t *testing.T) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	for i := 0; b.Len() < 10<<20+12345; i++ {
		fmt.Fprintf(&b, `{"type":"bucket","label":"mesh/svc-%d","index":%d}`+"\n", i%8, i)
	}
	b.WriteString(`{"type":"bucket","lab`)
	path := filepath.Join(t.TempDir(), "live.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, b.Bytes()
}

// TestChunksCopyAFileWhole: a file over 10 MiB printed in 4 MiB chunks is
// put back together byte for byte from what the chunks printed, each
// checked against its trailer; the last chunk says so, and a sum of the
// whole file agrees with the copy.
func TestChunksCopyAFileWhole(t *testing.T) {
	path, want := bigFile(t)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 4 << 20
	var got []byte
	chunks := 0
	for off := int64(0); ; chunks++ {
		var out bytes.Buffer
		if _, err := WriteChunk(&out, f, off, size, false); err != nil {
			t.Fatal(err)
		}
		if out.Len() > 10<<20 {
			t.Fatalf("chunk at %d printed %d bytes, over the log rotation", off, out.Len())
		}
		data, c, err := ParseChunk(out.Bytes(), off, size, false)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, data...)
		off = c.End()
		if c.Last() {
			break
		}
	}
	if !bytes.Equal(got, want) || chunks != 2 {
		t.Fatalf("copied %d bytes in %d chunks, want the file's %d in 3", len(got), chunks+1, len(want))
	}
	var out bytes.Buffer
	if _, err := WriteChunk(&out, f, 0, int64(len(want))+99, true); err != nil {
		t.Fatal(err)
	}
	_, c, err := ParseChunk(out.Bytes(), 0, int64(len(want))+99, true)
	h := sha256.Sum256(got)
	if err != nil || c.Length != int64(len(want)) || c.SHA256 != hex.EncodeToString(h[:]) {
		t.Errorf("sum of the whole file %+v (%v), want the copy's %x", c, err, h)
	}
	if _, err := WriteChunk(&out, f, 0, MaxChunkBytes+1, false); err == nil {
		t.Error("a chunk over MaxChunkBytes was printed")
	}
}

// TestParseChunkRefuses: a chunk that was cut, changed, or is not the one
// asked for is refused with a ChunkError that says why.
func TestParseChunkRefuses(t *testing.T) {
	path, _ := bigFile(t)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var good bytes.Buffer
	if _, err := WriteChunk(&good, f, 1<<20, 1<<20, false); err != nil {
		t.Fatal(err)
	}
	g := good.Bytes()
	trailer := func(off, n, size int64, sum string) []byte {
		return []byte(fmt.Sprintf("\nSORTIE_CHUNK offset=%d length=%d size=%d sha256=%s\n", off, n, size, sum))
	}
	zero := strings.Repeat("0", 64)
	for _, tc := range []struct {
		name, why string
		out       []byte
		offset    int64
		sum       bool
		cut       bool
	}{
		{"corrupted byte", "do not have the trailer's sha256", flip(g, 1000), 1 << 20, false, false},
		{"rotated log: the front is gone", "the log was cut", g[4096:], 1 << 20, false, true},
		{"read broke off: no trailer", "does not end in a trailer", g[:len(g)-30], 1 << 20, false, true},
		{"more bytes than the trailer says", "which says 3", append([]byte("abcd"), trailer(1<<20, 3, 1<<20+3, zero)...), 1 << 20, false, false},
		{"another offset", "the trailer is of offset 1048576", g, 0, false, false},
		{"a sum where a chunk was asked", "SORTIE_CHUNK trailer where a SORTIE_SUM", g, 1 << 20, true, false},
		{"short, yet the file goes on", "yet the file (99999999 bytes) goes on", append([]byte("abc"), trailer(1<<20, 3, 99999999, zero)...), 1 << 20, false, false},
		{"more than asked", "more than the 1048576 asked", trailer(1<<20, 1<<21, 1<<22, zero)[1:], 1 << 20, false, false},
		{"not a trailer", "the last line is not a trailer", []byte("cat: can't open\n"), 1 << 20, false, false},
		{"bad sha", "want sha256=<64 hex digits>", trailer(1<<20, 0, 1<<20, "xyz")[1:], 1 << 20, false, false},
		{"range past the size", "past the size", trailer(1<<20, 5, 1<<20, zero)[1:], 1 << 20, false, false},
		{"empty", "does not end in a trailer", nil, 0, false, true},
	} {
		_, _, err := ParseChunk(tc.out, tc.offset, 1<<20, tc.sum)
		var ce *ChunkError
		if !errors.As(err, &ce) || ce.Offset != tc.offset || !strings.Contains(err.Error(), tc.why) || ce.Cut != tc.cut {
			t.Errorf("%s: %v (cut %t), want a ChunkError at %d saying %q (cut %t)", tc.name, err, ce != nil && ce.Cut, tc.offset, tc.why, tc.cut)
		}
	}
	if _, _, err := ParseChunk(g, 1<<20, 1<<20, false); err != nil {
		t.Errorf("the good chunk: %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x20
	return c
}

func FuzzParseChunk(f *testing.F) {
	var b bytes.Buffer
	path := filepath.Join(f.TempDir(), "x")
	os.WriteFile(path, []byte("hello\nworld\n"), 0o644)
	fl, _ := os.Open(path)
	defer fl.Close()
	WriteChunk(&b, fl, 2, 5, false)
	f.Add(b.String(), int64(2), int64(5), false)
	b.Reset()
	WriteChunk(&b, fl, 0, 100, true)
	f.Add(b.String(), int64(0), int64(100), true)
	f.Add("\n\n", int64(0), int64(1), false)
	f.Fuzz(func(t *testing.T, out string, offset, length int64, sum bool) {
		data, c, err := ParseChunk([]byte(out), offset, length, sum)
		if err != nil {
			var ce *ChunkError
			if !errors.As(err, &ce) {
				t.Fatalf("an error that is not a ChunkError: %v", err)
			}
			return
		}
		if c.Offset != offset || c.Length > length || c.Sum != sum {
			t.Fatalf("accepted %+v for offset %d length %d sum %t", c, offset, length, sum)
		}
		if !sum {
			h := sha256.Sum256(data)
			if int64(len(data)) != c.Length || hex.EncodeToString(h[:]) != c.SHA256 {
				t.Fatalf("accepted %d bytes for %+v", len(data), c)
			}
		}
	})
}
