package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// Output is everything one run of sortie-bench measured.
type Output struct {
	// StartedAt is when the bench started, UTC.
	StartedAt time.Time `json:"started_at"`
	// Command is the command line, for the record.
	Command string `json:"command"`
	// Go, Platform, CPUs and Model describe the machine.
	Go       string `json:"go"`
	Platform string `json:"platform"`
	CPUs     int    `json:"cpus"`
	Model    string `json:"model"`
	// TargetCPU and GeneratorCPU are the cores in use; -1 is unpinned.
	TargetCPU    int `json:"target_cpu"`
	GeneratorCPU int `json:"generator_cpu"`
	// Nice is the nice value of the measured processes.
	Nice int `json:"nice"`
	// LoadavgBefore and LoadavgAfter are /proc/loadavg's 1, 5 and 15
	// minute averages: the machine is shared, and they say how much.
	LoadavgBefore [3]float64 `json:"loadavg_before"`
	LoadavgAfter  [3]float64 `json:"loadavg_after"`
	// Rows holds one row per tool per scenario, in the order run.
	Rows []Row `json:"rows"`
	// Checks are the assertions and the engine's goals.
	Checks []Check `json:"checks"`
	// Ceiling is the engine's step-up, when it ran.
	Ceiling *Ceiling `json:"ceiling,omitempty"`
}

// Row is one tool's measurement in one scenario.
type Row struct {
	// Scenario is soak, high, step (the engine's step-up) or low.
	Scenario string `json:"scenario"`
	// Tool is engine, fortio, vegeta or wrk, with "xN" for N processes.
	Tool string `json:"tool"`
	// Processes is how many processes of the tool ran together.
	Processes int `json:"processes"`
	// Installed is false for a peer that was not found (or not run).
	Installed bool `json:"installed"`
	// Rate is the requested total rate in rps; 0 is closed loop.
	Rate float64 `json:"rate"`
	// Duration is the requested duration.
	Duration string `json:"duration"`
	// Planned is the number of requests the rate and duration ask for.
	Planned uint64 `json:"planned,omitempty"`
	// Sent counts requests written; OK the 2xx answers; Errors every
	// other outcome (for the engine, pool_overflow included).
	Sent   uint64 `json:"sent"`
	OK     uint64 `json:"ok"`
	Errors uint64 `json:"errors"`
	// AchievedRate is the rate the tool reports it sent at.
	AchievedRate float64 `json:"achieved_rate"`
	// Held: no error (for the engine, no pool_overflow either) and at
	// least 99 % of Planned sent; for a peer, at 99 % of Rate too.
	Held bool `json:"held"`
	// CPUSeconds is the tool's user+sys time; WallSeconds the window;
	// CPUCores their ratio; USPerReq CPU microseconds per request sent.
	CPUSeconds  float64 `json:"cpu_seconds"`
	WallSeconds float64 `json:"wall_seconds"`
	CPUCores    float64 `json:"cpu_cores"`
	USPerReq    float64 `json:"us_per_req"`
	// PeakRSSMiB is the peak resident set size, summed over processes.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// TargetCores is the target server's CPU over the same window.
	TargetCores float64 `json:"target_cores"`
	// P50NS and P99NS are latency percentiles in ns; LatencyFrom says
	// where they start: "intended" send time (the engine) or "actual"
	// send (the peers).
	P50NS       int64  `json:"p50_ns"`
	P99NS       int64  `json:"p99_ns"`
	LatencyFrom string `json:"latency_from"`
	// P99SentNS is, for the engine, the p99 of request_to_response:
	// from the actual send, as the peers measure.
	P99SentNS int64 `json:"p99_from_send_ns,omitempty"`
	// Profile is the engine child's CPU profile, with --cpuprofile-dir.
	Profile string `json:"profile,omitempty"`
	// Notes say what else matters.
	Notes []string `json:"notes,omitempty"`
}

func (r *Row) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// setMeasure fills the CPU, RSS and target columns.
func (r *Row) setMeasure(m measure) {
	r.WallSeconds = m.Wall.Seconds()
	r.CPUSeconds = m.CPU.Seconds()
	r.PeakRSSMiB = float64(m.PeakKiB) / 1024
	if r.WallSeconds > 0 {
		r.CPUCores = r.CPUSeconds / r.WallSeconds
		r.TargetCores = m.TargetCPU.Seconds() / r.WallSeconds
	}
}

// setPerRequest fills US_PER_REQ once Sent is known.
func (r *Row) setPerRequest() {
	if r.Sent > 0 {
		r.USPerReq = r.CPUSeconds * 1e6 / float64(r.Sent)
	}
}

// Check kinds.
const (
	checkAssert = "ASSERT" // a count that must hold on any machine
	checkGoal   = "GOAL"   // a target of the engine's (a cost, a held rate), measured
)

