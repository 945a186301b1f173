package saver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

const livePath = "runs/r1/live.jsonl"

// chunkFixture is a finished run whose reader is sortie cat, with a live
// record on the PVC larger than the kubelet's 10 MiB log rotation, copied
// in chunks of 4 MiB.
func chunkFixture(t *testing.T) (*fixture, []byte) {
	t.Helper()
	fx := newFixture(t)
	fx.env.ReaderCommand = []string{"/usr/local/bin/sortie", "cat"}
	fx.env.Live = livePath
	fx.chunkBytes = 4 << 20
	fx.pvcDir = t.TempDir()
	var live bytes.Buffer
	for i := 0; live.Len() < 10<<20+12345; i++ {
		fmt.Fprintf(&live, `["b",%d,%d,[0,9,1,3],[5111807,70859575,70859575]]`+"\n", i%40, i/40)
	}
	fx.putPVC(livePath, live.Bytes())
	fx.putPVC(streamPath, fx.fileLogs[streamPath].data)
	fx.putPVC(reportPath, fx.fileLogs[reportPath].data)
	return fx, live.Bytes()
}

func (fx *fixture) putPVC(name string, data []byte) {
	fx.t.Helper()
	p := filepath.Join(fx.pvcDir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		fx.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		fx.t.Fatal(err)
	}
}

// readerCalls records, in order, what each reader pod was asked.
func readerCalls(fx *fixture) *[]string {
	var calls []string
	fx.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		c, _ := chunkOf(p)
		call := fmt.Sprintf("%s %d+%d", filepath.Base(c.file), c.offset, c.length)
		if c.sum {
			call += " sum"
		}
		calls = append(calls, call)
		return false, nil, nil
	})
	return &calls
}

// withLen writes the live record's length for N in calls.
func withLen(calls []string, live []byte) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = strings.ReplaceAll(c, "N", strconv.Itoa(len(live)))
	}
	return out
}

func mustSave(t *testing.T, fx *fixture) (Result, string) {
	t.Helper()
	var out bytes.Buffer
	res, err := fx.save(context.Background(), &out)
	if err != nil {
		t.Fatal(err)
	}
	checkReaderGone(t, fx)
	return res, out.String()
}

func checkSaved(t *testing.T, fx *fixture, name string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(fx.dir, name))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes (%v), want the PVC's %d", name, len(got), err, len(want))
	}
	if _, err := os.Stat(filepath.Join(fx.dir, name+PartSuffix)); err == nil {
		t.Errorf("%s%s left behind", name, PartSuffix)
	}
}

// TestChunkedCopy: each file is copied through one reader pod per chunk,
// a file over 10 MiB whole, then checked whole by a sum; a chunk that
// comes back wrong is asked again, and one cut by the log's rotation
// again at half the size.
func TestChunkedCopy(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name  string
		hook  func(a chunkArgs, out []byte) []byte
		calls []string
	}{{
		name:  "whole",
		calls: []string{"live.jsonl 0+4194304", "live.jsonl 4194304+4194304", "live.jsonl 8388608+4194304", "live.jsonl 0+N sum"},
	}, {
		name: "corrupted chunk asked again",
		hook: once(func(a chunkArgs, out []byte) []byte {
			if a.offset != 4*mi {
				return nil
			}
			c := bytes.Clone(out)
			c[100] ^= 1
			return c
		}),
		calls: []string{"live.jsonl 0+4194304", "live.jsonl 4194304+4194304", "live.jsonl 4194304+4194304", "live.jsonl 8388608+4194304", "live.jsonl 0+N sum"},
	}, {
		// The kubelet keeps the log's last part once it is over its
		// size: here anything over 2 MiB loses its first 4096 bytes.
		name: "rotated chunk asked again smaller",
		hook: func(a chunkArgs, out []byte) []byte {
			if len(out) > 2*mi+4096 {
				return out[4096:]
			}
			return out
		},
		calls: []string{"live.jsonl 0+4194304", "live.jsonl 0+2097152", "live.jsonl 2097152+2097152", "live.jsonl 4194304+2097152",
			"live.jsonl 6291456+2097152", "live.jsonl 8388608+2097152", "live.jsonl 10485760+2097152", "live.jsonl 0+N sum"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			fx, live := chunkFixture(t)
			fx.chunkHook = tc.hook
			fx.start(fx.objects())
			calls := readerCalls(fx)
			res, out := mustSave(t, fx)
			if !res.Saved || len(res.Problems) > 0 {
				t.Fatalf("saved %t, problems %q", res.Saved, res.Problems)
			}
			if tc.name == "whole" {
				// The whole API sequence, pod by pod.
				checkGolden(t, "chunked-copy", fx.snapshot(res, nil, out)+"== reader pods (file offset+length)\n"+strings.Join(*calls, "\n")+"\n")
			}
			checkSaved(t, fx, FileLive, live)
			checkSaved(t, fx, FileStream, fx.fileLogs[streamPath].data)
			checkSaved(t, fx, FileReport, fx.fileLogs[reportPath].data)
			want := append([]string{"results.jsonl 0+4194304"}, withLen(tc.calls, live)...)
			want = append(want, "report.json 0+4194304")
			if d := cmp.Diff(want, *calls); d != "" {
				t.Errorf("reader pods (-want +got):\n%s", d)
			}
		})
	}
}

