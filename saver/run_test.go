package saver

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sortie-soak/sortie/internal/cli"
)

func TestParseFlags(t *testing.T) {
	def := DefaultOptions()
	cases := []struct {
		name  string
		args  []string
		check func(c config) bool
		err   string
	}{
		{"defaults", []string{"--dir", "d"}, func(c config) bool {
			return c.opts.Dir == "d" && c.opts.Poll == def.Poll && c.opts.CopyTimeout == def.CopyTimeout &&
				c.opts.GiveUp == 20*time.Minute && c.opts.OverdueAfter == 5*time.Minute && c.kubeconfig == "" && c.context == "" &&
				c.opts.ChunkBytes == DefaultChunkBytes
		}, ""},
		{"every flag", []string{"--dir", "d", "--kubeconfig", "k", "--context", "c", "--poll", "30s", "--copy-timeout", "5m",
			"--give-up", "0", "--overdue-after", "2m", "--overdue-every", "1m", "--chunk-size", "65536"}, func(c config) bool {
			return c.kubeconfig == "k" && c.context == "c" && c.opts.Poll == 30*time.Second && c.opts.CopyTimeout == 5*time.Minute && c.opts.ChunkBytes == 65536 &&
				c.opts.GiveUp == 0 && c.opts.OverdueAfter == 2*time.Minute && c.opts.OverdueEvery == time.Minute
		}, ""},
		{"times needs no dir", []string{"--times", "r.json"}, func(c config) bool { return c.times == "r.json" }, ""},
		{"no dir", nil, nil, "--dir is required"},
		{"stray argument", []string{"--dir", "d", "extra"}, nil, "unexpected arguments: extra"},
		{"bad duration", []string{"--dir", "d", "--poll", "often"}, nil, "invalid value"},
		{"unknown flag", []string{"--wait"}, nil, "not defined"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			c, err := parseFlags(tc.args, &stderr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
}

func TestOptionsValidateListsEveryProblem(t *testing.T) {
	o := DefaultOptions()
	o.Dir = filepath.Join(t.TempDir(), "missing")
	o.Poll = 0
	o.GiveUp = -time.Second
	o.ChunkBytes = 9 << 20
	err := o.Validate()
	for _, w := range []string{"--dir", "NAMESPACE is missing", "JOB is missing", "--poll must be positive", "--give-up must not be negative",
		"--chunk-size must be 0 or 65536 to 8388608 bytes, got 9437184"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate: %v, want it to say %q", err, w)
		}
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("--help: %v", err)
	}
	help := stderr.String()
	var want []string
	for _, f := range []string{"dir", "kubeconfig", "context", "poll", "copy-timeout", "give-up", "overdue-after", "overdue-every", "times", "chunk-size"} {
		want = append(want, "-"+f+" ")
	}
	for _, k := range RunEnvKeys {
		want = append(want, "  "+k.Key+" ")
	}
	want = append(want, "SORTIE_OVERDUE job/<name> is still running <N>s past its planned end",
		"SORTIE_SAVED dir=<dir> job=<complete|failed|gone> executions=<n> pass=<true|false> not_run=<n> window=<first started_at>..<last ended_at> stream_executions=<n>",
		"SORTIE_SAVE_FAILED no report (<why>), but the results stream IS saved",
		"SORTIE_SAVE_INCOMPLETE", "engines-end.tsv", "times.tsv", "Exit status",
		"sortie cat --offset N --length M FILE", "SORTIE_CHUNK offset=<N> length=<K> size=<S> sha256=<hex>", "RUNDIR/<file>.part")
	for _, w := range want {
		if !strings.Contains(help, w) {
			t.Errorf("--help lacks %q", w)
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("--help wrote to stdout: %q", stdout.String())
	}
}

func TestRunUsageErrors(t *testing.T) {
	dir := t.TempDir()
	incomplete := filepath.Join(dir, "incomplete")
	os.Mkdir(incomplete, 0o755)
	os.WriteFile(filepath.Join(incomplete, "run.env"), []byte("NAMESPACE=soak\nPLANNED_DURATION=soon\n"), 0o644)
	garbage := filepath.Join(dir, "garbage.json")
	os.WriteFile(garbage, []byte("{\"pass\":"), 0o644)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"no run.env", []string{"--dir", dir}, []string{"run.env"}},
		{"incomplete run.env", []string{"--dir", incomplete}, []string{"run.env:2: PLANNED_DURATION"}},
		{"times on garbage", []string{"--times", garbage}, []string{"neither a report"}},
		{"bad flag", []string{"--dir"}, []string{"flag needs an argument"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := Run(context.Background(), tc.args, &stdout, &stderr)
			if got := cli.Code(err); got != cli.ExitUsage {
				t.Fatalf("exit %d (%v), want %d", got, err, cli.ExitUsage)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestRunIncompleteRunEnvNamesEveryProblem(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "run.env"), []byte("NAMESPACE=soak\n"), 0o644)
	err := Run(context.Background(), []string{"--dir", dir}, &bytes.Buffer{}, &bytes.Buffer{})
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != cli.ExitUsage {
		t.Fatalf("err %v, want a usage error", err)
	}
	for _, w := range []string{"JOB", "PVC", "REPORT", "READER_IMAGE", "PLANNED_DURATION"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %s: %v", w, err)
		}
	}
}

func TestRunTimes(t *testing.T) {
	var stdout bytes.Buffer
	if err := Run(context.Background(), []string{"--times", filepath.Join("testdata", "results.jsonl")}, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stdout.String(), "\n"); n != 5 {
		t.Errorf("%d rows, want 5:\n%s", n, stdout.String())
	}
}

func TestExitFor(t *testing.T) {
	termCtx, cancel := context.WithCancelCause(context.Background())
	cancel(&cli.SignalError{Signal: syscall.SIGTERM})
	live := context.Background()
	cases := []struct {
		name string
		ctx  context.Context
		res  Result
		err  error
		want int
	}{
		{"saved", live, Result{Saved: true}, nil, cli.ExitOK},
		{"saved despite SIGTERM", termCtx, Result{Saved: true, Interrupted: true}, nil, cli.ExitOK},
		{"not saved", live, Result{}, nil, cli.ExitFail},
		{"SIGTERM before the report", termCtx, Result{Interrupted: true}, nil, 143},
		{"SIGTERM while waiting", termCtx, Result{}, errors.New("interrupted while waiting"), 143},
		{"local write failed", live, Result{}, errors.New("write report.json: disk full"), cli.ExitFail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := cli.Code(exitFor(tc.ctx, tc.res, tc.err)); got != tc.want {
				t.Errorf("exit %d, want %d", got, tc.want)
			}
		})
	}
}
