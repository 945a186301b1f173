package local

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Fault
		err  string
	}{
		{spec: "target-down:svc-1@10s+5s", want: Fault{Kind: TargetDown, Subject: "svc-1", At: 10 * time.Second, For: 5 * time.Second}},
		{spec: "engine-kill:node-b@20s", want: Fault{Kind: EngineKill, Subject: "node-b", At: 20 * time.Second}},
		{spec: "engine-freeze:node-b@5s+3m", want: Fault{Kind: EngineFreeze, Subject: "node-b", At: 5 * time.Second, For: 3 * time.Minute}},
		{spec: "driver-freeze:@10s+1m30s", want: Fault{Kind: DriverFreeze, At: 10 * time.Second, For: 90 * time.Second}},
		{spec: "engine-restart:node-b@8s+5s", want: Fault{Kind: EngineRestart, Subject: "node-b", At: 8 * time.Second, For: 5 * time.Second}},
		{spec: "engine-restart:node-b@8s", err: "needs a length"},
		{spec: "engine-restart:@8s+5s", err: "needs a name"},
		{spec: "engine-restart:node-b@8s+0s", err: "positive duration"},
		{spec: "driver-kill:@8s", want: Fault{Kind: DriverKill, At: 8 * time.Second, For: DefaultDriverRestart}},
		{spec: "driver-term:@8s+1s", want: Fault{Kind: DriverTerm, At: 8 * time.Second, For: time.Second}},
		{spec: "driver-kill:x@8s", err: "takes no subject"},
		{spec: "driver-term:@8s+0s", err: "positive duration"},
		{spec: "target-fail:svc-3@8s+6", want: Fault{Kind: TargetFail, Subject: "svc-3", At: 8 * time.Second, Count: 6}},
		{spec: "target-fail:svc-3@8s+500ms", want: Fault{Kind: TargetFail, Subject: "svc-3", At: 8 * time.Second, For: 500 * time.Millisecond}},
		{spec: "target-fail:svc-3@8s", err: "needs a length"},
		{spec: "target-fail:svc-3@8s+0", err: "count \"0\" must be 1 to 10000"},
		{spec: "target-fail:svc-3@8s+10001", err: "must be 1 to 10000"},
		{spec: "target-fail:svc-3@8s+99999999999999999999", err: "must be 1 to 10000"},
		{spec: "target-down:svc-1@10s+6", err: "not a positive duration"},
		{spec: "target-down:svc-1@10s", err: "needs a length"},
		{spec: "engine-kill:node-b@20s+1s", err: "takes no length"},
		{spec: "driver-freeze:x@1s+1s", err: "takes no subject"},
		{spec: "engine-freeze:Node_B@1s+1s", err: "[a-z0-9-]"},
		{spec: "reboot:node-a@1s", err: "unknown kind"},
		{spec: "target-down:svc-1@soon+5s", err: "not a duration"},
		{spec: "target-down:svc-1@1s+0s", err: "positive duration"},
		{spec: "target-down:svc-1@-1s+1s", err: "not a duration"},
		{spec: "target-down", err: "want KIND"},
		{spec: "target-down:svc-1", err: "missing @START"},
	} {
		got, err := ParseFault(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseFault(%q) error = %v, want one containing %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseFault(%q): %v", tc.spec, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("ParseFault(%q) (-want +got):\n%s", tc.spec, d)
		}
		// A parsed fault prints back to a spec that parses to itself.
		again, err := ParseFault(got.String())
		if err != nil || again != got {
			t.Errorf("round trip of %q: %v, %v", got.String(), again, err)
		}
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"target-down:svc-1@10s+5s", "engine-kill:node-b@20s", "driver-freeze:@1s+1s", ":@+", "x", "target-fail:a@1s+3", "target-fail:a@1s+1s", "engine-restart:node-b@8s+5s", "engine-restart:node-b@8s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		got, err := ParseFault(spec)
		if err != nil {
			return
		}
		if again, err := ParseFault(got.String()); err != nil || again != got {
			t.Fatalf("%q parsed to %v, which parses back to %v, %v", spec, got, again, err)
		}
	})
}