// once passes out through f the first time f changes it, then leaves it.
func once(f func(a chunkArgs, out []byte) []byte) func(a chunkArgs, out []byte) []byte {
	done := false
	return func(a chunkArgs, out []byte) []byte {
		if !done {
			if c := f(a, out); c != nil {
				done = true
				return c
			}
		}
		return out
	}
}

// TestChunkedCopyRefusedThenResumed: a chunk that is wrong every time is
// refused, with a problem that says which and why; what came before it
// stays in live.jsonl.part, and the next save checks that part by its sum
// on the PVC and goes on from its end.
func TestChunkedCopyRefusedThenResumed(t *testing.T) {
	fx, live := chunkFixture(t)
	fx.chunkHook = func(a chunkArgs, out []byte) []byte {
		if a.offset == 4<<20 && !a.sum {
			c := bytes.Clone(out)
			c[len(c)/2] ^= 1
			return c
		}
		return out
	}
	fx.start(fx.objects())
	res, _ := mustSave(t, fx)
	problems := strings.Join(res.Problems, "\n")
	if !res.Saved || !strings.Contains(problems, "live record not copied: the chunk at offset 4194304 failed 3 times, the last: chunk at offset 4194304 refused: its bytes do not have the trailer's sha256") ||
		!strings.Contains(problems, "4194304 bytes copied are kept in live.jsonl.part") {
		t.Fatalf("saved %t, problems:\n%s", res.Saved, problems)
	}
	if _, err := os.Stat(filepath.Join(fx.dir, FileLive)); err == nil {
		t.Error("live.jsonl saved from a refused copy")
	}
	if part, _ := os.ReadFile(filepath.Join(fx.dir, FileLive+PartSuffix)); !bytes.Equal(part, live[:4<<20]) {
		t.Errorf("live.jsonl.part holds %d bytes, want the first 4 MiB", len(part))
	}

	fx2, _ := chunkFixture(t)
	fx2.dir, fx2.pvcDir = fx.dir, fx.pvcDir
	fx2.start(fx2.objects())
	calls := readerCalls(fx2)
	if res, _ := mustSave(t, fx2); !res.Saved || len(res.Problems) > 0 {
		t.Fatalf("second save: saved %t, problems %q", res.Saved, res.Problems)
	}
	checkSaved(t, fx2, FileLive, live)
	want := withLen([]string{"live.jsonl 0+4194304 sum", "live.jsonl 4194304+4194304", "live.jsonl 8388608+4194304", "live.jsonl 0+N sum"}, live)
	if d := cmp.Diff(want, (*calls)[2:6]); d != "" {
		t.Errorf("reader pods of the live record (-want +got):\n%s", d)
	}
}

// TestChunkedCopyExtendsTheSavedCopy: a live record saved before is where
// the copy starts, once its sum on the PVC agrees; one that no longer
// agrees is copied again from the start.
func TestChunkedCopyExtendsTheSavedCopy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		saved func(live []byte) []byte
		calls []string
	}{
		{"a prefix", func(live []byte) []byte { return live[:9<<20] },
			[]string{"live.jsonl 0+9437184 sum", "live.jsonl 9437184+4194304", "live.jsonl 0+N sum"}},
		{"the whole file", func(live []byte) []byte { return live },
			[]string{"live.jsonl 0+N sum", "live.jsonl N+4194304"}},
		{"another file", func(live []byte) []byte { return bytes.Repeat([]byte("x"), 100) },
			[]string{"live.jsonl 0+100 sum", "live.jsonl 0+4194304", "live.jsonl 4194304+4194304", "live.jsonl 8388608+4194304", "live.jsonl 0+N sum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx, live := chunkFixture(t)
			if err := os.WriteFile(filepath.Join(fx.dir, FileLive), tc.saved(live), 0o644); err != nil {
				t.Fatal(err)
			}
			fx.start(fx.objects())
			calls := readerCalls(fx)
			res, _ := mustSave(t, fx)
			wantProblem := tc.name == "another file" // the copy does not extend the one saved
			if !res.Saved || (len(res.Problems) > 0) != wantProblem {
				t.Fatalf("saved %t, problems %q", res.Saved, res.Problems)
			}
			if !wantProblem {
				checkSaved(t, fx, FileLive, live)
			}
			if d := cmp.Diff(withLen(tc.calls, live), (*calls)[1:len(*calls)-1]); d != "" {
				t.Errorf("reader pods of the live record (-want +got):\n%s", d)
			}
		})
	}
}

