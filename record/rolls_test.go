package record

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestParseRolls reads the lines both writers write, churn's and soak
// local's, and skips every other line of a churn.log.
func TestParseRolls(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		want RollLog
	}{
		{
			name: "churn roll",
			line: "ROLLED aether-test/deployment/svc-1 at=2026-10-05T03:21:00Z took=42s",
			want: RollLog{Rolls: []Roll{{Ref: "aether-test/deployment/svc-1", Begin: ts("2026-10-05T03:21:00Z"),
				Took: 42 * time.Second, End: ts("2026-10-05T03:21:42Z"), Line: 1}}},
		},
		{
			name: "churn new serviceaccount, node before at",
			line: "ROLLED aether-test/serviceaccount/sa-new-1791170760 node=soak-worker at=2026-10-05T03:26:00Z took=5s held=30s",
			want: RollLog{Rolls: []Roll{{Ref: "aether-test/serviceaccount/sa-new-1791170760", Begin: ts("2026-10-05T03:26:00Z"),
				Took: 5 * time.Second, End: ts("2026-10-05T03:26:05Z"),
				Fields: []Field{{"node", "soak-worker"}, {"held", "30s"}}, Line: 1}}},
		},
		{
			name: "churn failure, a why with colons",
			line: "FAILED aether-test/deployment/svc-1 at=2026-10-05T03:21:00Z took=0s: rollout restart: etcdserver: leader changed",
			want: RollLog{Rolls: []Roll{{Ref: "aether-test/deployment/svc-1", Begin: ts("2026-10-05T03:21:00Z"),
				End: ts("2026-10-05T03:21:00Z"), Failed: true, Why: "rollout restart: etcdserver: leader changed", Line: 1}}},
		},
		{
			name: "soak local roll",
			line: "ROLLED svc-1 at=2026-11-30T15:35:30.120Z took=2s end=2026-11-30T15:35:32.485Z term=2026-11-30T15:35:31.402Z held_conns=2 held_inflight=1 answered_after_term=9",
			want: RollLog{Rolls: []Roll{{Ref: "svc-1", Begin: ts("2026-11-30T15:35:30.120Z"), Took: 2 * time.Second,
				End: ts("2026-11-30T15:35:32.485Z"), Term: ts("2026-11-30T15:35:31.402Z"),
				Held: &Held{Conns: 2, Inflight: 1, AnsweredAfterTerm: 9}, Line: 1}}},
		},
		{
			name: "soak local failure without a why",
			line: "FAILED svc-2 at=2026-11-30T15:35:30.120Z took=0s end=2026-11-30T15:35:30.500Z:",
			want: RollLog{Rolls: []Roll{{Ref: "svc-2", Begin: ts("2026-11-30T15:35:30.120Z"),
				End: ts("2026-11-30T15:35:30.500Z"), Failed: true, Line: 1}}},
		},
		{
			name: "fault",
			line: "FAULT target-fail svc-3 at=2026-11-30T15:35:36.001Z end=2026-11-30T15:35:36.410Z spec=target-fail:svc-3@6s+6 failed=6",
			want: RollLog{Faults: []Fault{{Kind: "target-fail", Subject: "svc-3", Begin: ts("2026-11-30T15:35:36.001Z"),
				End: ts("2026-11-30T15:35:36.410Z"), Fields: []Field{{"spec", "target-fail:svc-3@6s+6"}, {"failed", "6"}}, Line: 1}}},
		},
		{
			name: "fractional took, offset time",
			line: "ROLLED x at=2026-10-05T05:21:00+02:00 took=1.25s",
			want: RollLog{Rolls: []Roll{{Ref: "x", Begin: ts("2026-10-05T03:21:00Z"), Took: 1250 * time.Millisecond,
				End: ts("2026-10-05T03:21:01.25Z"), Line: 1}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRolls(strings.NewReader(tc.line + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestParseRollsSkipsOtherLines: a churn.log holds much besides rolls; a
// line of another word is never an error, and the line numbers count it.
func TestParseRollsSkipsOtherLines(t *testing.T) {
	log := strings.Join([]string{
		"CHURN START schedule=soak.txt steps=3 rolls=2 shrinks=1 new_serviceaccounts=0 t0=2026-10-05T03:20:00Z at=2026-10-05T03:20:00Z",
		"# a comment",
		"",
		"PREFLIGHT FAILED problems=17",
		"SHRUNK aether-test/deployment/svc-5 replicas=3->0 at=2026-10-05T03:23:00Z restore_at=2026-10-05T03:24:30Z",
		"   ROLLED a/deployment/b at=2026-10-05T03:21:00Z took=3s\r",
		"time=2026-10-05T03:21:00Z level=INFO msg=\"ROLLED is in this log line\"",
		"SUMMARY restart-watch verdict=PASS",
		"CHURN ABORTED: roll a/deployment/c (line 2) failed -- stop, fix, relaunch with a fresh T0",
		"ROLLEDX not=a-roll",
		"FAULT engine-kill node-b at=2026-10-05T03:22:00Z end=2026-10-05T03:22:00Z",
	}, "\n")
	got, err := ParseRolls(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rolls) != 1 || got.Rolls[0].Ref != "a/deployment/b" || got.Rolls[0].Line != 6 || got.Rolls[0].Name() != "b" {
		t.Errorf("rolls %+v, want the one of line 6", got.Rolls)
	}
	if len(got.Faults) != 1 || got.Faults[0].Line != 11 || !got.Faults[0].Begin.Equal(got.Faults[0].End) {
		t.Errorf("faults %+v, want the instant one of line 11", got.Faults)
	}
}

// TestParseRollsErrors: a line of the three words that cannot be read is
// named by its number and what is wrong, and the good lines still come.
func TestParseRollsErrors(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"ROLLED", "want <ref>"},
		{"ROLLED at=2026-10-05T03:21:00Z took=1s", "want <ref>"},
		{"ROLLED x took=1s", "want at=<time> and took="},
		{"ROLLED x at=2026-10-05T03:21:00Z", "want at=<time> and took="},
		{"ROLLED x at=yesterday took=1s", `at="yesterday": want an RFC 3339 time`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1m", `took="1m": want seconds`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=-1s", `took="-1s": want seconds`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=.5s", `took=".5s": want seconds`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=999999999s", "want at most 604800s"},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s end=2026-10-05T03:20:00Z", "is before at"},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s took=2s", "took= given twice"},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s lonely", `"lonely": want key=value`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s Key=v", `"Key=v": want key=value`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s k=", `"k=": want key=value`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s held_conns=1", "held_inflight is missing"},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s held_conns=-1 held_inflight=0 answered_after_term=0", `held_conns="-1": want a count`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s held_conns=1 held_inflight=x answered_after_term=0", `held_inflight="x": want a count`},
		{"ROLLED x at=2026-10-05T03:21:00Z took=1s term=soon", `term="soon"`},
		{"FAILED x: it broke", "want at=<time> and took="},
		{"ROLLED x at=9999-12-31T23:59:59Z took=2s", "past year 9999"},
		{"FAULT", "want <kind> <subject>"},
		{"FAULT engine-kill at=2026-10-05T03:21:00Z end=2026-10-05T03:21:00Z", "want <kind> <subject>"},
		{"FAULT Engine_Kill node-b at=2026-10-05T03:21:00Z end=2026-10-05T03:21:00Z", "want [a-z0-9-]"},
		{"FAULT engine-kill node-b at=2026-10-05T03:21:00Z", "want at=<time> and end=<time>"},
		{"FAULT engine-kill node-b at=2026-10-05T03:21:00Z end=2026-10-05T03:20:00Z", "is before at"},
	} {
		in := "ROLLED good at=2026-10-05T03:21:00Z took=1s\n" + tc.line + "\n"
		got, err := ParseRolls(strings.NewReader(in))
		var le *RollLineError
		if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want a *RollLineError of line 2 containing %q", tc.line, err, tc.want)
		}
		if !strings.HasPrefix(err.Error(), "line 2: "+strings.Fields(tc.line)[0]+" line: ") {
			t.Errorf("%q: error %q does not begin with its line and word", tc.line, err)
		}
		if len(got.Rolls) != 1 || got.Rolls[0].Ref != "good" {
			t.Errorf("%q: the good line was lost: %+v", tc.line, got)
		}
	}
}

