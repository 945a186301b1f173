package soak

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// FaultKind names what a fault does.
type FaultKind string

// The faults soak local can inject.
const (
	// TargetDown makes one fixture target answer 503 for a window.
	TargetDown FaultKind = "target-down"
	// EngineKill sends SIGKILL to one node's engine.
	EngineKill FaultKind = "engine-kill"
	// EngineFreeze stops one node's engine with SIGSTOP, then resumes it
	// with SIGCONT after the window.
	EngineFreeze FaultKind = "engine-freeze"
	// DriverFreeze stops the driver with SIGSTOP, then resumes it.
	DriverFreeze FaultKind = "driver-freeze"
)

// Fault is one injected fault, timed from the load start.
type Fault struct {
	Kind FaultKind
	// Subject is the target name (target-down) or node name (engine-*);
	// empty for driver-freeze.
	Subject string
	// At is when the fault begins, after the load start.
	At time.Duration
	// For is how long it lasts (0 for engine-kill).
	For time.Duration
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s:%s@%s", f.Kind, f.Subject, f.At)
	if f.For > 0 {
		s += "+" + f.For.String()
	}
	return s
}

var subjectRE = regexp.MustCompile(`^[a-z0-9-]+$`)

// ParseFault reads a --fault spec:
//
//	target-down:<target>@<start>+<length>
//	engine-kill:<node>@<start>
//	engine-freeze:<node>@<start>+<length>
//	driver-freeze:@<start>+<length>
//
// where start and length are durations such as 10s or 1m30s.
func ParseFault(spec string) (Fault, error) {
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok {
		return Fault{}, fmt.Errorf("fault %q: want KIND:SUBJECT@START[+LENGTH]", spec)
	}
	f := Fault{Kind: FaultKind(kind)}
	subject, when, ok := strings.Cut(rest, "@")
	if !ok {
		return Fault{}, fmt.Errorf("fault %q: missing @START", spec)
	}
	f.Subject = subject
	start, length, hasLength := strings.Cut(when, "+")
	var err error
	if f.At, err = time.ParseDuration(start); err != nil || f.At < 0 {
		return Fault{}, fmt.Errorf("fault %q: start %q is not a duration such as 10s", spec, start)
	}
	if hasLength {
		if f.For, err = time.ParseDuration(length); err != nil || f.For <= 0 {
			return Fault{}, fmt.Errorf("fault %q: length %q is not a positive duration such as 5s", spec, length)
		}
	}
	switch f.Kind {
	case TargetDown, EngineFreeze:
		if !hasLength {
			return Fault{}, fmt.Errorf("fault %q: %s needs a length (@START+LENGTH)", spec, f.Kind)
		}
		if !subjectRE.MatchString(f.Subject) {
			return Fault{}, fmt.Errorf("fault %q: %s needs a name of [a-z0-9-]", spec, f.Kind)
		}
	case EngineKill:
		if hasLength {
			return Fault{}, fmt.Errorf("fault %q: engine-kill takes no length", spec)
		}
		if !subjectRE.MatchString(f.Subject) {
			return Fault{}, fmt.Errorf("fault %q: engine-kill needs a node name such as node-b", spec)
		}
	case DriverFreeze:
		if f.Subject != "" {
			return Fault{}, fmt.Errorf("fault %q: driver-freeze takes no subject (driver-freeze:@START+LENGTH)", spec)
		}
		if !hasLength {
			return Fault{}, fmt.Errorf("fault %q: driver-freeze needs a length (@START+LENGTH)", spec)
		}
	default:
		return Fault{}, fmt.Errorf("fault %q: unknown kind %q (want target-down, engine-kill, engine-freeze or driver-freeze)", spec, kind)
	}
	return f, nil
}

// faultList is a repeatable --fault flag.
type faultList []Fault

func (l *faultList) String() string {
	s := make([]string, len(*l))
	for i, f := range *l {
		s[i] = f.String()
	}
	return strings.Join(s, ",")
}

func (l *faultList) Set(v string) error {
	f, err := ParseFault(v)
	if err != nil {
		return err
	}
	*l = append(*l, f)
	return nil
}
