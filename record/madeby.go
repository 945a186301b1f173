package record

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"runtime"
	"runtime/debug"
)

// MadeBy says what made a record: the driver's build and host, the plan it
// ran, and each engine's build and host as the engine described itself.
// Two soaks months apart are compared knowing what ran them, and a number
// is never quoted without its hardware. It is the report's made_by and the
// head of the live record.
type MadeBy struct {
	// Driver is the driver's build and host.
	Driver Program `json:"driver"`
	// Plan is the plan file the driver ran.
	Plan *PlanFile `json:"plan,omitempty"`
	// Engines holds one entry per engine (backend address) of the plan's
	// pools, in the order the pools list them.
	Engines []EngineInfo `json:"engines,omitempty"`
}

// Program is one build of a program of this project and the host it runs
// on. An empty field was not known.
type Program struct {
	// Version is the program's version: the module version of its build
	// ("(devel)" for a build from a checkout without a version stamp), or
	// the version it was built to report.
	Version string `json:"version,omitempty"`
	// VCSRevision is the source revision the program was built from
	// (vcs.revision of its build info), empty for a build without version
	// control information.
	VCSRevision string `json:"vcs_revision,omitempty"`
	// VCSModified says that checkout had uncommitted changes
	// (vcs.modified).
	VCSModified bool `json:"vcs_modified,omitempty"`
	// GoVersion is the Go toolchain it was built with ("go1.26.0").
	GoVersion string `json:"go_version,omitempty"`
	// Host is the host name (os.Hostname): a pod's name on Kubernetes.
	Host string `json:"host,omitempty"`
	// Kernel is the kernel release (uname -r); empty off Linux.
	Kernel string `json:"kernel,omitempty"`
	// CPUs is how many CPUs the process may run on (runtime.NumCPU).
	CPUs int `json:"cpus,omitempty"`
	// GOMAXPROCS is the Go scheduler's share of them, lower than CPUs
	// under a container's CPU limit.
	GOMAXPROCS int `json:"gomaxprocs,omitempty"`
}

// PlanFile is a plan as the driver read it.
type PlanFile struct {
	// Path is the plan's path as the driver was given it.
	Path string `json:"path"`
	// SHA256 is the hex SHA-256 of the file's bytes.
	SHA256 string `json:"sha256"`
	// Text is the file's bytes as a string. Bytes that are not UTF-8 are
	// written as U+FFFD, so SHA256, taken of the bytes, is the one to
	// compare. Files the plan names (body_file, TLS files) are not in it.
	Text string `json:"text"`
}

// EngineInfo is one engine as its Info call described it.
type EngineInfo struct {
	// Backend is the engine's address, as in an execution's backends.
	Backend string `json:"backend"`
	// Node is the engine's --backend-name (a node name), if it has one.
	Node string `json:"node,omitempty"`
	// Program is the engine's build and host; its Host is not known (the
	// engine's Info does not say) and stays empty.
	Program
	// Unknown says the engine did not answer its Info call: nothing of it
	// is known, and Error says why. It never fails the run for this.
	Unknown bool `json:"unknown,omitempty"`
	// Error is why the Info call failed.
	Error string `json:"error,omitempty"`
}

// PlanOf describes the plan file read from path as data.
func PlanOf(path string, data []byte) *PlanFile {
	sum := sha256.Sum256(data)
	return &PlanFile{Path: path, SHA256: hex.EncodeToString(sum[:]), Text: string(data)}
}

// ThisProgram describes the running program and its host: the build info
// of its binary (module version, vcs.revision, vcs.modified, Go version),
// the host name, the kernel release and the CPUs. Version is the main
// module's version, "(devel)" when the build has none.
func ThisProgram() Program {
	p := Program{
		Version:    "(devel)",
		GoVersion:  runtime.Version(),
		Kernel:     kernelRelease(),
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	if h, err := os.Hostname(); err == nil {
		p.Host = h
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		p.setBuild(bi)
	}
	return p
}

// setBuild takes the version, the Go version and the vcs settings from a
// binary's build info.
func (p *Program) setBuild(bi *debug.BuildInfo) {
	if bi.Main.Version != "" {
		p.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		p.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			p.VCSRevision = s.Value
		case "vcs.modified":
			p.VCSModified = s.Value == "true"
		}
	}
}
