package record

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A node whose engine restarted keeps planned = unsent + outcomes + the
// gaps' counts: the requests due in a gap are counted once, there.
func TestConservesWithGap(t *testing.T) {
	gap := []Gap{{From: "2026-03-02T10:00:08.000Z", To: "2026-03-02T10:00:14.000Z", Count: 90, Why: GapRestarted}}
	tests := []struct {
		name    string
		r       BackendResult
		wantErr string
	}{
		{"exact", BackendResult{Planned: 450, Counters: map[string]uint64{HTTP2xx: 360}, GapUnsent: gap}, ""},
		{"gap and unsent", BackendResult{Planned: 450, Unsent: 10, Counters: map[string]uint64{HTTP2xx: 350}, GapUnsent: gap}, ""},
		{"gap not counted", BackendResult{Planned: 450, Counters: map[string]uint64{HTTP2xx: 360}},
			"accounting: 360 outcomes for 450 planned on node-b"},
		{"counted in the gap too", BackendResult{Planned: 450, Counters: map[string]uint64{HTTP2xx: 450}, GapUnsent: gap},
			"accounting: 450 outcomes + 0 unsent + 90 gap_unsent for 450 planned on node-b"},
		{"overflow", BackendResult{Planned: 450, Counters: map[string]uint64{HTTP2xx: 360},
			GapUnsent: []Gap{{Count: 1 << 63}, {Count: 1 << 63}}}, "overflow 64 bits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.BackendName = "node-b"
			err := tt.r.Conserves()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Conserves() = %v, want nil", err)
				}
				return
			}
			var ae *AccountingError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Conserves() = %v, want an AccountingError with %q", err, tt.wantErr)
			}
		})
	}
	ae := &AccountingError{Planned: 450, Outcomes: 450, Gap: 90}
	if ae.Diff() != 90 {
		t.Errorf("Diff() = %d, want 90 counted twice", ae.Diff())
	}
}

// The reader takes gap_unsent as written and refuses one no driver could
// have written.
func TestReadGaps(t *testing.T) {
	e := sample()
	e.Results[0].GapUnsent = []Gap{{From: "2026-03-02T10:00:08.000Z", To: "2026-03-02T10:00:14.000Z", Count: 90, Why: GapRestarted}}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	src, err := ReadReport(strings.NewReader(`{"executions": [` + good + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if g := src.Executions[0].Results[0].GapUnsent; len(g) != 1 || g[0].Count != 90 || g[0].Why != GapRestarted {
		t.Fatalf("gap_unsent read as %+v", g)
	}
	for _, tc := range []struct{ name, from, to, err string }{
		{"bad time", `"from":"2026-03-02T10:00:08.000Z"`, `"from":"at eight"`, `gap_unsent[0]: from "at eight" is not an RFC 3339 time`},
		{"no end", `"to":"2026-03-02T10:00:14.000Z"`, `"to":""`, `gap_unsent[0]: to "" is not`},
		{"backwards", `"to":"2026-03-02T10:00:14.000Z"`, `"to":"2026-03-02T10:00:01.000Z"`, "ends before it begins"},
	} {
		bad := strings.ReplaceAll(good, tc.from, tc.to)
		if bad == good {
			t.Fatalf("%s: %q is not in %s", tc.name, tc.from, good)
		}
		if _, err := ReadReport(strings.NewReader(`{"executions": [` + bad + `]}`)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}
