package saver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/record"
)

// Names of the files the saver writes into the run directory.
const (
	FileJob        = "job.json"
	FileDriverPod  = "sortie-pod.json"
	FileDriverLog  = "sortie.log"
	FileEnginesEnd = "engines-end.tsv"
	FileStream     = "results.jsonl"
	FileLive       = "live.jsonl"
	FileReport     = "report.json"
	FileTimes      = "times.tsv"
	FileSaved      = "SAVED"
)

// removeStaleTemps deletes temporary files left by a saver that was killed
// outright (SIGKILL gives no chance to clean up). Only the saver's own: the
// kickoff writes run.env into the same directory while the saver starts.
func removeStaleTemps(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if target, ok := record.AtomicTempTarget(e.Name()); ok && !e.IsDir() && savesFile(target) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// savesFile reports whether name is one the saver writes.
func savesFile(name string) bool {
	switch name {
	case FileJob, FileDriverPod, FileDriverLog, FileEnginesEnd, FileStream, FileLive, FileReport, FileTimes, FileSaved:
		return true
	}
	name = strings.TrimSuffix(name, ".partial")
	return strings.HasSuffix(name, ".log") && (strings.HasPrefix(name, "engine-") || strings.HasPrefix(name, "sortie-"))
}

// createTemp starts name in dir: streamed into a temporary file beside it,
// it gets its name on Commit (record.CreateAtomic), so nothing half-written
// ever has the final name. What the saver writes is meant to be read by
// whoever collects the run directory, hence 0644.
func createTemp(dir, name string) (*record.AtomicFile, error) {
	return record.CreateAtomic(filepath.Join(dir, name), 0o644)
}

// writeFile writes name in dir atomically (record.WriteFile).
func writeFile(dir, name string, data []byte) error {
	return record.WriteFile(filepath.Join(dir, name), data, 0o644)
}

// writeJSON writes v indented, with a final newline.
func writeJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return writeFile(dir, name, append(b, '\n'))
}

// readReportFile reads a report saved in the run directory with the
// record's one reader, so the saver keeps (and writes SAVED for) exactly
// the reports the gate grades. An error that is not about the file's
// content is the os error (errors.Is(err, os.ErrNotExist) holds for a
// missing file).
func readReportFile(path string) (*record.Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return record.ReadReport(f)
}

// readStreamFile reads a results stream saved in the run directory, with
// the same reader as the gate. saved is false when there is no file to
// read; with saved true, err says why the gate would not grade it.
func readStreamFile(path string) (src *record.Source, saved bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	src, err = record.ReadStream(f)
	return src, true, err
}

// isPrefixFile reports whether the file at path starts with the whole
// content of the file at prefix: a results stream is only ever appended to,
// so a newer whole copy extends any older one.
func isPrefixFile(prefix, path string) (bool, error) {
	a, err := os.Open(prefix)
	if err != nil {
		return false, err
	}
	defer a.Close()
	b, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer b.Close()
	bufA := make([]byte, 64<<10)
	bufB := make([]byte, 64<<10)
	for {
		n, errA := io.ReadFull(a, bufA)
		if n > 0 {
			m, errB := io.ReadFull(b, bufB[:n])
			if m < n || !bytes.Equal(bufA[:n], bufB[:n]) {
				if errB != nil && errB != io.EOF && errB != io.ErrUnexpectedEOF {
					return false, errB
				}
				return false, nil
			}
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return true, nil
		}
		if errA != nil {
			return false, errA
		}
	}
}

// sameFile reports whether two files hold the same bytes.
func sameFile(a, b string) bool {
	x, err := os.ReadFile(a)
	if err != nil {
		return false
	}
	y, err := os.ReadFile(b)
	return err == nil && bytes.Equal(x, y)
}

// TimesTSV renders the timestamps of executions as times.tsv: one line per
// execution and backend result (an execution without results gets one line
// with backend "-"), tab-separated:
//
//	label  started_at  ended_at  elapsed_ms  backend  backend_started_at  pass|fail|not_run
//
// A missing time is "-". The times come from the driver's clock (started_at,
// ended_at) and each engine's (backend_started_at); they line a run up with
// the rolls of a churn log.
func TimesTSV(execs []record.Execution) []byte {
	var b bytes.Buffer
	for _, e := range execs {
		verdict := "fail"
		switch {
		case e.NotRun:
			verdict = "not_run"
		case e.Pass:
			verdict = "pass"
		}
		row := func(backend, bstart string) {
			fields := []string{e.Label, orDash(e.StartedAt), orDash(e.EndedAt),
				strconv.FormatInt(e.ElapsedMs, 10), orDash(backend), orDash(bstart), verdict}
			for i, f := range fields {
				if i > 0 {
					b.WriteByte('\t')
				}
				b.WriteString(tsvField(f))
			}
			b.WriteByte('\n')
		}
		if len(e.Results) == 0 {
			row("", "")
			continue
		}
		for _, r := range e.Results {
			row(r.Backend, r.StartedAt)
		}
	}
	return b.Bytes()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tsvField keeps a field on its line and in its column.
func tsvField(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}

// summary is what the SORTIE_SAVED line says about executions.
type summary struct {
	executions, passed, notRun int
	window                     string
}

// summarize counts executions and finds the window from the earliest
// started_at to the latest ended_at ("?" for an end that no execution has).
func summarize(execs []record.Execution) summary {
	s := summary{executions: len(execs)}
	var first, last time.Time
	var firstS, lastS string
	for _, e := range execs {
		switch {
		case e.NotRun:
			s.notRun++
		case e.Pass:
			s.passed++
		}
		if t, err := time.Parse(time.RFC3339Nano, e.StartedAt); err == nil && (firstS == "" || t.Before(first)) {
			first, firstS = t, e.StartedAt
		}
		if t, err := time.Parse(time.RFC3339Nano, e.EndedAt); err == nil && (lastS == "" || t.After(last)) {
			last, lastS = t, e.EndedAt
		}
	}
	s.window = orQuestion(firstS) + ".." + orQuestion(lastS)
	return s
}

func orQuestion(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// oneLine makes a reason fit on a program output line.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	return clip(s, max)
}