// TestChunkedCopyFileChanged: a report replaced on the PVC between two of
// its chunks is not kept: the sum of the whole copy does not agree.
func TestChunkedCopyFileChanged(t *testing.T) {
	fx, _ := chunkFixture(t)
	fx.env.Live = ""
	fx.chunkBytes = MinChunkBytes
	big := bytes.Replace(fx.fileLogs[reportPath].data, []byte(`"pass"`), []byte(strings.Repeat(" ", 100000)+`"pass"`), 1)
	fx.putPVC(reportPath, big)
	changed := bytes.Replace(big, []byte("steady"), []byte("Steady"), -1)
	fx.chunkHook = func(a chunkArgs, out []byte) []byte {
		if a.file == reportPath && a.offset > 0 && !a.sum {
			fx.putPVC(reportPath, changed)
		}
		return out
	}
	fx.start(fx.objects())
	res, _ := mustSave(t, fx)
	want := fmt.Sprintf("report not copied: the first %d bytes of the file on the PVC are not those copied (it changed while it was copied); the next save copies it again", len(big))
	if res.Saved || !strings.Contains(strings.Join(res.Problems, "\n"), want) {
		t.Fatalf("saved %t, problems:\n%s", res.Saved, strings.Join(res.Problems, "\n"))
	}
	if _, err := os.Stat(filepath.Join(fx.dir, FileReport)); err == nil {
		t.Error("report.json saved from a copy of two files")
	}
}

var _ io.Writer = (*capWriter)(nil)

// TestChunkedCopyOlderReader: a reader whose sortie cat predates chunks
// fails the first chunk; each file is then copied whole, as before, once.
func TestChunkedCopyOlderReader(t *testing.T) {
	fx, _ := chunkFixture(t)
	fx.env.Live = ""
	fx.oldCat = true
	fx.start(fx.objects())
	calls := readerCalls(fx)
	res, _ := mustSave(t, fx)
	if !res.Saved || len(res.Problems) > 0 {
		t.Fatalf("saved %t, problems %q", res.Saved, res.Problems)
	}
	checkSaved(t, fx, FileStream, fx.fileLogs[streamPath].data)
	checkSaved(t, fx, FileReport, fx.fileLogs[reportPath].data)
	want := []string{"results.jsonl 0+4194304", "results.jsonl 0+0", "report.json 0+4194304", "report.json 0+0"}
	if d := cmp.Diff(want, *calls); d != "" {
		t.Errorf("reader pods (-want +got):\n%s", d)
	}
}

// TestChunkedCopyInterrupted: a SIGTERM during a chunked copy finishes the
// chunk in progress, keeps what was copied in the part and starts nothing
// new; the next save resumes the part.
func TestChunkedCopyInterrupted(t *testing.T) {
	fx, live := chunkFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx.chunkHook = func(a chunkArgs, out []byte) []byte {
		if a.file == livePath && a.offset == 0 {
			cancel()
		}
		return out
	}
	fx.start(fx.objects())
	var out bytes.Buffer
	res, _ := fx.save(ctx, &out)
	checkReaderGone(t, fx)
	if !res.Interrupted || res.Saved || !strings.Contains(strings.Join(res.Problems, "\n"), "live record not copied: interrupted after 4194304 bytes, kept in live.jsonl.part") {
		t.Fatalf("interrupted %t, saved %t, problems %q", res.Interrupted, res.Saved, res.Problems)
	}
	if part, _ := os.ReadFile(filepath.Join(fx.dir, FileLive+PartSuffix)); !bytes.Equal(part, live[:4<<20]) {
		t.Errorf("live.jsonl.part holds %d bytes, want the first chunk", len(part))
	}
	fx2, _ := chunkFixture(t)
	fx2.dir, fx2.pvcDir = fx.dir, fx.pvcDir
	fx2.start(fx2.objects())
	calls := readerCalls(fx2)
	if res, _ := mustSave(t, fx2); !res.Saved || len(res.Problems) > 0 {
		t.Fatalf("second save: saved %t, problems %q", res.Saved, res.Problems)
	}
	checkSaved(t, fx2, FileLive, live)
	if got := (*calls)[2]; got != "live.jsonl 0+4194304 sum" {
		t.Errorf("the live record's first reader pod %q, want the sum of the part", got)
	}
}

// TestIntegrationChunkedCopyRealCat: the chunks come from the sortie
// binary itself, run as the reader pod runs it, and a live record over
// 10 MiB is saved whole.
func TestIntegrationChunkedCopyRealCat(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sortie binary")
	}
	if os.Getenv("TEST_SRCDIR") != "" {
		t.Skip("under bazel: no go command to build the binary with")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "sortie")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/sortie-soak/sortie/driver/cmd/sortie").CombinedOutput(); err != nil {
		t.Fatalf("build sortie: %v\n%s", err, out)
	}
	fx, live := chunkFixture(t)
	fx.catBin = bin
	fx.start(fx.objects())
	calls := readerCalls(fx)
	if res, _ := mustSave(t, fx); !res.Saved || len(res.Problems) > 0 {
		t.Fatalf("saved %t, problems %q", res.Saved, res.Problems)
	}
	checkSaved(t, fx, FileLive, live)
	checkSaved(t, fx, FileReport, fx.fileLogs[reportPath].data)
	if len(*calls) != 6 {
		t.Errorf("reader pods %q, want 6 (stream, 3 chunks and a sum of the live record, report)", *calls)
	}
}
