package render

import (
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/sortie-soak/sortie/record"
)

func targetsOf(weights ...int) []Target {
	ts := make([]Target, len(weights))
	for i, w := range weights {
		ts[i] = Target{Name: string(rune('a' + i)), URL: "http://x/", Weight: w}
	}
	return ts
}

func TestComputeShares(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		rate    int
		conc    int
		want    []int
		wantErr string
	}{
		{"soak shape", []int{3, 3, 3, 3, 3, 3, 1, 1}, 60, 1, []int{9, 9, 9, 9, 9, 9, 3, 3}, ""},
		{"one target", []int{7}, 13, 1, []int{13}, ""},
		{"equal thirds", []int{1, 1, 1}, 60, 1, []int{20, 20, 20}, ""},
		{"concurrency divides", []int{3, 1}, 120, 3, []int{90, 30}, ""},
		{"thirds of 100", []int{1, 1, 1}, 100, 1, nil, `--rate 99 (33x3) or --rate 102 (34x3)`},
		{"not a multiple of concurrency", []int{3, 1}, 60, 2, nil, `would get 45 rps, not a multiple of concurrency 2; nearest whole splits: --rate 56 (42x1 + 14x1) or --rate 64 (48x1 + 16x1)`},
		{"below the step has no lower split", []int{1, 1, 1}, 2, 1, nil, `nearest whole split: --rate 3 (1x3)`},
		{"zero rate", []int{1}, 0, 1, nil, "rate 0 must be"},
		{"zero concurrency", []int{1}, 1, 0, nil, "concurrency 0 must be"},
		{"zero weight", []int{1, 0}, 2, 1, nil, "weight 0 must be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shares, err := ComputeShares(targetsOf(tc.weights...), tc.rate, tc.conc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := make([]int, len(shares))
			for i, s := range shares {
				got[i] = s.RPS
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNearestIsNearest checks the nearest splits a refusal offers against a
// brute-force search: they split exactly, and nothing between them and the
// asked rate does.
func TestNearestIsNearest(t *testing.T) {
	exact := func(weights []int, rate, conc int) bool {
		_, err := ComputeShares(targetsOf(weights...), rate, conc)
		return err == nil
	}
	for _, weights := range [][]int{{1}, {1, 1, 1}, {3, 3, 3, 3, 3, 3, 1, 1}, {2, 4}, {5, 3, 2}, {7, 1}, {6, 4, 2}} {
		for conc := 1; conc <= 4; conc++ {
			for rate := 1; rate <= 150; rate++ {
				_, err := ComputeShares(targetsOf(weights...), rate, conc)
				var se *ShareError
				if exact(weights, rate, conc) {
					if err != nil {
						t.Fatalf("%v at %d/%d: %v", weights, rate, conc, err)
					}
					continue
				}
				if !errors.As(err, &se) {
					t.Fatalf("%v at %d/%d: error %v is no *ShareError", weights, rate, conc, err)
				}
				// The refusal is the calculator's, worded for a targets file.
				var rse *record.ShareError
				if !errors.As(err, &rse) || rse.Rate != uint64(rate) || rse.Unit != uint64(conc) {
					t.Fatalf("%v at %d/%d: error %v does not carry the calculator's (%+v)", weights, rate, conc, err, rse)
				}
				below, above := 0, 0
				for r := rate - 1; r >= 1; r-- {
					if exact(weights, r, conc) {
						below = r
						break
					}
				}
				for r := rate + 1; ; r++ {
					if exact(weights, r, conc) {
						above = r
						break
					}
				}
				var want []int
				if below > 0 {
					want = append(want, below)
				}
				want = append(want, above)
				var got []int
				for _, s := range se.Nearest {
					got = append(got, s.Rate)
					if sum(s.Shares) != s.Rate {
						t.Errorf("%v at %d/%d: split %v does not add up to %d", weights, rate, conc, s.Shares, s.Rate)
					}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("%v at %d rps, concurrency %d: nearest (-want +got):\n%s", weights, rate, conc, diff)
				}
			}
		}
	}
}

func TestMaxPendingFor(t *testing.T) {
	tests := []struct {
		share, conc int
		budget      time.Duration
		want        int
	}{
		{9, 1, 2 * time.Second, 18},
		{3, 1, 2 * time.Second, 6},
		{9, 2, 2 * time.Second, 9},
		{9, 4, 2 * time.Second, 5},               // 4.5 rounds up
		{10, 3, 1500 * time.Millisecond, 5},      // exactly 5
		{1, 1, time.Millisecond, 1},              // a sliver still needs one slot
		{1_000_000, 1, time.Hour, 3_600_000_000}, // no overflow at the bounds
	}
	for _, tc := range tests {
		if got := MaxPendingFor(tc.share, tc.conc, tc.budget); got != tc.want {
			t.Errorf("MaxPendingFor(%d, %d, %s) = %d, want %d", tc.share, tc.conc, tc.budget, got, tc.want)
		}
	}
}

func TestFloorFor(t *testing.T) {
	tests := []struct {
		smallest, backends int
		pct                float64
		want               string
	}{
		{3, 2, 99, "5.94"},
		{3, 5, 99, "14.85"},
		{3, 1, 99, "2.97"},
		{9, 2, 100, "18.00"}, // two decimals, as the bash renderer prints
		{20, 2, 99, "39.60"},
		{10, 1, 99, "9.90"},
		{6, 2, 99.5, "11.94"},
		{1, 1, 99.9, "0.999"}, // more digits rather than a rounded floor
		{1, 3, 33.33, "0.9999"},
		{1, 1, 0.001, "0.00001"},
	}
	for _, tc := range tests {
		got, err := FloorFor(tc.smallest, tc.backends, tc.pct)
		if err != nil || got != tc.want {
			t.Errorf("FloorFor(%d, %d, %v) = %q, %v; want %q", tc.smallest, tc.backends, tc.pct, got, err, tc.want)
		}
	}
}

func TestParseTargets(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Target
		wantErr []string // each a line of the joined error
	}{
		{
			name: "comments, blanks, tabs and a trailing comment",
			in:   "# head\n\n a\thttp://a:1/ 2 # two\n\tb  https://b/x?y=z  1\n#c http://c/ 1\n",
			want: []Target{
				{Name: "a", URL: "http://a:1/", Weight: 2, Line: 3},
				{Name: "b", URL: "https://b/x?y=z", Weight: 1, Line: 4},
			},
		},
		{name: "CRLF line ends", in: "a http://a/ 1\r\nb http://b/ 1\r\n", want: []Target{
			{Name: "a", URL: "http://a/", Weight: 1, Line: 1}, {Name: "b", URL: "http://b/", Weight: 1, Line: 2},
		}},
		{name: "every problem is reported", in: "A http://a/ 1\na http://a/ 0\na http://a/ 1\nb http://b/\n", wantErr: []string{
			`f.txt:1: target name "A" must be made of [a-z0-9-]`,
			`f.txt:2: target "a": weight must be a positive integer, got "0"`,
			`f.txt:3: target "a" is listed twice (first on line 2)`,
			`f.txt:4: want ` + "`name url weight`" + `, got 2 fields`,
		}},
		{name: "duplicate names the first line", in: "a http://a/ 1\n\na http://b/ 1\n", wantErr: []string{
			`f.txt:3: target "a" is listed twice (first on line 1)`,
		}},
		{name: "no targets", in: "# only comments\n", wantErr: []string{"f.txt: no targets"}},
		{name: "url with a quote", in: `a http://a/"x 1`, wantErr: []string{
			`f.txt:1: target "a": url "http://a/\"x" must be printable ASCII without quotes or backslashes`,
		}},
		{name: "url with an empty port", in: "a http://a:/ 1", wantErr: []string{
			`f.txt:1: target "a": url "http://a:/": port "" must be 1 to 65535`,
		}},
		{name: "name too long", in: strings.Repeat("a", 64) + " http://a/ 1", wantErr: []string{
			`f.txt:1: target name "` + strings.Repeat("a", 64) + `" must be 1 to 63 characters`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTargets("f.txt", []byte(tc.in))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("no error, got %v", got)
				}
				if diff := cmp.Diff(tc.wantErr, strings.Split(err.Error(), "\n")); diff != "" {
					t.Errorf("errors (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseTargetsLineError(t *testing.T) {
	_, err := ParseTargets("t.txt", []byte("ok http://a/ 1\nBAD http://a/ 1\n"))
	var le *LineError
	if !errors.As(err, &le) || le.File != "t.txt" || le.Line != 2 {
		t.Fatalf("error %v: want a *LineError for t.txt:2", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := func() Options {
		o := DefaultOptions()
		o.Profile = "e2e"
		o.Targets = targetsOf(1)
		o.Backends = 2
		o.DNS = "engines:8443"
		return o
	}
	tests := []struct {
		name    string
		edit    func(*Options)
		wantErr []string
	}{
		{"valid dns", func(*Options) {}, nil},
		{"valid services without backends", func(o *Options) { o.DNS, o.Backends, o.Services = "", 0, []string{"a:1", "b:2"} }, nil},
		{"no targets", func(o *Options) { o.Targets = nil }, []string{"no targets (--targets)"}},
		{"grpc over http1", func(o *Options) { o.GRPC, o.Protocol = true, "http1" }, []string{`grpc with protocol "http1": gRPC is http2`}},
		{"grpc", func(o *Options) { o.GRPC, o.Protocol = true, "http2" }, nil},
		{"too many targets", func(o *Options) { o.Targets = make([]Target, 17) }, []string{"17 targets, at most 16"}},
		{"everything wrong at once", func(o *Options) {
			o.Profile, o.DNS, o.Backends, o.Rate, o.Concurrency, o.MaxPending, o.StallBudget, o.FloorPct =
				"nightly", "engines", 0, 2_000_000, 0, -2, 2*time.Hour, -1
			o.Duration = 1500 * time.Millisecond
		}, []string{
			`--profile must be e2e, soak or local, got "nightly"`,
			`--dns: "engines" must be host:port: address engines: missing port in address`,
			"--backends must be at least 1 with --dns (the engines the name must resolve to)",
			"--duration must be a positive whole number of seconds, got 1.5s",
			"--rate must be 1 to 1000000, got 2000000",
			"--concurrency must be 1 to 1024, got 0",
			"--max-pending must be 0 to 1000000, got -2",
			"--stall-budget must be more than 0 and at most 1h0m0s, got 2h0m0s",
			"--floor-pct must be more than 0 and at most 100, got -1",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.edit(&o)
			err := o.Validate()
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if diff := cmp.Diff(tc.wantErr, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// renderedPlan mirrors the part of the v1 schema the renderer writes, so the
// golden plans are decoded strictly (unknown fields are errors) and their
// arithmetic checked independently of how they were written.
type renderedPlan struct {
	Version string `yaml:"version"`
	Stats   *struct {
		FlushInterval string `yaml:"flush_interval"`
		Prefix        string `yaml:"prefix"`
		Statsd        struct {
			Address string `yaml:"address"`
		} `yaml:"statsd"`
	} `yaml:"stats"`
	Pools []struct {
		Name     string   `yaml:"name"`
		DNS      string   `yaml:"dns"`
		Services []string `yaml:"services"`
	} `yaml:"pools"`
	Scenarios []struct {
		Name        string   `yaml:"name"`
		Pool        string   `yaml:"pool"`
		Protocol    string   `yaml:"protocol"`
		Concurrency string   `yaml:"concurrency"`
		MaxPending  *int     `yaml:"max_pending_requests"`
		Headers     []string `yaml:"headers"`
		// RequestTimeout is DefaultRequestTimeout in every golden plan.
		RequestTimeout string `yaml:"request_timeout"`
		Executor       struct {
			Type       string `yaml:"type"`
			Rate       int    `yaml:"rate"`
			Duration   string `yaml:"duration"`
			PerBackend bool   `yaml:"per_backend"`
			OpenLoop   bool   `yaml:"open_loop"`
		} `yaml:"executor"`
		Targets    []renderedTarget `yaml:"targets"`
		Thresholds []string         `yaml:"thresholds"`
	} `yaml:"scenarios"`
}

type renderedTarget struct {
	Name       string   `yaml:"name"`
	URL        string   `yaml:"url"`
	Weight     int      `yaml:"weight"`
	Thresholds []string `yaml:"thresholds"`
}

func TestGoldenPlansDecode(t *testing.T) {
	plans, _ := filepath.Glob(filepath.Join("testdata", "golden", "render-*.golden"))
	if len(plans) < 8 {
		t.Fatalf("only %d golden plans", len(plans))
	}
	for _, path := range plans {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			dec := yaml.NewDecoder(strings.NewReader(string(data)))
			dec.KnownFields(true)
			var p renderedPlan
			if err := dec.Decode(&p); err != nil {
				t.Fatal(err)
			}
			if p.Version != "v1" || len(p.Pools) != 1 || len(p.Scenarios) != 1 {
				t.Fatalf("want v1, one pool, one scenario; got %+v", p)
			}
			s := p.Scenarios[0]
			if s.Pool != p.Pools[0].Name || s.Executor.Type != "constant-rate" || !s.Executor.PerBackend || !s.Executor.OpenLoop {
				t.Errorf("scenario %+v", s)
			}
			if _, err := time.ParseDuration(s.Executor.Duration); err != nil {
				t.Errorf("duration %q: %v", s.Executor.Duration, err)
			}
			if d, err := time.ParseDuration(s.RequestTimeout); err != nil || d != DefaultRequestTimeout {
				t.Errorf("request_timeout %q, want %v", s.RequestTimeout, DefaultRequestTimeout)
			}
			wantUA := UserAgent
			if filepath.Base(path) == "render-user-agent-scenario.golden" {
				wantUA = "team-soak/2"
			}
			if diff := cmp.Diff([]string{"User-Agent: " + wantUA}, s.Headers); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			total := 0
			for _, tg := range s.Targets {
				total += tg.Weight
			}
			if total != s.Executor.Rate {
				t.Errorf("weights add up to %d, not the rate %d", total, s.Executor.Rate)
			}
			checkFloors(t, s.Thresholds, s.Targets)
		})
	}
}

// checkFloors holds the two ways a rendered plan floors the 2xx rate: one
// scenario floor after the zero thresholds and none on the targets, or
// none on the scenario and one on every target, proportional to its share
// (pct % of the share times the backends: the same ratio for each).
func checkFloors(t *testing.T, thresholds []string, targets []renderedTarget) {
	t.Helper()
	const prefix = "rate:benchmark.http_2xx >= "
	own := 0
	var ratio *big.Rat
	for _, tt := range targets {
		if len(tt.Thresholds) == 0 {
			continue
		}
		own++
		floor, ok := strings.CutPrefix(tt.Thresholds[0], prefix)
		f, okf := new(big.Rat).SetString(floor)
		if len(tt.Thresholds) != 1 || !ok || !okf {
			t.Errorf("target %s thresholds %q, want one 2xx floor", tt.Name, tt.Thresholds)
			continue
		}
		r := new(big.Rat).Quo(f, big.NewRat(int64(tt.Weight), 1))
		if ratio == nil {
			ratio = r
		} else if r.Cmp(ratio) != 0 {
			t.Errorf("target %s: floor %s is %s per rps of its share, others %s", tt.Name, floor, r.FloatString(6), ratio.FloatString(6))
		}
	}
	zero := len(thresholds) >= len(ZeroThresholds)
	for i := 0; zero && i < len(ZeroThresholds); i++ {
		zero = thresholds[i] == "counter:"+ZeroThresholds[i]+" == 0"
	}
	switch {
	case !zero:
		t.Errorf("thresholds %q do not start with the zero thresholds", thresholds)
	case own == 0 && (len(thresholds) != len(ZeroThresholds)+1 || !strings.HasPrefix(thresholds[len(thresholds)-1], prefix)):
		t.Errorf("thresholds %q, want the zero thresholds and one 2xx floor", thresholds)
	case own != 0 && (own != len(targets) || len(thresholds) != len(ZeroThresholds)):
		t.Errorf("%d of %d targets have a floor, scenario thresholds %q: want every target its own and no scenario floor", own, len(targets), thresholds)
	}
}

func TestRenderLibrary(t *testing.T) {
	ts, err := ReadTargets(soakTargets)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Profile, o.Targets, o.Services = "local", ts, []string{"127.0.0.11:8443", "127.0.0.12:8443"}
	o.Duration = 20 * time.Second
	r, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Backends != 2 || r.Duration != 20*time.Second || r.MaxPending != 18 || r.Floor != "5.94" || len(r.Shares) != 8 {
		t.Errorf("rendered %+v", r)
	}
	if !strings.Contains(string(r.YAML), "duration: 20s,") {
		t.Errorf("duration override missing:\n%s", r.YAML)
	}
}

func TestRenderPerTargetFloors(t *testing.T) {
	ts, err := ReadTargets(soakTargets)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Profile, o.Targets, o.DNS, o.Backends = "e2e", ts, "engines:8443", 2
	for _, per := range []bool{false, true} {
		o.PerTargetFloors = per
		r, err := Render(o)
		if err != nil {
			t.Fatal(err)
		}
		wantFloor, wantFloors := "5.94", []string(nil)
		if per {
			// 99 % of 9 rps and of 3 rps, on each of two nodes.
			wantFloor, wantFloors = "", []string{"17.82", "17.82", "17.82", "17.82", "17.82", "17.82", "5.94", "5.94"}
		}
		if r.Floor != wantFloor || !cmp.Equal(r.Floors, wantFloors) {
			t.Errorf("per-target %v: floor %q, floors %q; want %q, %q", per, r.Floor, r.Floors, wantFloor, wantFloors)
		}
	}
}

// TestReadTargetsCap refuses a targets file over MaxTargetsBytes, naming
// the file, without reading an endless one to its end.
func TestReadTargetsCap(t *testing.T) {
	_, err := ReadTargets("/dev/zero")
	var tl *record.TooLargeError
	if !errors.As(err, &tl) || tl.Path != "/dev/zero" || tl.Max != MaxTargetsBytes {
		t.Fatalf("ReadTargets(/dev/zero): %v, want a *record.TooLargeError", err)
	}
}
