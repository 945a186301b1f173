package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParsePeers(t *testing.T) {
	tests := []struct {
		file    string
		parse   func([]byte) (peerReport, error)
		want    peerReport
		wantErr bool
	}{
		{"fortio-ok.json", parseFortio, peerReport{
			Sent: 50, OK: 50, Rate: 49.915726031847285, Elapsed: 1001688325,
			P50: 375 * time.Microsecond, P99: 3866220 * time.Nanosecond,
		}, false},
		{"fortio-errors.json", parseFortio, peerReport{
			Sent: 40, OK: 27, Errors: 13, Rate: 39.755808454312394, Elapsed: 1006142286,
			P50: 466667 * time.Nanosecond, P99: 5361985 * time.Nanosecond, Note: "codes 200:27 503:13",
		}, false},
		{"fortio-socket.json", parseFortio, peerReport{
			Sent: 10, OK: 6, Errors: 4, Rate: 9.98, Elapsed: 1002004000,
			P50: 420 * time.Microsecond, P99: 1900 * time.Microsecond, Note: "codes -1:4 200:6",
		}, false},
		{"vegeta-ok.json", parseVegeta, peerReport{
			Sent: 15, OK: 15, Rate: 8.02991755849059, Elapsed: 1868014197, P50: 654002, P99: 4163225,
		}, false},
		{"vegeta-503.json", parseVegeta, peerReport{
			Sent: 20, OK: 17, Errors: 3, Rate: 21.035391857481684, Elapsed: 950778580, P50: 635282, P99: 1404251,
			Note: "codes 200:17 503:3; 503 Service Unavailable",
		}, false},
		{"vegeta-refused.json", parseVegeta, peerReport{
			Sent: 10, Errors: 10, Rate: 11.11370702610114, Elapsed: 899789780, P50: 458945, P99: 1369313,
			Note: `codes 0:10; Get "http://127.0.0.1:1/": dial tcp 0.0.0.0:0->127.0.0.1:1: connect: connection refused`,
		}, false},
		{"wrk-ok.txt", parseWrk, peerReport{
			Sent: 16275, OK: 16275, Rate: 16275 / (1020 * time.Millisecond).Seconds(), Elapsed: 1020 * time.Millisecond,
			P50: 134 * time.Microsecond, P99: 22300 * time.Microsecond,
		}, false},
		{"wrk-non2xx.txt", parseWrk, peerReport{
			Sent: 7043, OK: 3557, Errors: 3486, Rate: 7043 / (1110 * time.Millisecond).Seconds(), Elapsed: 1110 * time.Millisecond,
			P50: 349 * time.Microsecond, P99: 15920 * time.Microsecond,
		}, false},
		{"wrk-socket.txt", parseWrk, peerReport{
			Sent: 40222, OK: 40222, Errors: 10, Rate: 20111, Elapsed: 2 * time.Second,
			P50: 1980 * time.Microsecond, P99: time.Second, Note: "socket errors 10",
		}, false},
		{"wrk-refused.txt", parseWrk, peerReport{}, true},
		{"vegeta-ok.json", parseFortio, peerReport{}, true}, // no DurationHistogram
		{"fortio-ok.json", parseVegeta, peerReport{}, true}, // no latencies
		{"fortio-ok.json", parseWrk, peerReport{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tt.parse(b)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseInconsistent(t *testing.T) {
	// Codes that do not add up to the request count are refused rather
	// than read as errors or successes.
	if _, err := parseFortio([]byte(`{"RunType":"HTTP","DurationHistogram":{"Count":5},"RetCodes":{"200":4}}`)); err == nil {
		t.Error("fortio: 4 codes for 5 requests taken")
	}
	if _, err := parseFortio([]byte(`{"RunType":"GRPC","DurationHistogram":{"Count":0}}`)); err == nil {
		t.Error("fortio: grpc run taken")
	}
	if _, err := parseVegeta([]byte(`{"latencies":{},"requests":5,"status_codes":{"200":6}}`)); err == nil {
		t.Error("vegeta: 6 codes for 5 requests taken")
	}
	if _, err := parseWrk([]byte("  5 requests in 1.00s, 1KB read\n  Non-2xx or 3xx responses: 6\n")); err == nil {
		t.Error("wrk: 6 non-2xx of 5 taken")
	}
}

func TestWrkDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"134.00us", 134 * time.Microsecond, false},
		{"1.56ms", 1560 * time.Microsecond, false},
		{"2.00s", 2 * time.Second, false},
		{"1.50m", 90 * time.Second, false},
		{"1.00h", time.Hour, false},
		{"12", 0, true},
		{"-1.00ms", 0, true},
		{"NaNms", 0, true},
		{"1e300h", 0, true},
		{"ms", 0, true},
	}
	for _, tt := range tests {
		got, err := wrkDuration(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("wrkDuration(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestRateArg(t *testing.T) {
	tests := []struct {
		in      float64
		want    string
		wantErr bool
	}{
		{1000, "1000/1s", false},
		{7.5, "15/2s", false},
		{0.25, "1/4s", false},
		{0.1, "1/10s", false},
		{1.0 / 3, "", true},
		{0, "", true},
	}
	for _, tt := range tests {
		got, err := rateArg(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("rateArg(%v) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// seedFiles adds every testdata file with the prefix as a seed.
func seedFiles(f *testing.F, glob string) {
	files, err := filepath.Glob(filepath.Join("testdata", glob))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds for %s: %v", glob, err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkReport holds whatever a parser accepted to its own invariants.
func checkReport(t *testing.T, r peerReport, err error) {
	if err != nil {
		return
	}
	if r.OK > r.Sent {
		t.Errorf("ok %d > sent %d", r.OK, r.Sent)
	}
	if r.P50 < 0 || r.P99 < 0 || r.Elapsed < 0 {
		t.Errorf("negative duration in %+v", r)
	}
}

func FuzzParseFortio(f *testing.F) {
	seedFiles(f, "fortio-*.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseFortio(b)
		checkReport(t, r, err)
	})
}

func FuzzParseVegeta(f *testing.F) {
	seedFiles(f, "vegeta-*.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseVegeta(b)
		if err == nil && r.Errors+r.OK != r.Sent {
			t.Errorf("ok %d + errors %d != sent %d", r.OK, r.Errors, r.Sent)
		}
		if err == nil && r.OK > r.Sent {
			t.Errorf("ok %d > sent %d", r.OK, r.Sent)
		}
	})
}

func FuzzParseWrk(f *testing.F) {
	seedFiles(f, "wrk-*.txt")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseWrk(b)
		checkReport(t, r, err)
	})
}

func FuzzParseFloor(f *testing.F) {
	f.Add([]byte(`{"sent":10,"ok":9,"errors":1,"elapsed_ns":2000000000}`))
	f.Add([]byte(`{"elapsed_ns":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseFloor(b)
		if err == nil && r.Rate < 0 {
			t.Errorf("negative rate %v", r.Rate)
		}
	})
}
