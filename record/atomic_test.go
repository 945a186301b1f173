package record

import (
	"os"
	"path/filepath"
	"testing"
)

// entries lists a directory's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(path, []byte("old content, longer than the new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o640); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("content %q, want %q", b, "new")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", st.Mode().Perm())
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("directory holds %v, want the file alone", got)
	}
}

func TestWriteFileMissingDirectory(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "such", "f"), nil, 0o644); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}

// TestCreateAtomic: a streamed file has no final name until Commit, Abort
// leaves nothing, and a crash (neither called) leaves only a name
// IsAtomicTemp recognises.
func TestCreateAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine-a.log")

	f, err := CreateAtomic(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("line 1\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the final name exists before Commit: %v", err)
	}
	names := entries(t, dir)
	if len(names) != 1 || !IsAtomicTemp(names[0]) || filepath.Join(dir, names[0]) != f.TempName() {
		t.Errorf("before Commit the directory holds %v, want one temporary file %s", names, f.TempName())
	}
	if b, _ := os.ReadFile(f.TempName()); string(b) != "line 1\n" {
		t.Errorf("temporary file holds %q before Commit", b)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // does nothing after Commit
	if b, _ := os.ReadFile(path); string(b) != "line 1\n" {
		t.Errorf("committed file holds %q", b)
	}
	if err := f.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}

	g, err := CreateAtomic(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("half"))
	g.Abort()
	if b, _ := os.ReadFile(path); string(b) != "line 1\n" {
		t.Errorf("Abort changed the file: %q", b)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("after Abort the directory holds %v", got)
	}
	if err := g.Commit(); err == nil {
		t.Error("Commit after Abort succeeded")
	}
}

func TestCommitAs(t *testing.T) {
	dir := t.TempDir()
	f, err := CreateAtomic(filepath.Join(dir, "x.log"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("part"))
	if err := f.CommitAs(filepath.Join(dir, "x.log.partial")); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "x.log.partial" {
		t.Errorf("directory holds %v, want x.log.partial alone", got)
	}

	g, err := CreateAtomic(filepath.Join(dir, "y.log"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := g.CommitAs(filepath.Join(other, "y.log")); err == nil {
		t.Error("CommitAs into another directory succeeded")
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("a refused CommitAs left %v", got)
	}
}

func TestAtomicTempTarget(t *testing.T) {
	for name, want := range map[string]string{
		".report.json.tmp-123":   "report.json",
		"..hidden.tmp-9":         ".hidden",
		".a.tmp-1.tmp-2":         "a.tmp-1",
		"report.json":            "",
		".hidden":                "",
		"x.tmp-1":                "",
		".tmp-1":                 "",
		".engine-a.log.tmp-4711": "engine-a.log",
	} {
		got, ok := AtomicTempTarget(name)
		if got != want || ok != (want != "") || IsAtomicTemp(name) != ok {
			t.Errorf("AtomicTempTarget(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	// And what CreateAtomic makes, it recognises.
	dir := t.TempDir()
	f, err := CreateAtomic(filepath.Join(dir, "run.env"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	if got, ok := AtomicTempTarget(filepath.Base(f.TempName())); !ok || got != "run.env" {
		t.Errorf("temporary %s: target %q, %v", f.TempName(), got, ok)
	}
}
