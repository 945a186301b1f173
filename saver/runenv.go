package saver

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sortie-soak/sortie/record"
)

// RunEnv is what a run directory's run.env says about the run. The kickoff
// writes it as KEY=VALUE lines when it starts the Job; see ParseRunEnv for
// the keys.
type RunEnv struct {
	// Context is the kubeconfig context of the cluster (CONTEXT). Empty
	// means the kubeconfig's current context.
	Context string
	// Namespace holds the Job, its pods, the engines and the PVC (NAMESPACE).
	Namespace string
	// Job is the driver's Job name (JOB).
	Job string
	// Report is the report's file name on the PVC, relative to its root
	// (REPORT).
	Report string
	// Stream is the results stream's file name on the PVC (STREAM); empty
	// when the run writes none.
	Stream string
	// Live is the live record's file name on the PVC (LIVE); empty when
	// the run writes none or run.env does not say.
	Live string
	// PVC is the claim the driver writes the report and stream to (PVC).
	PVC string
	// PlannedDuration is how long the load was planned to run
	// (PLANNED_DURATION).
	PlannedDuration time.Duration
	// LoadStart is when the load started (LOAD_START); zero when run.env
	// does not say, and the Job's start time stands in.
	LoadStart time.Time
	// EngineSelector selects the engine pods whose logs are saved
	// (ENGINE_SELECTOR); empty saves none.
	EngineSelector string
	// ReaderImage runs the reader pod (READER_IMAGE, else DRIVER_IMAGE).
	ReaderImage string
	// ReaderCommand prints a file given as its last argument
	// (READER_COMMAND, split on spaces; default "cat").
	ReaderCommand []string
	// ReaderPod names the reader pod (READER_POD; default "<JOB>-reader").
	ReaderPod string
	// DriverContainer and EngineContainer name the containers whose logs
	// are saved (DRIVER_CONTAINER, ENGINE_CONTAINER); empty means the pod's
	// first container.
	DriverContainer string
	EngineContainer string
}

// RunEnvKeys documents every key ParseRunEnv reads, in the order --help
// lists them.
var RunEnvKeys = []struct{ Key, Doc string }{
	{"CONTEXT", "kubeconfig context (optional; --context overrides it)"},
	{"NAMESPACE", "namespace of the Job, its pods, the engines and the PVC (required)"},
	{"JOB", "the driver's Job name (required)"},
	{"PVC", "the report PVC (required)"},
	{"REPORT", "report file name on the PVC, relative to its root (required)"},
	{"STREAM", "results stream file name on the PVC (optional)"},
	{"LIVE", "live record file name on the PVC (optional; saved as live.jsonl)"},
	{"PLANNED_DURATION", "planned load duration: a Go duration (900s, 8h) or whole seconds (required)"},
	{"LOAD_START", "when the load started: RFC 3339 or Unix seconds (optional; default the Job's start time)"},
	{"ENGINE_SELECTOR", "label selector of the engine pods (optional; no engine logs without it)"},
	{"READER_IMAGE", "image of the reader pod; it must hold READER_COMMAND (DRIVER_IMAGE is used when absent)"},
	{"DRIVER_IMAGE", "the driver's image, the reader pod's image when READER_IMAGE is absent"},
	{"READER_COMMAND", "command that prints the file given as its last argument (optional; default cat); sortie cat (the driver image's) copies in checked chunks"},
	{"READER_POD", "reader pod name (optional; default <JOB>-reader)"},
	{"DRIVER_CONTAINER", "driver container whose log is sortie.log (optional; default the pod's first)"},
	{"ENGINE_CONTAINER", "engine container whose log is saved (optional; default the pod's first)"},
}

