package record

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// zeros is an endless input, as /dev/zero is, that counts what was read.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n += int64(len(p))
	return len(p), nil
}

// TestReadInputCaps refuses a file over its cap, naming the file and the
// cap: a regular file by its size, a device after cap+1 bytes.
func TestReadInputCaps(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, 1025), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, []byte("version: v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{big, "/dev/zero"} {
		_, err := ReadInput(context.Background(), path, "plan", 1024)
		var tl *TooLargeError
		if !errors.As(err, &tl) || tl.Path != path || tl.Max != 1024 {
			t.Fatalf("ReadInput(%s): %v, want a *TooLargeError naming it", path, err)
		}
		if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "1024 bytes") {
			t.Errorf("message %q names neither the file nor the cap", msg)
		}
	}
	data, err := ReadInput(context.Background(), ok, "plan", 1024)
	if err != nil || string(data) != "version: v1\n" {
		t.Fatalf("ReadInput(ok): %q, %v", data, err)
	}
}

// TestOpenInputContext ends a read from a FIFO when the context ends:
// before any writer opened it, and while a writer holds it open and sends
// nothing.
func TestOpenInputContext(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := OpenInput(ctx, fifo); !errors.Is(err, context.Canceled) {
		t.Fatalf("open of a FIFO with no writer after cancel: %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	writer := make(chan *os.File, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
		}
		writer <- w
	}()
	r, err := OpenInput(ctx, fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if w := <-writer; w != nil {
		defer w.Close()
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(r)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("read of a silent FIFO after cancel: %v, want context.Canceled", err)
	}
	if _, err := ReadReportFileContext(ctx, fifo); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadReportFileContext after cancel: %v", err)
	}
}

// TestReadReportNotJSONEarly refuses endless input that is not JSON at
// its first bytes, without reading on to the cap.
func TestReadReportNotJSONEarly(t *testing.T) {
	z := &zeros{}
	_, err := ReadReport(z)
	if err == nil || !strings.Contains(err.Error(), "not a sortie JSON report") {
		t.Fatalf("ReadReport(zeros): %v", err)
	}
	if z.n > 1<<20 {
		t.Errorf("read %d bytes of zeros before refusing them", z.n)
	}
	if _, err := capped.readReport(strings.NewReader(`{"executions": []}` + strings.Repeat(" ", 64))); err != nil {
		t.Fatalf("a report with trailing spaces: %v", err)
	}
	small := limits{file: 64, line: 64}
	if _, err := small.readReport(strings.NewReader(`{"executions": [], "x": "` + strings.Repeat("a", 100) + `"}`)); err == nil || !strings.Contains(err.Error(), "larger than 64 bytes") {
		t.Fatalf("a report over the cap: %v", err)
	}
	if _, err := capped.readReport(strings.NewReader(`{"executions": []} {}`)); err == nil {
		t.Fatal("a report followed by a second object was read")
	}
}
