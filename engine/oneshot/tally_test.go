package oneshot

import (
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var syscallTERM = syscall.SIGTERM

func TestParseFinal(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Final
		err  string
	}{
		{line: "SORTIE_NEWSA_FINAL step=sa-new-1 node=w1 svc-1:ok=1200,non2xx=0,connerr=0,codes=- svc-3:ok=1040,non2xx=150,connerr=3,codes=503x150+err_dnsx3",
			want: Final{Step: "sa-new-1", Node: "w1", Dests: []Dest{
				{Name: "svc-1", OK: 1200},
				{Name: "svc-3", OK: 1040, Non2xx: 150, ConnErr: 3, Codes: map[string]int64{"503": 150, "err_dns": 3}},
			}}},
		{line: "SORTIE_NEWSA_FINAL step=s node=n", err: "want"},
		{line: "AETHER_NEWSA_FINAL step=s node=n a:ok=1,non2xx=0,connerr=0,codes=-", err: "want"},
		{line: "SORTIE_NEWSA_FINAL node=n step=s a:ok=1,non2xx=0,connerr=0,codes=-", err: "want step="},
		{line: "SORTIE_NEWSA_FINAL step=s node=n a:ok=1,non2xx=1,connerr=0,codes=-", err: "codes add up to 0"},
		{line: "SORTIE_NEWSA_FINAL step=s node=n a:ok=-1,non2xx=0,connerr=0,codes=-", err: "whole number"},
		{line: "SORTIE_NEWSA_FINAL step=s node=n a:ok=1,connerr=0,non2xx=0,codes=-", err: "want non2xx="},
		{line: "SORTIE_NEWSA_FINAL step=s node=n a:ok=1,non2xx=1,connerr=0,codes=503x0", err: "count of 1"},
		{line: "SORTIE_NEWSA_FINAL step=s node=n a:ok=1,non2xx=0,connerr=0,codes=- a:ok=1,non2xx=0,connerr=0,codes=-", err: "given twice"},
		{line: "SORTIE_NEWSA_FINAL step=s node=n a:ok=1,non2xx=2,connerr=0,codes=503x1+503x1", err: "given twice"},
		{line: "SORTIE_NEWSA_FINAL step=s node=n " + strings.Repeat("a", maxTallyLine), err: "longer than"},
	} {
		got, err := ParseFinal(tc.line)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%.80q: error %v, want %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.line, diff)
		}
		if got.String() != tc.line {
			t.Errorf("round trip:\n got %s\nwant %s", got, tc.line)
		}
	}
}

func TestFindFinal(t *testing.T) {
	if _, found, err := FindFinal("starting\n"); found || err != nil {
		t.Errorf("no final line: found=%v err=%v", found, err)
	}
	log := "SORTIE_NEWSA_FINAL step=s node=n a:ok=1,non2xx=0,connerr=0,codes=-\nSORTIE_NEWSA_FINAL step=s node=n a:ok=2,non2xx=0,connerr=0,codes=-\n"
	f, found, err := FindFinal(log)
	if !found || err != nil || f.Dests[0].OK != 2 {
		t.Errorf("want the last: %+v %v %v", f, found, err)
	}
	if _, found, err := FindFinal("SORTIE_NEWSA_FINAL step=s node=n garbage\n"); !found || err == nil {
		t.Errorf("a bad final line: found=%v err=%v", found, err)
	}
}

// FuzzParseFinal: no input panics, and whatever parses renders back to a
// line that parses to the same tally.
func FuzzParseFinal(f *testing.F) {
	f.Add("SORTIE_NEWSA_FINAL step=sa-new-1 node=w1 svc-1:ok=1200,non2xx=0,connerr=0,codes=- svc-3:ok=1,non2xx=150,connerr=3,codes=503x150+err_dnsx3")
	f.Add("SORTIE_NEWSA_FINAL step=s node=n a:b:ok=1,non2xx=1,connerr=0,codes=x1x1")
	f.Add("SORTIE_NEWSA_FINAL step=s node=n :ok=1,non2xx=0,connerr=0,codes=-")
	f.Fuzz(func(t *testing.T, line string) {
		got, err := ParseFinal(line)
		if err != nil {
			return
		}
		again, err := ParseFinal(got.String())
		if err != nil {
			t.Fatalf("%q parsed, its rendering %q did not: %v", line, got.String(), err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