// TestParseRollsBounded: a file larger than MaxRollsBytes is refused
// whole, a line longer than MaxRollLineBytes alone.
func TestParseRollsBounded(t *testing.T) {
	if _, err := ParseRolls(strings.NewReader(strings.Repeat("x", MaxRollsBytes+1))); err == nil ||
		!strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversized input gave %v", err)
	}
	long := "ROLLED x at=2026-10-05T03:21:00Z took=1s note=" + strings.Repeat("y", MaxRollLineBytes)
	other := "SUMMARY " + strings.Repeat("z", MaxRollLineBytes)
	got, err := ParseRolls(strings.NewReader(other + "\n" + long + "\nROLLED ok at=2026-10-05T03:21:00Z took=1s\n"))
	var le *RollLineError
	if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(le.Reason, "longer than") {
		t.Errorf("a long ROLLED line gave %v, want a *RollLineError of line 2", err)
	}
	if len(got.Rolls) != 1 || got.Rolls[0].Line != 3 {
		t.Errorf("rolls %+v, want only line 3's", got.Rolls)
	}
}

// TestReadRollsFile names the file in a bad line's error.
func TestReadRollsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), RollsFileName)
	if err := os.WriteFile(path, []byte("ROLLED ok at=2026-10-05T03:21:00Z took=1s\nFAILED bad\nFAULT bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRollsFile(path)
	if err == nil || !strings.Contains(err.Error(), path+":2: FAILED line") || !strings.Contains(err.Error(), path+":3: FAULT line") {
		t.Errorf("error %v, want both bad lines named by path and number", err)
	}
	if len(got.Rolls) != 1 {
		t.Errorf("rolls %+v, want the good one", got.Rolls)
	}
	if _, err := ReadRollsFile(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file gave %v", err)
	}
}

// TestRollStringReadsBack: what String writes, ParseRolls reads as the
// same roll or fault, to the nanosecond.
func TestRollStringReadsBack(t *testing.T) {
	begin := ts("2026-11-30T15:35:30.120Z")
	rolls := []Roll{
		{Ref: "svc-1", Begin: begin, Took: 2 * time.Second, End: begin.Add(2365 * time.Millisecond), Term: begin.Add(time.Second),
			Held: &Held{Conns: 2, AnsweredAfterTerm: 4}, Fields: []Field{{"replica", "3"}}},
		{Ref: "svc-2", Begin: begin, Took: 1500 * time.Millisecond, End: begin.Add(1500*time.Millisecond + 7), Failed: true, Why: "start replica: exit 1: a: b"},
		{Ref: "ns/deployment/x", Begin: begin, End: begin, Failed: true},
	}
	faults := []Fault{{Kind: "engine-freeze", Subject: "node-b", Begin: begin, End: begin.Add(3 * time.Second), Fields: []Field{{"spec", "engine-freeze:node-b@5s+3s"}}}}
	var lines []string
	for _, r := range rolls {
		lines = append(lines, r.String())
	}
	for _, f := range faults {
		lines = append(lines, f.String())
	}
	got, err := ParseRolls(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	for i := range rolls {
		rolls[i].Line = i + 1
	}
	faults[0].Line = len(rolls) + 1
	if d := cmp.Diff(RollLog{Rolls: rolls, Faults: faults}, got); d != "" {
		t.Errorf("(-wrote +read):\n%s\n%s", d, strings.Join(lines, "\n"))
	}
	if want := "ROLLED svc-1 at=2026-11-30T15:35:30.120Z took=2s end=2026-11-30T15:35:32.485Z term=2026-11-30T15:35:31.120Z held_conns=2 held_inflight=0 answered_after_term=4 replica=3"; lines[0] != want {
		t.Errorf("line\n%s\nwant\n%s", lines[0], want)
	}
}

func TestRollTouched(t *testing.T) {
	for _, tc := range []struct {
		held *Held
		want bool
	}{
		{nil, false},
		{&Held{}, false},
		{&Held{AnsweredAfterTerm: 3}, false}, // cannot be: it held nothing to answer on
		{&Held{Conns: 1}, true},
		{&Held{Inflight: 1}, true},
	} {
		if got := (Roll{Held: tc.held}).Touched(); got != tc.want {
			t.Errorf("Touched with %+v = %v, want %v", tc.held, got, tc.want)
		}
	}
}

// FuzzParseRolls: no input panics the parser, and every roll or fault it
// reads writes back to a line it reads as the same.
func FuzzParseRolls(f *testing.F) {
	for _, s := range []string{
		"ROLLED aether-test/deployment/svc-1 at=2026-10-05T03:21:00Z took=42s",
		"FAILED a/b/c node=n at=2026-10-05T03:21:00Z took=0s: x: y",
		"ROLLED svc-1 at=2026-11-30T15:35:30.120Z took=2s end=2026-11-30T15:35:32.485Z term=2026-11-30T15:35:31.402Z held_conns=2 held_inflight=1 answered_after_term=9",
		"FAULT target-down svc-2 at=2026-11-30T15:35:35Z end=2026-11-30T15:35:40Z spec=target-down:svc-2@5s+5s",
		"CHURN ABORTED: x\nROLLED x at=0000-01-01T00:00:00+01:00 took=1s",
		"FAILED x at=2026-10-05T03:21:00Z took=1.000000001s k=v::",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		log, _ := ParseRolls(strings.NewReader(in))
		for _, r := range log.Rolls {
			again, err := ParseRolls(strings.NewReader(r.String()))
			r.Line = 1
			if err != nil || len(again.Rolls) != 1 || !cmp.Equal(r, again.Rolls[0]) {
				t.Fatalf("%q read as %+v, written %q, read back %+v %v", in, r, r.String(), again.Rolls, err)
			}
		}
		for _, fl := range log.Faults {
			again, err := ParseRolls(strings.NewReader(fl.String()))
			fl.Line = 1
			if err != nil || len(again.Faults) != 1 || !cmp.Equal(fl, again.Faults[0]) {
				t.Fatalf("%q read as %+v, written %q, read back %+v %v", in, fl, fl.String(), again.Faults, err)
			}
		}
	})
}
