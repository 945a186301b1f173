package local

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FaultKind names what a fault does.
type FaultKind string

// The faults soak local can inject.
const (
	// TargetDown makes one fixture target answer 503 for a window.
	TargetDown FaultKind = "target-down"
	// TargetFail makes one fixture target abort a few requests with a TCP
	// reset, unanswered: the next Count requests, or every request of a
	// short window. It happens outside any roll, so its failures are
	// attributed to no roll.
	TargetFail FaultKind = "target-fail"
	// EngineKill sends SIGKILL to one node's engine.
	EngineKill FaultKind = "engine-kill"
	// EngineFreeze stops one node's engine with SIGSTOP, then resumes it
	// with SIGCONT after the window.
	EngineFreeze FaultKind = "engine-freeze"
	// EngineRestart sends SIGKILL to one node's engine and, after the
	// fault's length, starts a new engine process of the same node name
	// at the node's address, as a restarted pod comes back: the driver
	// finds it again and gives it the rest of the schedule.
	EngineRestart FaultKind = "engine-restart"
	// DriverFreeze stops the driver with SIGSTOP, then resumes it.
	DriverFreeze FaultKind = "driver-freeze"
	// DriverKill sends SIGKILL to the driver; after a delay (the fault's
	// length, DefaultDriverRestart without one) the harness starts it
	// again with --resume, unless --no-resume.
	DriverKill FaultKind = "driver-kill"
	// DriverTerm sends SIGTERM to the driver, which detaches (the engines
	// run on); then the harness resumes it as for driver-kill.
	DriverTerm FaultKind = "driver-term"
)

// DefaultDriverRestart is how long after a driver-kill or driver-term the
// harness starts the driver again, when the fault names no delay.
const DefaultDriverRestart = 3 * time.Second

// driverFault says the fault's subject is the driver.
func (k FaultKind) driverFault() bool {
	return k == DriverFreeze || k == DriverKill || k == DriverTerm
}

// Fault is one injected fault, timed from the load start.
type Fault struct {
	Kind FaultKind
	// Subject is the target name (target-down) or node name (engine-*);
	// empty for driver-freeze.
	Subject string
	// At is when the fault begins, after the load start.
	At time.Duration
	// For is how long it lasts (0 for engine-kill, and for a target-fail
	// of a Count); for driver-kill and driver-term, the delay before the
	// driver is started again; for engine-restart, before the engine is.
	For time.Duration
	// Count is how many requests a target-fail fails (0 when it has a
	// window instead).
	Count int
}

// maxFailCount bounds a target-fail's count: a few requests, never a
// window's worth in disguise.
const maxFailCount = 10_000

func (f Fault) String() string {
	s := fmt.Sprintf("%s:%s@%s", f.Kind, f.Subject, f.At)
	switch {
	case f.Count > 0:
		s += "+" + strconv.Itoa(f.Count)
	case f.For > 0:
		s += "+" + f.For.String()
	}
	return s
}

var subjectRE = regexp.MustCompile(`^[a-z0-9-]+$`)

// ParseFault reads a --fault spec:
//
//	target-down:<target>@<start>+<length>
//	target-fail:<target>@<start>+<count>
//	target-fail:<target>@<start>+<length>
//	engine-kill:<node>@<start>
//	engine-freeze:<node>@<start>+<length>
//	engine-restart:<node>@<start>+<down time>
//	driver-freeze:@<start>+<length>
//	driver-kill:@<start>[+<restart delay>]
//	driver-term:@<start>[+<restart delay>]
//
// where start and length are durations such as 10s or 1m30s, and count a
// whole number of requests, 1 to 10000.
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
	if hasLength && f.Kind == TargetFail && length != "" && strings.Trim(length, "0123456789") == "" {
		if f.Count, err = strconv.Atoi(length); err != nil || f.Count < 1 || f.Count > maxFailCount {
			return Fault{}, fmt.Errorf("fault %q: count %q must be 1 to %d requests", spec, length, maxFailCount)
		}
	} else if hasLength {
		if f.For, err = time.ParseDuration(length); err != nil || f.For <= 0 {
			return Fault{}, fmt.Errorf("fault %q: length %q is not a positive duration such as 5s", spec, length)
		}
	}
	switch f.Kind {
	case TargetDown, TargetFail, EngineFreeze, EngineRestart:
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
	case DriverKill, DriverTerm:
		if f.Subject != "" {
			return Fault{}, fmt.Errorf("fault %q: %s takes no subject (%s:@START[+RESTART])", spec, f.Kind, f.Kind)
		}
		if !hasLength {
			f.For = DefaultDriverRestart
		}
	default:
		return Fault{}, fmt.Errorf("fault %q: unknown kind %q (want target-down, target-fail, engine-kill, engine-freeze, engine-restart, driver-freeze, driver-kill or driver-term)", spec, kind)
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