// Check is one assertion or goal.
type Check struct {
	Kind     string `json:"kind"`
	Scenario string `json:"scenario"`
	Tool     string `json:"tool"`
	// What reads like "sent=3600 want=3600" or "cpu_cores=0.0031 <= 0.005".
	What string `json:"what"`
	Pass bool   `json:"pass"`
}

// Ceiling is the outcome of the engine's step-up.
type Ceiling struct {
	// Held is the highest rate held (0: none); NotHeld the first rate
	// not held (0: every step held).
	Held    int `json:"held"`
	NotHeld int `json:"not_held"`
	// EngineCores and TargetCores are the CPU of each at the last step.
	EngineCores float64 `json:"engine_cores"`
	TargetCores float64 `json:"target_cores"`
	// Bottleneck says which side saturated its core (>= 0.9) at the last
	// step: target, engine, both or neither.
	Bottleneck string `json:"bottleneck"`
}

func (o *Output) failedAsserts() int {
	n := 0
	for _, c := range o.Checks {
		if c.Kind == checkAssert && !c.Pass {
			n++
		}
	}
	return n
}

// The engine's goals (issue "What must be measured").
const (
	goalSoakCores  = 0.005
	goalSoakRSSMiB = 20
	goalHighUS     = 7.7
	goalLowUS      = 16
	// Beside a baseline engine (--baseline-engine): the timeline's cost.
	goalSoakCPURatio = 1.1
	goalHighUSRatio  = 1.05
)

// checks derives the assertions and goals from the rows.
func checks(o Options, rows []Row) []Check {
	var out []Check
	add := func(kind string, r Row, pass bool, format string, args ...any) {
		out = append(out, Check{Kind: kind, Scenario: r.Scenario, Tool: r.Tool, What: fmt.Sprintf(format, args...), Pass: pass})
	}
	// Counts are asserted: the engine sends every planned request and
	// every one is answered 2xx, however loaded the machine. Whether the
	// rate was held depends on the machine: a goal, measured.
	addCounts := func(r Row) {
		add(checkAssert, r, r.Planned > 0 && r.Sent == r.Planned && r.OK == r.Sent && r.Errors == 0,
			"sent=%d ok=%d errors=%d planned=%d", r.Sent, r.OK, r.Errors, r.Planned)
	}
	addHeld := func(r Row) {
		add(checkGoal, r, r.Held, "held=%v sent=%d/%d (%.2f%%) achieved=%.0f/%.0f rps",
			r.Held, r.Sent, r.Planned, pct(r.Sent, r.Planned), r.AchievedRate, r.Rate)
	}
	var bestPeerP99 int64
	var bestPeer string
	floor := map[string]float64{} // scenario: the floor client's us_per_req
	for _, r := range rows {
		if r.Scenario == scenarioLow && r.Tool != "engine" && r.Installed && r.P99NS > 0 &&
			(bestPeerP99 == 0 || r.P99NS < bestPeerP99) {
			bestPeerP99, bestPeer = r.P99NS, r.Tool
		}
		if r.Tool == peerFloor && r.Installed && r.Sent > 0 {
			floor[r.Scenario] = r.USPerReq
		}
	}
	floorNote := func(scenario string) string {
		if f, ok := floor[scenario]; ok {
			return fmt.Sprintf(" (floor client %.2f)", f)
		}
		return ""
	}
	baseline := map[string]Row{} // scenario: the baseline engine's row
	for _, r := range rows {
		if r.Tool == toolBaseline && r.Installed {
			baseline[r.Scenario] = r
		}
	}
	for _, r := range rows {
		if r.Tool == toolBaseline {
			addCounts(r)
			continue
		}
		if r.Tool != toolEngine {
			continue
		}
		if base, ok := baseline[r.Scenario]; ok {
			switch r.Scenario {
			case scenarioSoak:
				ratio := r.CPUSeconds / base.CPUSeconds
				add(checkGoal, r, ratio <= goalSoakCPURatio, "cpu_ratio=%.3f (%.3fs / baseline %.3fs) <= %v", ratio, r.CPUSeconds, base.CPUSeconds, goalSoakCPURatio)
			case scenarioHigh:
				ratio := r.USPerReq / base.USPerReq
				add(checkGoal, r, ratio <= goalHighUSRatio, "us_per_req_ratio=%.3f (%.2f / baseline %.2f) <= %v", ratio, r.USPerReq, base.USPerReq, goalHighUSRatio)
			}
		}
		switch r.Scenario {
		case scenarioSoak:
			secs := int64(o.SoakDuration / time.Second)
			want := uint64(6*9*secs + 2*3*secs)
			add(checkAssert, r, r.Sent == want && r.OK == want && r.Errors == 0,
				"sent=%d ok=%d errors=%d want=%d (6x9+2x3 rps x %ds)", r.Sent, r.OK, r.Errors, want, secs)
			add(checkGoal, r, r.CPUCores <= goalSoakCores, "cpu_cores=%.4f <= %v", r.CPUCores, goalSoakCores)
			add(checkGoal, r, r.PeakRSSMiB <= goalSoakRSSMiB, "peak_rss_mib=%.1f <= %v", r.PeakRSSMiB, goalSoakRSSMiB)
		case scenarioHigh:
			addCounts(r)
			addHeld(r)
			add(checkGoal, r, r.USPerReq <= goalHighUS, "us_per_req=%.2f <= %v%s", r.USPerReq, goalHighUS, floorNote(r.Scenario))
		case scenarioLow:
			addCounts(r)
			addHeld(r)
			add(checkGoal, r, r.USPerReq <= goalLowUS, "us_per_req=%.2f <= %v%s", r.USPerReq, goalLowUS, floorNote(r.Scenario))
			if bestPeerP99 > 0 {
				add(checkGoal, r, r.P99NS <= bestPeerP99, "p99=%s (from intended send) <= best peer p99=%s (%s, from actual send)",
					fmtDur(time.Duration(r.P99NS)), fmtDur(time.Duration(bestPeerP99)), bestPeer)
				if r.P99SentNS > 0 {
					add(checkGoal, r, r.P99SentNS <= bestPeerP99, "p99=%s (from actual send) <= best peer p99=%s (%s, from actual send)",
						fmtDur(time.Duration(r.P99SentNS)), fmtDur(time.Duration(bestPeerP99)), bestPeer)
				}
			}
		}
	}
	return out
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// fmtDur prints a latency rounded to three significant digits or the µs.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Round(time.Microsecond)/time.Microsecond)
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3gs", d.Seconds())
	}
}

