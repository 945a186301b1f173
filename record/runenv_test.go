package record

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// envMap is what ReadEnv read, as a map.
func envMap(e Env) map[string]string {
	m := map[string]string{}
	for _, k := range e.Keys() {
		m[k] = e.Get(k)
	}
	return m
}

// TestReadEnvRules holds the one set of rules that the saver and the
// teardown, which used to read run.env each its own way, now share. The
// rows marked "saver" and "teardown" are the cases where the two readers
// disagreed.
func TestReadEnvRules(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]string
		errs     []string // substrings, each must appear; nil: no error
	}{
		{"plain", "A=b\n", map[string]string{"A": "b"}, nil},
		{"no final newline", "A=b", map[string]string{"A": "b"}, nil},
		{"blank and comment lines", "\n# a comment\n   # indented comment\n\t\nA=b\n", map[string]string{"A": "b"}, nil},
		{"white space around the line", "  A=b \t\r\n", map[string]string{"A": "b"}, nil},
		{"white space around the key", " A =b\n", map[string]string{"A": "b"}, nil},
		// The teardown kept the space after =; the saver dropped it.
		{"saver/teardown: white space after =", "A=  b\n", map[string]string{"A": "b"}, nil},
		{"saver/teardown: white space after = before quotes", "A= 'b c'\n", map[string]string{"A": "b c"}, nil},
		{"export", "export A=b\nexport\tB=c\nexport   C=d\n", map[string]string{"A": "b", "B": "c", "C": "d"}, nil},
		{"export is a key too", "export=1\nexportX=2\n", map[string]string{"export": "1", "exportX": "2"}, nil},
		{"single quotes", "A='b c'\n", map[string]string{"A": "b c"}, nil},
		{"double quotes", `A="b c"` + "\n", map[string]string{"A": "b c"}, nil},
		{"quotes keep inner white space", "A='  b  '\n", map[string]string{"A": "  b  "}, nil},
		{"one pair only", `A="'b'"` + "\n" + `B='"c"'` + "\n", map[string]string{"A": "'b'", "B": `"c"`}, nil},
		{"no escapes", `A="b\"c"` + "\n", map[string]string{"A": `b\"c`}, nil},
		{"between the first and last quote", "A='it's'\n", map[string]string{"A": "it's"}, nil},
		{"empty value", "A=\nB=''\nC=\"\"\n", map[string]string{"A": "", "B": "", "C": ""}, nil},
		{"no inline comment", "A=b # c\n", map[string]string{"A": "b # c"}, nil},
		{"unquoted inner spaces", "READER_COMMAND=/bin/cat --\n", map[string]string{"READER_COMMAND": "/bin/cat --"}, nil},
		{"= in the value", "SEL=a=b,c=d\n", map[string]string{"SEL": "a=b,c=d"}, nil},
		{"last wins", "A=1\nA=2\n", map[string]string{"A": "2"}, nil},
		{"quote inside an unquoted value", "A=b'c\n", map[string]string{"A": "b'c"}, nil},
		{"not KEY=VALUE", "A=1\nnot a line\n", map[string]string{"A": "1"}, []string{"run.env:2: want KEY=VALUE"}},
		{"bad key", "9A=1\nA-B=2\n=3\n", map[string]string{}, []string{"run.env:1:", "run.env:2:", "run.env:3:"}},
		{"an open quote", "A='b\nB=\"c\nC='\n", map[string]string{}, []string{"run.env:1: A:", "run.env:2: B:", "run.env:3: C:"}},
		{"text after the quote", "A='b' # c\n", map[string]string{}, []string{"run.env:1: A: the value opens a ' quote"}},
		{"bad lines do not hide good ones", "A=1\n!\nB=2\n", map[string]string{"A": "1", "B": "2"}, []string{"run.env:2:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := ReadEnv(strings.NewReader(tc.in))
			if tc.errs == nil && err != nil {
				t.Fatalf("ReadEnv: %v", err)
			}
			for _, w := range tc.errs {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want it to say %q", err, w)
				}
			}
			if tc.errs != nil {
				var le *EnvError
				if !errors.As(err, &le) || le.Line == 0 {
					t.Errorf("error %v is not an *EnvError with a line", err)
				}
			}
			if d := cmp.Diff(tc.want, envMap(env)); d != "" {
				t.Errorf("values (-want +got):\n%s", d)
			}
		})
	}
}

