package driver

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sortie-soak/sortie/internal/cli"
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