// errorCounters lists the non-2xx outcome classes of a counter map.
func errorCounters(c map[string]uint64) string {
	var parts []string
	for _, k := range record.Outcomes {
		if k != record.HTTP2xx && c[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(k, "benchmark."), c[k]))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// writeOutput prints out as the table with its check lines, or as JSON.
func writeOutput(w io.Writer, out *Output, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# sortie-bench %s %s %s cpus=%d model=%q target_cpu=%d generator_cpu=%d nice=%d loadavg=%s\n",
		out.StartedAt.Format(time.RFC3339), out.Go, out.Platform, out.CPUs, out.Model, out.TargetCPU, out.GeneratorCPU, out.Nice, fmtLoad(out.LoadavgBefore))
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tTOOL\tRATE\tDURATION\tSENT\tOK\tERRORS\tCPU_CORES\tUS_PER_REQ\tPEAK_RSS_MIB\tP50\tP99\tNOTES")
	for _, r := range out.Rows {
		rate := fmt.Sprintf("%g", r.Rate)
		if r.Rate == 0 {
			rate = "closed"
		}
		if !r.Installed {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", r.Scenario, r.Tool, rate, r.Duration, strings.Join(r.Notes, "; "))
			continue
		}
		notes := append([]string{fmt.Sprintf("target %.2f core", r.TargetCores)}, r.Notes...)
		if r.Rate > 0 {
			notes = append([]string{fmt.Sprintf("achieved %.0f rps", r.AchievedRate)}, notes...)
		}
		if r.Rate > 0 && !r.Held {
			notes = append([]string{"NOT HELD"}, notes...)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%.4f\t%.2f\t%.1f\t%s\t%s\t%s\n",
			r.Scenario, r.Tool, rate, r.Duration, r.Sent, r.OK, r.Errors, r.CPUCores, r.USPerReq, r.PeakRSSMiB,
			fmtDur(time.Duration(r.P50NS)), fmtDur(time.Duration(r.P99NS)), strings.Join(notes, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range out.Checks {
		verdict := map[bool]string{true: "ok", false: "FAILED"}[c.Pass]
		if c.Kind == checkGoal {
			verdict = map[bool]string{true: "met", false: "missed"}[c.Pass]
		}
		fmt.Fprintf(&buf, "%s %s %s %s %s\n", c.Kind, c.Scenario, c.Tool, c.What, verdict)
	}
	if c := out.Ceiling; c != nil {
		fmt.Fprintf(&buf, "CEILING engine held=%d not_held=%d engine_cores=%.2f target_cores=%.2f bottleneck=%s\n",
			c.Held, c.NotHeld, c.EngineCores, c.TargetCores, c.Bottleneck)
	}
	fmt.Fprintf(&buf, "# loadavg_after=%s\n", fmtLoad(out.LoadavgAfter))
	_, err := w.Write(buf.Bytes())
	return err
}

func fmtLoad(l [3]float64) string { return fmt.Sprintf("%.2f,%.2f,%.2f", l[0], l[1], l[2]) }

// cpuModel reads the CPU's model name from /proc/cpuinfo; "" if unknown.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