// ParseRunEnv reads run.env by record.ReadEnv's rules: one KEY=VALUE per
// line, blank lines and lines starting with # ignored, an optional
// "export " prefix, and a value in one pair of matching single or double
// quotes taken without them (no escapes, no inline comments). Unknown keys
// are ignored: run.env is shared by every program of the harness. A key
// given twice keeps its last value, as a shell would. Every malformed line
// and bad value is reported, with its line number; missing keys are for
// Validate.
func ParseRunEnv(r io.Reader) (RunEnv, error) {
	vals, err := record.ReadEnv(r)
	errs := []error{err}
	env := RunEnv{
		Context:         vals.Get("CONTEXT"),
		Namespace:       vals.Get("NAMESPACE"),
		Job:             vals.Get("JOB"),
		Report:          vals.Get("REPORT"),
		Stream:          vals.Get("STREAM"),
		Live:            vals.Get("LIVE"),
		PVC:             vals.Get("PVC"),
		EngineSelector:  vals.Get("ENGINE_SELECTOR"),
		ReaderImage:     vals.Get("READER_IMAGE"),
		ReaderPod:       vals.Get("READER_POD"),
		DriverContainer: vals.Get("DRIVER_CONTAINER"),
		EngineContainer: vals.Get("ENGINE_CONTAINER"),
	}
	if f := strings.Fields(vals.Get("READER_COMMAND")); len(f) > 0 {
		env.ReaderCommand = f
	}
	if env.ReaderImage == "" {
		env.ReaderImage = vals.Get("DRIVER_IMAGE")
	}
	if v := vals.Get("PLANNED_DURATION"); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("run.env:%d: PLANNED_DURATION: %w", vals.Line("PLANNED_DURATION"), err))
		}
		env.PlannedDuration = d
	}
	if v := vals.Get("LOAD_START"); v != "" {
		t, err := parseTime(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("run.env:%d: LOAD_START: %w", vals.Line("LOAD_START"), err))
		}
		env.LoadStart = t
	}
	return env, errors.Join(errs...)
}

// parseDuration takes a Go duration or whole seconds (what a shell script
// computes with $((...))).
func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > int64(365*24*time.Hour/time.Second) {
			return 0, fmt.Errorf("%d seconds is out of range", n)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 900s or whole seconds, got %q", clip(s, 40))
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %s", s)
	}
	return d, nil
}

// parseTime takes RFC 3339 or Unix seconds (what `date +%s` prints).
func parseTime(s string) (time.Time, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 || n > 1<<40 {
			return time.Time{}, fmt.Errorf("%d is not a plausible Unix time", n)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want RFC 3339 or Unix seconds, got %q", clip(s, 40))
	}
	return t, nil
}

// Validate returns every problem of the run description at once.
func (e RunEnv) Validate() error {
	var errs []error
	need := func(key, v string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("run.env: %s is missing", key))
		}
	}
	need("NAMESPACE", e.Namespace)
	need("JOB", e.Job)
	need("PVC", e.PVC)
	need("REPORT", e.Report)
	need("READER_IMAGE (or DRIVER_IMAGE)", e.ReaderImage)
	if e.PlannedDuration <= 0 {
		errs = append(errs, errors.New("run.env: PLANNED_DURATION is missing or zero"))
	}
	if e.Namespace != "" {
		for _, m := range validation.IsDNS1123Label(e.Namespace) {
			errs = append(errs, fmt.Errorf("run.env: NAMESPACE %q: %s", e.Namespace, m))
		}
	}
	for _, kv := range [][2]string{{"JOB", e.Job}, {"PVC", e.PVC}, {"READER_POD", e.ReaderPod}} {
		if kv[1] == "" {
			continue
		}
		for _, m := range validation.IsDNS1123Subdomain(kv[1]) {
			errs = append(errs, fmt.Errorf("run.env: %s %q: %s", kv[0], kv[1], m))
		}
	}
	for _, kv := range [][2]string{{"REPORT", e.Report}, {"STREAM", e.Stream}, {"LIVE", e.Live}} {
		if kv[1] == "" {
			continue
		}
		if err := checkPVCPath(kv[1]); err != nil {
			errs = append(errs, fmt.Errorf("run.env: %s: %w", kv[0], err))
		}
	}
	if e.EngineSelector != "" {
		if _, err := labels.Parse(e.EngineSelector); err != nil {
			errs = append(errs, fmt.Errorf("run.env: ENGINE_SELECTOR: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkPVCPath accepts a clean relative path inside the PVC: the reader pod
// is handed /report/<path>, and nothing may point it elsewhere.
func checkPVCPath(p string) error {
	switch {
	case path.IsAbs(p):
		return fmt.Errorf("%q must be relative to the PVC's root", p)
	case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("%q must be a clean path inside the PVC", p)
	case strings.ContainsAny(p, "\x00\n"):
		return fmt.Errorf("%q holds a NUL or newline", p)
	}
	return nil
}

// readerPod is the reader pod's name.
func (e RunEnv) readerPod() string {
	if e.ReaderPod != "" {
		return e.ReaderPod
	}
	return e.Job + "-reader"
}

// readerCommand is the reader's command before the file argument.
func (e RunEnv) readerCommand() []string {
	if len(e.ReaderCommand) > 0 {
		return e.ReaderCommand
	}
	return []string{"cat"}
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
