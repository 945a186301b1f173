package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The run manifest is what a driver started again needs to go on with a
// run instead of starting a second one (sortie run --resume). The driver
// writes it next to the report before its first dispatch, and again before
// each later stage's dispatch, atomically (WriteFile); it names the run,
// the plan by its digest, the backends as resolved, and per stage the
// shared start time and every execution id, by which the engines keep an
// execution whose driver went away.
//
//	version           ManifestVersion
//	run_id            the run's id, the prefix of every execution id
//	plan, plan_sha256 the plan's path and the SHA-256 of its bytes
//	report, results_stream, live_record   the run's files, as given
//	backends          pool name: backend addresses, as resolved
//	stages[]          {name, dispatched, start_time, executions[]
//	                  {label, backend, execution_id, rejoins[]}} in
//	                  dispatch order; rejoins[] {addr, execution_id,
//	                  offset_ms, before {planned, unsent, counters}, gap,
//	                  live_buckets_before, live_samples_before}
//	                  are the engines of the node that came back, each
//	                  written before the rest of the schedule was sent to it
//	finished          the run's report was written: nothing to resume
//	cancelled         sortie run --cancel cancelled its executions
//	detached_at       when a driver last detached on SIGTERM (the engines
//	                  ran on), until a driver resumes
//	driver_gaps[]     the times no driver followed the run (see DriverGap)

// ManifestName is the manifest's file name in a run directory (the
// report's directory).
const ManifestName = "run.manifest.json"

// ManifestVersion is the manifest format this package writes and reads.
const ManifestVersion = 1

// maxManifestBytes bounds a manifest: some hundred bytes per execution.
const maxManifestBytes = 64 << 20

// Manifest describes a run for a driver that resumes it.
type Manifest struct {
	// Version is ManifestVersion.
	Version int `json:"version"`
	// RunID is the run's id, the prefix of its execution ids.
	RunID string `json:"run_id"`
	// Plan is the plan's path as given, PlanSHA256 the hex SHA-256 of
	// its bytes: a resume refuses another plan.
	Plan       string `json:"plan"`
	PlanSHA256 string `json:"plan_sha256"`
	// Report, ResultsStream and LiveRecord are the run's files, as given
	// (empty when not written).
	Report        string `json:"report,omitempty"`
	ResultsStream string `json:"results_stream,omitempty"`
	LiveRecord    string `json:"live_record,omitempty"`
	// Backends are the backend addresses of each pool, as resolved once:
	// a resume uses them, never a second resolution.
	Backends map[string][]string `json:"backends"`
	// Stages are the dispatched stages, in order.
	Stages []ManifestStage `json:"stages"`
	// Finished says the run ended and its report was written.
	Finished bool `json:"finished,omitempty"`
	// Cancelled says sortie run --cancel cancelled the run's executions.
	Cancelled bool `json:"cancelled,omitempty"`
	// DetachedAt is when a driver detached on SIGTERM (RFC 3339, ms);
	// cleared by the driver that resumes.
	DetachedAt string `json:"detached_at,omitempty"`
	// DriverGaps are the times no driver followed the run.
	DriverGaps []DriverGap `json:"driver_gaps,omitempty"`
}

// ManifestStage is one dispatched stage.
type ManifestStage struct {
	// Name is "<scenario>" or "<scenario>/<stage>".
	Name string `json:"name"`
	// Dispatched is when the driver dispatched it, StartTime the shared
	// start time of its executions (RFC 3339, ms).
	Dispatched string `json:"dispatched"`
	StartTime  string `json:"start_time"`
	// Executions are its executions on every backend.
	Executions []ManifestExecution `json:"executions"`
}

// ManifestExecution is one execution on one backend.
type ManifestExecution struct {
	Label       string `json:"label"`
	Backend     string `json:"backend"`
	ExecutionID string `json:"execution_id"`
	// Rejoins are the engines of the backend's node that came back and
	// took up the rest of the schedule, in order: a driver that resumes
	// follows the last one again, and takes the counts of those before
	// it from here (their engines are gone).
	Rejoins []ManifestRejoin `json:"rejoins,omitempty"`
}

// ManifestRejoin is one engine of a node that came back mid-execution,
// written before the rest of the schedule is sent to it.
type ManifestRejoin struct {
	// Addr is the address of the engine that came back, ExecutionID the
	// id of the execution it was given (the rest of the schedule).
	Addr        string `json:"addr"`
	ExecutionID string `json:"execution_id"`
	// OffsetMs is where it takes up the schedule, in ms from the stage's
	// start time (ExecuteRequest.start_offset).
	OffsetMs int64 `json:"offset_ms"`
	// Before is what the engine before it counted of its own part of
	// the schedule (from its offset to the gap), whole: that engine is
	// gone, and this is the only record of it a resume can trust.
	Before Counted `json:"before"`
	// Gap is the time between the two engines: the requests due in it
	// were not sent.
	Gap Gap `json:"gap"`
	// LiveBucketsBefore and LiveSamplesBefore count the bucket and
	// sample lines of this execution on this backend the live record
	// holds before this engine's (the engines before it wrote them
	// first): a resume follows this engine from the lines after them.
	LiveBucketsBefore uint32 `json:"live_buckets_before"`
	LiveSamplesBefore uint32 `json:"live_samples_before"`
}

