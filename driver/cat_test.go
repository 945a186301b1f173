package driver

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sortie-soak/sortie/internal/cli"
	"github.com/sortie-soak/sortie/record"
)

func TestCatPrintsTheFileWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.jsonl")
	want := bytes.Repeat([]byte("{\"label\":\"mesh/svc-1\"}\n"), 10000)
	want = append(want, `{"label":"torn`...) // a torn last line is printed as it is
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"cat", path}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("cat printed %d bytes, want the file's %d", out.Len(), len(want))
	}
}

func TestCatRefusesBadUse(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, cli.ExitUsage},
		{[]string{"a", "b"}, cli.ExitUsage},
		{[]string{"--help"}, cli.ExitUsage},
		{[]string{filepath.Join(dir, "missing.json")}, cli.ExitFail},
	} {
		err := Run(context.Background(), append([]string{"cat"}, tc.args...), io.Discard, io.Discard)
		if got := cli.Code(err); got != tc.code {
			t.Errorf("sortie cat %q: exit %d (%v), want %d", tc.args, got, err, tc.code)
		}
	}
}

// TestCatChunks: --offset and --length print one chunk and its trailer,
// which record.ParseChunk accepts; --sum prints the range's sum alone.
func TestCatChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.jsonl")
	want := bytes.Repeat([]byte("[\"b\",0,1,[0,9],[1,2,3]]\n"), 5000)
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for off := int64(0); ; {
		var out bytes.Buffer
		if err := Run(context.Background(), []string{"cat", "--offset", strconv.FormatInt(off, 10), "--length", "40000", path}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		data, c, err := record.ParseChunk(out.Bytes(), off, 40000, false)
		if err != nil {
			t.Fatal(err)
		}
		got, off = append(got, data...), c.End()
		if c.Last() {
			break
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("chunks put together: %d bytes, want the file's %d", len(got), len(want))
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"cat", "--sum", "--offset", "0", "--length", "999999999", path}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, c, err := record.ParseChunk(out.Bytes(), 0, 999999999, true); err != nil || c.Length != int64(len(want)) {
		t.Errorf("sum %+v (%v), want one of the whole file", c, err)
	}
}

func TestCatChunkRefusesBadUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, []byte("x"), 0o644)
	for _, args := range [][]string{
		{"--offset", "0", path},
		{"--length", "10", path},
		{"--offset", "-1", "--length", "10", path},
		{"--offset", "0", "--length", "0", path},
		{"--offset", "0", "--length", "8388609", path},
		{"--sum", path},
		{"--offset", "x", "--length", "1", path},
	} {
		err := Run(context.Background(), append([]string{"cat"}, args...), io.Discard, io.Discard)
		if got := cli.Code(err); got != cli.ExitUsage {
			t.Errorf("sortie cat %q: exit %d (%v), want %d", args, got, err, cli.ExitUsage)
		}
	}
}