func TestReadEnvLines(t *testing.T) {
	env, err := ReadEnv(strings.NewReader("# c\nA=1\n\nB=2\nA=3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if env.Line("A") != 5 || env.Line("B") != 4 || env.Line("C") != 0 {
		t.Errorf("lines A=%d B=%d C=%d, want 5 4 0", env.Line("A"), env.Line("B"), env.Line("C"))
	}
	if _, ok := env.Lookup("C"); ok {
		t.Error("C is not set")
	}
}

func TestReadEnvIsBounded(t *testing.T) {
	big := strings.Repeat("# padding\n", MaxEnvSize/10+1)
	if _, err := ReadEnv(strings.NewReader(big)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a run.env over %d bytes: %v, want refused", MaxEnvSize, err)
	}
	exact := "A=" + strings.Repeat("x", MaxEnvSize-3) + "\n"
	env, err := ReadEnv(strings.NewReader(exact))
	if err != nil || len(env.Get("A")) != MaxEnvSize-3 {
		t.Errorf("a run.env of exactly %d bytes: %v", MaxEnvSize, err)
	}
}

// TestEnvRoundTrip: whatever the writer accepts, the reader gives back
// exactly, in order of writing, with the last of a key winning.
func TestEnvRoundTrip(t *testing.T) {
	pairs := []EnvPair{
		{"PLAIN", "soak"},
		{"EMPTY", ""},
		{"SPACE", "a b"},
		{"EDGES", "  a  "},
		{"TAB", "\t"},
		{"HASH", "#not a comment"},
		{"SINGLE", "it's"},
		{"DOUBLE", `say "hi"`},
		{"BOTH", `it's "both"`},
		{"ONLY_QUOTE", "'"},
		{"ONLY_DQUOTE", `"`},
		{"QUOTED_LOOK", "'x'"},
		{"SELECTOR", "app.kubernetes.io/component=engine,app.kubernetes.io/instance=soak"},
		{"IMAGE", "ghcr.io/sortie-soak/sortie@sha256:0123"},
		{"CR", "a\rb"},
		{"UNICODE", "\u00a0nbsp\u0085"},
		{"SHELL", "$HOME `x` \\n"},
		{"PLAIN", "later"},
	}
	b, err := FormatEnv("a run\nwritten by a test", pairs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# a run\n# written by a test\nPLAIN=soak\n") {
		t.Errorf("layout:\n%s", b)
	}
	env, err := ReadEnv(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("ReadEnv of FormatEnv's output: %v\n%s", err, b)
	}
	want := map[string]string{}
	for _, p := range pairs {
		want[p.Key] = p.Value
	}
	if d := cmp.Diff(want, envMap(env)); d != "" {
		t.Errorf("round trip (-want +got):\n%s\n%s", d, b)
	}
}

func TestFormatEnvRefuses(t *testing.T) {
	_, err := FormatEnv("", []EnvPair{{"OK", "1"}, {"9BAD", "x"}, {"NL", "a\nb"}, {"", "x"}})
	for _, w := range []string{`key "9BAD"`, "NL: a value cannot hold a newline", `key ""`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v, want it to say %q", err, w)
		}
	}
}

func TestWriteAndAppendEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), EnvFileName)
	if err := AppendEnv(path, EnvPair{"A", "1"}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("append to a missing run.env: %v, want ErrNotExist", err)
	}
	if err := WriteEnv(path, "head", []EnvPair{{"A", "1"}, {"B", "x y"}}); err != nil {
		t.Fatal(err)
	}
	if err := AppendEnv(path, EnvPair{"A", "2"}, EnvPair{"C", "it's"}); err != nil {
		t.Fatal(err)
	}
	env, err := ReadEnvFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"A": "2", "B": "x y", "C": "it's"}, envMap(env)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// A file a person edited without a final newline still gets whole lines.
	if err := os.WriteFile(path, []byte("A=1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := AppendEnv(path, EnvPair{"B", "2"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "A=1\nB=2\n" {
		t.Errorf("appended to a file without a final newline: %q", b)
	}
	if err := AppendEnv(path, EnvPair{"B", "a\nb"}); err == nil {
		t.Error("a newline in an appended value was accepted")
	}
}

// FuzzReadEnv: run.env is written by another program and edited by hand.
// Whatever it holds, reading never panics, every key is a shell name, every
// error names a line, and what was read, written again, reads the same.
func FuzzReadEnv(f *testing.F) {
	f.Add("# written by the kickoff\nNAMESPACE=soak\nJOB='sortie-run'\n")
	f.Add("export A='b'\nexport\tB=\"c d\"\nA=later\n")
	f.Add("=\n\"=\"\nK='\nX=\"a'\n")
	f.Add("A= 'x' \r\nB=#\nC='it's'\n")
	f.Add("\x00=\xff\nA=\xff\n")
	f.Fuzz(func(t *testing.T, in string) {
		env, err := ReadEnv(strings.NewReader(in))
		for _, e := range unjoin(err) {
			var le *EnvError
			if !errors.As(e, &le) || le.Line < 1 {
				t.Fatalf("error %v names no line", e)
			}
		}
		var pairs []EnvPair
		for _, k := range env.Keys() {
			if !envKey.MatchString(k) {
				t.Fatalf("key %q", k)
			}
			if env.Line(k) < 1 {
				t.Fatalf("key %q has no line", k)
			}
			pairs = append(pairs, EnvPair{k, env.Get(k)})
		}
		b, err := FormatEnv("", pairs)
		if err != nil {
			t.Fatalf("a value read cannot be written: %v", err)
		}
		again, err := ReadEnv(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("written again, it does not read: %v\n%q", err, b)
		}
		if d := cmp.Diff(envMap(env), envMap(again)); d != "" {
			t.Fatalf("written again, it reads differently (-first +again):\n%s", d)
		}
	})
}

// FuzzEnvRoundTrip: any value the writer accepts reads back exactly.
func FuzzEnvRoundTrip(f *testing.F) {
	for _, v := range []string{"", "a b", "'", `"`, "it's \"x\"", " \t", "#", "\u0085"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		b, err := FormatEnv("", []EnvPair{{"K", v}})
		if err != nil {
			if !strings.Contains(v, "\n") {
				t.Fatalf("refused %q: %v", v, err)
			}
			return
		}
		env, err := ReadEnv(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("%q written as %q: %v", v, b, err)
		}
		if got := env.Get("K"); got != v {
			t.Fatalf("%q written as %q reads %q", v, b, got)
		}
	})
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