// Counted is what one engine counted of its part of a schedule.
type Counted struct {
	Planned  uint64            `json:"planned"`
	Unsent   uint64            `json:"unsent"`
	Counters map[string]uint64 `json:"counters"`
}

// maxRejoins bounds the rejoins a manifest may name for one execution on
// one backend, far above what a driver gives (its --help says how many).
const maxRejoins = 10_000

// DriverGap is a time during which no driver followed the run: the
// engines ran on, and the driver that resumed took what they kept, so no
// request is lost or counted twice; the gap says when the run was not
// watched (no deadline was enforced, no live record written).
type DriverGap struct {
	// From is the last sign of the driver that went away (its detach, or
	// the last write to the live record or the manifest), To when the
	// next driver resumed (RFC 3339, ms).
	From string `json:"from"`
	To   string `json:"to"`
	// Why says how the driver went: "detached (SIGTERM)" or "the driver
	// stopped without detaching (killed)".
	Why string `json:"why"`
}

// ManifestPath is the manifest of the run whose report is report.
func ManifestPath(report string) string {
	return filepath.Join(filepath.Dir(report), ManifestName)
}

// WriteManifest writes m to path atomically.
func WriteManifest(path string, m *Manifest) error {
	m.Version = ManifestVersion
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("manifest %s: %w", path, err)
	}
	if err := WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("manifest %s: %w", path, err)
	}
	return nil
}

// ErrNoManifest is returned by ReadManifestFile for a run directory that
// holds no manifest.
var ErrNoManifest = errors.New("no run manifest")

// ReadManifestFile reads the manifest at path; a missing file is
// ErrNoManifest.
func ReadManifestFile(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer f.Close()
	m, err := ReadManifest(f)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	return m, nil
}

// ReadManifest reads a manifest of at most 64 MiB, strictly: unknown
// fields and a version other than ManifestVersion are errors.
func ReadManifest(r io.Reader) (*Manifest, error) {
	data, tooBig, err := readCapped(r, maxManifestBytes)
	if err != nil {
		return nil, err
	}
	if tooBig {
		return nil, fmt.Errorf("larger than %s, the most a manifest may be", size(maxManifestBytes))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	var problems []error
	if m.Version != ManifestVersion {
		problems = append(problems, fmt.Errorf("version %d, this driver reads %d", m.Version, ManifestVersion))
	}
	if m.RunID == "" {
		problems = append(problems, errors.New("no run_id"))
	}
	for i, st := range m.Stages {
		if _, err := ParseTime(st.StartTime); err != nil {
			problems = append(problems, fmt.Errorf("stages[%d].start_time: %w", i, err))
		}
		if _, err := ParseTime(st.Dispatched); err != nil {
			problems = append(problems, fmt.Errorf("stages[%d].dispatched: %w", i, err))
		}
		for j, x := range st.Executions {
			if x.Label == "" || x.Backend == "" || x.ExecutionID == "" {
				problems = append(problems, fmt.Errorf("stages[%d].executions[%d]: label, backend and execution_id are all needed", i, j))
			}
			if err := checkRejoins(x.Rejoins); err != nil {
				problems = append(problems, fmt.Errorf("stages[%d].executions[%d].%w", i, j, err))
			}
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return &m, nil
}

// checkRejoins checks a manifest execution's rejoins: each names its
// engine and execution, their offsets grow, and their gaps are times in
// order (as a result's gap_unsent must be).
func checkRejoins(rs []ManifestRejoin) error {
	if len(rs) > maxRejoins {
		return fmt.Errorf("rejoins: %d, at most %d", len(rs), maxRejoins)
	}
	gaps := make([]Gap, len(rs))
	prev := int64(-1)
	for k, rj := range rs {
		if rj.Addr == "" || rj.ExecutionID == "" {
			return fmt.Errorf("rejoins[%d]: addr and execution_id are both needed", k)
		}
		if rj.OffsetMs < 0 || rj.OffsetMs < prev {
			return fmt.Errorf("rejoins[%d]: offset_ms %d is negative or before the rejoin ahead of it", k, rj.OffsetMs)
		}
		prev = rj.OffsetMs
		gaps[k] = rj.Gap
	}
	if err := checkGaps(gaps); err != nil {
		return fmt.Errorf("rejoins: %w", err)
	}
	return nil
}

// Stage returns the dispatched stage of that name, or nil.
func (m *Manifest) Stage(name string) *ManifestStage {
	for i := range m.Stages {
		if m.Stages[i].Name == name {
			return &m.Stages[i]
		}
	}
	return nil
}
