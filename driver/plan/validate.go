package plan

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sortie-soak/sortie/driver/threshold"
)

var (
	// Scenario and pool names appear in labels ("<scenario>/<target>") and
	// metric names, so they hold no slash, dot or space.
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)
	// Target names as the targets file of the soak harness writes them.
	targetRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	tokenRE       = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	statsPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	countRE       = regexp.MustCompile(`^[1-9][0-9]*$`)
)

// builder applies defaults and checks every rule, turning the raw plan into
// a Plan.
type builder struct {
	errs *errList
	dir  string
	// files caches what was read, so a file inherited by many scenarios is
	// read (and its error reported) once.
	files map[string]fileResult
}

type fileResult struct {
	data []byte
	err  error
}

func (b *builder) fail(at loc, format string, args ...any) { b.errs.add(at, format, args...) }

// failIn reports a rule that involves more than one field, naming the
// scenario it was checked for.
func (b *builder) failIn(scenario string, at loc, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if at.path != "" {
		msg = at.path + ": " + msg
	}
	if scenario != "" {
		msg = fmt.Sprintf("scenario %s: %s", scenario, msg)
	}
	b.errs.addMsg(at, msg)
}

func (b *builder) build(raw *rawPlan) *Plan {
	p := &Plan{}
	if !raw.mapping {
		return p
	}
	switch {
	case !raw.version.set:
		b.fail(raw.root, "version is required: write version: %s", Version)
	case raw.version.ok && raw.version.v != Version:
		b.fail(raw.version.at, "unsupported plan version %q, want %q", raw.version.v, Version)
	}

	pools := map[string]int{} // name -> number of backends known now, 0 for dns
	if !raw.pools.set || (raw.pools.ok && len(raw.pools.v) == 0) {
		b.fail(orRoot(raw.pools.at, raw.root, "pools"), "at least one pool is required")
	}
	seenPool := map[string]loc{}
	for _, rp := range raw.pools.v {
		pl, ok := b.pool(rp)
		if pl.Name == "" {
			continue
		}
		if first, dup := seenPool[pl.Name]; dup {
			b.fail(rp.name.at, "pool %q is already defined at line %d", pl.Name, first.line)
			continue
		}
		seenPool[pl.Name] = rp.name.at
		// A wrong pool's name is still known, so that the scenarios naming
		// it are not reported as well.
		pools[pl.Name] = len(pl.Services)
		if ok {
			p.Pools = append(p.Pools, pl)
		}
	}

	var planThresholds []threshold.Threshold
	if raw.thresholds.good() {
		planThresholds = b.thresholds(raw.thresholds.v)
	}
	planStats := b.stats(raw.stats)

	var defaults *rawScenario
	if raw.defaults.good() {
		defaults = raw.defaults.v
		if defaults.name.set {
			b.fail(defaults.name.at, "defaults cannot set a name: every scenario names itself")
		}
		// Check the defaults on their own too, so that a value no scenario
		// inherits is still checked.
		b.scenario(defaults, nil, nil, nil, nil, true)
	}

	if !raw.scenarios.set || (raw.scenarios.ok && len(raw.scenarios.v) == 0) {
		b.fail(orRoot(raw.scenarios.at, raw.root, "scenarios"), "at least one scenario is required")
	}
	seenScenario := map[string]loc{}
	labels := map[string]loc{}
	for _, rs := range raw.scenarios.v {
		merged := merge(rs, defaults)
		if rs.name.good() {
			if first, dup := seenScenario[rs.name.v]; dup {
				b.fail(rs.name.at, "scenario %q is already defined at line %d", rs.name.v, first.line)
				// Still check the rest of it, with labels of its own.
				b.scenario(merged, pools, planStats, planThresholds, map[string]loc{}, false)
				continue
			}
			seenScenario[rs.name.v] = rs.name.at
		}
		s, ok := b.scenario(merged, pools, planStats, planThresholds, labels, false)
		if ok {
			p.Scenarios = append(p.Scenarios, s)
		}
	}
	return p
}

// orRoot is at when the field was written, else the root with path.
func orRoot(at, root loc, path string) loc {
	if at.line == 0 {
		root.path = path
		return root
	}
	return at
}

func (b *builder) pool(rp *rawPool) (Pool, bool) {
	ok := true
	var pl Pool
	switch {
	case !rp.name.set:
		b.fail(rp.at, "a pool needs a name")
		ok = false
	case rp.name.ok && !nameRE.MatchString(rp.name.v):
		b.fail(rp.name.at, "pool name %q must be letters, digits, _ and -", rp.name.v)
		ok = false
	case rp.name.ok:
		pl.Name = rp.name.v
	default:
		ok = false
	}
	switch {
	case rp.services.set && rp.dns.set:
		b.fail(rp.dns.at, "set services or dns, not both")
		return pl, false
	case !rp.services.set && !rp.dns.set:
		b.fail(rp.at, "a pool needs services: [host:port, ...] or dns: host:port")
		return pl, false
	case rp.dns.set:
		if !rp.dns.ok {
			return pl, false
		}
		host, err := hostPort(rp.dns.v)
		if err != nil {
			b.fail(rp.dns.at, "%v", err)
			return pl, false
		}
		if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			b.fail(rp.dns.at, "dns takes a host name, got the address %s: list addresses in services", host)
			return pl, false
		}
		pl.DNS = rp.dns.v
	default:
		if !rp.services.ok {
			return pl, false
		}
		if len(rp.services.v) == 0 {
			b.fail(rp.services.at, "services must list at least one host:port")
			return pl, false
		}
		seen := map[string]bool{}
		for _, s := range rp.services.v {
			if !s.ok {
				ok = false
				continue
			}
			if _, err := hostPort(s.v); err != nil {
				b.fail(s.at, "%v", err)
				ok = false
				continue
			}
			if seen[s.v] {
				b.fail(s.at, "%s is listed twice", s.v)
				ok = false
				continue
			}
			seen[s.v] = true
			pl.Services = append(pl.Services, s.v)
		}
	}
	return pl, ok
}

// hostPort checks host:port and returns the host.
func hostPort(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return "", fmt.Errorf("%q is not host:port", s)
	}
	if strings.ContainsAny(host, " /\t") {
		return "", fmt.Errorf("%q is not host:port", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	}
	return host, nil
}

// merge returns s with its unset fields filled from defaults.
func merge(s, defaults *rawScenario) *rawScenario {
	if defaults == nil {
		return s
	}
	m := *s
	fill(&m.pool, defaults.pool)
	// target and targets fill as one: a scenario that names either has
	// chosen its targets.
	if !m.target.set && !m.targets.set {
		m.target, m.targets = defaults.target, defaults.targets
	}
	fill(&m.method, defaults.method)
	fill(&m.headers, defaults.headers)
	if !m.body.set && !m.bodyFile.set {
		m.body, m.bodyFile = defaults.body, defaults.bodyFile
	}
	fill(&m.proto, defaults.proto)
	fill(&m.connections, defaults.connections)
	fill(&m.concurrency, defaults.concurrency)
	fill(&m.maxPending, defaults.maxPending)
	fill(&m.timeout, defaults.timeout)
	fill(&m.requestTimeout, defaults.requestTimeout)
	fill(&m.maxLateness, defaults.maxLateness)
	fill(&m.maxStreams, defaults.maxStreams)
	fill(&m.grpc, defaults.grpc)
	fill(&m.websocket, defaults.websocket)
	fill(&m.tls, defaults.tls)
	fill(&m.stats, defaults.stats)
	fill(&m.thresholds, defaults.thresholds)
	fill(&m.tcp, defaults.tcp)
	fill(&m.udp, defaults.udp)

	// The executor fills field by field, but only with the fields its type
	// uses: a default staircase's stages do not leak into a constant-rate
	// scenario.
	e, de := m.executor, defaults.executor
	fill(&e.block, de.block)
	fill(&e.typ, de.typ)
	switch e.typ.v {
	case Staircase:
		fill(&e.stages, de.stages)
	case RampingRate:
		fill(&e.rampTime, de.rampTime)
		fallthrough
	default:
		fill(&e.rate, de.rate)
		fill(&e.duration, de.duration)
	}
	fill(&e.perBackend, de.perBackend)
	fill(&e.openLoop, de.openLoop)
	m.executor = e
	return &m
}

// scenario checks one scenario (or, with isDefaults, the defaults on their
// own: then nothing is required and nothing across fields is checked).
// pools maps each pool to its number of backends when known now (0 for a
// dns pool).
func (b *builder) scenario(rs *rawScenario, pools map[string]int, planStats *Stats, planThresholds []threshold.Threshold, labels map[string]loc, isDefaults bool) (Scenario, bool) {
	ok := true
	bad := func() { ok = false }
	s := Scenario{pos: scenarioPos{at: rs.at, pool: rs.pool.at}}

	// name
	switch {
	case isDefaults:
	case !rs.name.set:
		b.fail(rs.at, "a scenario needs a name")
		bad()
	case !rs.name.ok:
		bad()
	case !nameRE.MatchString(rs.name.v):
		b.fail(rs.name.at, "scenario name %q must be letters, digits, _ and -", rs.name.v)
		bad()
	default:
		s.Name = rs.name.v
	}
	ctx := s.Name

	// pool
	switch {
	case rs.pool.set && !rs.pool.ok:
		bad()
	case isDefaults:
		s.Pool = rs.pool.v
	case !rs.pool.set:
		b.failIn(ctx, rs.at, "pool is required")
		bad()
	default:
		if _, known := pools[rs.pool.v]; !known {
			b.failIn(ctx, rs.pool.at, "no pool is named %q", rs.pool.v)
			bad()
		}
		s.Pool = rs.pool.v
	}

	// splittable says the values the rate arithmetic reads are good, so it
	// is checked (and reported) even when something else is wrong.
	splittable := true
	notSplittable := func() { ok, splittable = false, false }

	// targets
	if !b.targets(rs, &s, isDefaults) {
		notSplittable()
	}

	// method
	s.Method = DefaultMethod
	if rs.method.set {
		switch {
		case !rs.method.ok:
			bad()
		case !tokenRE.MatchString(rs.method.v):
			b.fail(rs.method.at, "%q is not an HTTP method", rs.method.v)
			bad()
		default:
			s.Method = rs.method.v
		}
	}

	// headers
	for _, h := range rs.headers.v {
		if !h.ok {
			bad()
			continue
		}
		hd, err := parseHeader(h.v)
		if err != nil {
			b.fail(h.at, "%v", err)
			bad()
			continue
		}
		s.Headers = append(s.Headers, hd)
	}
	if rs.headers.set && !rs.headers.ok {
		bad()
	}

	// body
	switch {
	case rs.body.set && rs.bodyFile.set:
		b.fail(rs.bodyFile.at, "set body or body_file, not both")
		bad()
	case rs.body.set:
		if !rs.body.ok {
			bad()
		} else if len(rs.body.v) > MaxBody {
			b.fail(rs.body.at, "the body is %d bytes, more than the %d an engine accepts", len(rs.body.v), MaxBody)
			bad()
		} else {
			s.Body = []byte(rs.body.v)
		}
	case rs.bodyFile.set:
		if !rs.bodyFile.ok {
			bad()
			break
		}
		data, err := b.readFile(rs.bodyFile.v)
		switch {
		case err != nil:
			b.fail(rs.bodyFile.at, "%v", err)
			bad()
		default:
			s.Body, s.BodyFile = data, rs.bodyFile.v
		}
	}

	// protocol
	if !b.protocol(rs, &s) {
		bad()
	}

	// client settings
	s.Connections = DefaultConnections
	if v, good := b.uint32Field(rs.connections, 1); good {
		s.Connections = v
	} else if rs.connections.set {
		bad()
	}
	s.Concurrency = DefaultConcurrency
	if c := rs.concurrency; c.set {
		switch {
		case !c.ok:
			notSplittable()
		case c.v == "auto":
			b.fail(c.at, "concurrency \"auto\" is not supported: the rate is divided by the number of workers, so write it, such as \"1\"")
			notSplittable()
		case !countRE.MatchString(c.v):
			b.fail(c.at, "concurrency must be a positive whole number written as a string, such as \"1\", got %q", c.v)
			notSplittable()
		default:
			n, err := strconv.ParseUint(c.v, 10, 32)
			if err != nil || n > MaxConcurrency {
				b.fail(c.at, "concurrency %s is more than the %d workers an engine runs per execution", c.v, MaxConcurrency)
				notSplittable()
			} else {
				s.Concurrency = uint32(n)
			}
		}
	}
	if v, good := b.uint32Field(rs.maxPending, 0); good {
		s.MaxPendingRequests = v
	} else if rs.maxPending.set {
		bad()
	}
	// grpc, websocket: after method, protocol and concurrency, which
	// they constrain.
	if !b.modes(rs, &s, isDefaults) {
		bad()
	}
	s.pos.protocol, s.pos.grpc, s.pos.websocket = rs.proto.at, rs.grpc.at, rs.websocket.at
	s.Timeout = DefaultTimeout
	if t := rs.timeout; t.set {
		switch {
		case !t.ok:
			bad()
		case t.v <= 0:
			b.fail(t.at, "timeout must be positive, got %v", t.v)
			bad()
		default:
			s.Timeout = t.v
		}
	}
	// Off unless set: the older stack had neither, and a plan of it
	// must mean what it meant.
	for _, o := range []struct {
		v    val[time.Duration]
		name string
		to   *time.Duration
	}{{rs.requestTimeout, "request_timeout", &s.RequestTimeout}, {rs.maxLateness, "max_lateness", &s.MaxLateness}} {
		switch {
		case !o.v.set:
		case !o.v.ok:
			bad()
		case o.v.v <= 0:
			b.fail(o.v.at, "%s must be positive (leave it out for none), got %v", o.name, o.v.v)
			bad()
		default:
			*o.to = o.v.v
		}
	}

	// tls
	if rs.tls.set {
		t, good := b.tls(rs.tls)
		if !good {
			bad()
		}
		s.TLS = t
	}

	// stats: the scenario's (or defaults') block replaces the plan's whole.
	s.Stats = planStats
	if rs.stats.set {
		s.Stats = b.stats(rs.stats)
		if s.Stats == nil {
			bad()
		}
	}

	// tcp and udp: the targets' scheme decides, after every HTTP default
	// is set, so that it can clear them.
	if !b.transport(rs, &s, isDefaults) {
		bad()
	}

	// executor
	if !b.executor(rs, &s, ctx, isDefaults) {
		notSplittable()
	} else if !isDefaults && !b.checkSpan(&s, ctx) {
		bad()
	}

	// thresholds
	if rs.thresholds.good() {
		s.Thresholds = b.thresholds(rs.thresholds.v)
		if len(s.Thresholds) != len(rs.thresholds.v) {
			bad()
		}
	} else if rs.thresholds.set {
		bad()
	}
	if isDefaults {
		return s, ok
	}
	s.Thresholds = append(s.Thresholds, planThresholds...)

	// Labels are unique by construction (names are unique and hold no
	// slash); checked anyway, since the report keys executions by label.
	if ok && s.Name != "" {
		for _, l := range s.labels() {
			if first, dup := labels[l]; dup {
				b.failIn(ctx, rs.name.at, "execution label %q is already used by the scenario at line %d", l, first.line)
				return s, false
			}
			labels[l] = rs.name.at
		}
	}
	if !splittable {
		return s, false
	}

	// Rate arithmetic, with the backends known now: a services pool's
	// count, or 1 for a dns pool (a split that fails over one backend fails
	// over any number). Compile checks again with the resolved pool.
	n := pools[s.Pool]
	if s.Executor.PerBackend || n == 0 {
		n = 1
	}
	if _, errs := s.split(n); len(errs) > 0 {
		for _, e := range errs {
			b.failIn(ctx, e.at, "%s", e.msg)
		}
		return s, false
	}
	return s, ok && s.Name != ""
}

func (b *builder) uint32Field(v val[int64], least int64) (uint32, bool) {
	if !v.good() {
		return 0, false
	}
	if v.v < least || v.v > math.MaxUint32 {
		b.fail(v.at, "must be from %d to %d, got %d", least, uint32(math.MaxUint32), v.v)
		return 0, false
	}
	return uint32(v.v), true
}

func (b *builder) targets(rs *rawScenario, s *Scenario, isDefaults bool) bool {
	switch {
	case rs.target.set && rs.targets.set:
		b.fail(rs.targets.at, "set target or targets, not both")
		return false
	case rs.target.set:
		if !rs.target.ok {
			return false
		}
		if err := checkURL(rs.target.v); err != nil {
			b.fail(rs.target.at, "%v", err)
			return false
		}
		s.Targets = []Target{{URL: rs.target.v, Weight: 1}}
		return true
	case rs.targets.set:
		if !rs.targets.ok {
			return false
		}
		if len(rs.targets.v) == 0 {
			b.fail(rs.targets.at, "targets must list at least one {name, url, weight}")
			return false
		}
		ok := true
		seen := map[string]loc{}
		for _, rt := range rs.targets.v {
			t := Target{Weight: 1}
			switch {
			case !rt.name.set:
				b.fail(rt.at, "a target needs a name")
				ok = false
			case !rt.name.ok:
				ok = false
			case !targetRE.MatchString(rt.name.v):
				b.fail(rt.name.at, "target name %q must be lowercase letters, digits and - (not at either end)", rt.name.v)
				ok = false
			default:
				if first, dup := seen[rt.name.v]; dup {
					b.fail(rt.name.at, "target %q is already listed at line %d", rt.name.v, first.line)
					ok = false
				}
				seen[rt.name.v] = rt.name.at
				t.Name = rt.name.v
			}
			switch {
			case !rt.url.set:
				b.fail(rt.at, "a target needs a url")
				ok = false
			case !rt.url.ok:
				ok = false
			default:
				if err := checkURL(rt.url.v); err != nil {
					b.fail(rt.url.at, "%v", err)
					ok = false
				}
				t.URL = rt.url.v
			}
			if rt.weight.set {
				if w, good := b.uint32Field(rt.weight, 1); good {
					t.Weight = w
				} else {
					ok = false
				}
			}
			if rt.thresholds.good() {
				t.Thresholds = b.thresholds(rt.thresholds.v)
				if len(t.Thresholds) != len(rt.thresholds.v) {
					ok = false
				}
			} else if rt.thresholds.set {
				ok = false
			}
			s.Targets = append(s.Targets, t)
		}
		return ok
	case isDefaults:
		return true
	default:
		b.failIn(s.Name, rs.at, "a target (url) or targets ([{name, url, weight}]) is required")
		return false
	}
}

// checkURL accepts an absolute http or https URL with a host, or a tcp,
// tcps or udp one with a host and a port.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", s, errors.Unwrap(err))
	}
	switch u.Scheme {
	case "http", "https":
	case "tcp", "tcps", "udp":
		if err := checkStreamURL(u, s); err != nil {
			return err
		}
	default:
		return fmt.Errorf("url %q must be http://, https://, tcp://, tcps:// or udp://", s)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return fmt.Errorf("url %q has no host", s)
	}
	if u.User != nil {
		// The engine refuses it, once the load has started: said here,
		// before any, without repeating the password.
		return fmt.Errorf("url %q carries user information, which the engine refuses; send an Authorization header instead", u.Redacted())
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("url %q: port %q is not a number from 1 to 65535", s, p)
		}
	}
	return nil
}

// parseHeader splits "Name: value".
func parseHeader(s string) (Header, error) {
	name, value, found := strings.Cut(s, ":")
	if !found {
		return Header{}, fmt.Errorf("header %q must be written \"Name: value\"", s)
	}
	if !tokenRE.MatchString(name) {
		return Header{}, fmt.Errorf("header %q: %q is not a header name", s, name)
	}
	value = strings.Trim(value, " \t")
	if strings.ContainsAny(value, "\r\n\x00") {
		return Header{}, fmt.Errorf("header %q: a value holds no line break or NUL", name)
	}
	switch strings.ToLower(name) {
	case "content-length", "transfer-encoding":
		return Header{}, fmt.Errorf("header %s is set by the engine from the body", name)
	}
	return Header{Name: name, Value: value}, nil
}

func (b *builder) readFile(name string) ([]byte, error) {
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(b.dir, path)
	}
	if r, ok := b.files[path]; ok {
		return r.data, r.err
	}
	data, err := readRegular(path, MaxBody)
	if err != nil {
		err = fmt.Errorf("read %s: %w", name, err)
	}
	if b.files == nil {
		b.files = map[string]fileResult{}
	}
	b.files[path] = fileResult{data, err}
	return data, err
}

// readRegular reads a regular file of at most limit bytes. A device or a
// pipe named by a plan (/dev/zero) would never end, so it is refused.
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, unwrapPath(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%d bytes, more than the %d an engine accepts", fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("more than the %d bytes an engine accepts", limit)
	}
	return data, nil
}

// unwrapPath drops the path os.ReadFile repeats (the message names the file
// as the plan wrote it).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (b *builder) tls(v val[*rawTLS]) (*TLS, bool) {
	if !v.good() {
		return nil, false
	}
	r := v.v
	t := &TLS{}
	ok := true
	read := func(f val[string]) ([]byte, string) {
		if !f.set {
			return nil, ""
		}
		if !f.ok {
			ok = false
			return nil, ""
		}
		data, err := b.readFile(f.v)
		if err != nil {
			b.fail(f.at, "%v", err)
			ok = false
			return nil, ""
		}
		return data, f.v
	}
	t.CAPEM, t.CAFile = read(r.caFile)
	if t.CAPEM != nil && !x509.NewCertPool().AppendCertsFromPEM(t.CAPEM) {
		b.fail(r.caFile.at, "%s holds no PEM certificate", r.caFile.v)
		ok = false
	}
	if r.certFile.set != r.keyFile.set {
		at := r.certFile.at
		if !r.certFile.set {
			at = r.keyFile.at
		}
		b.fail(at, "cert_file and key_file go together")
		ok = false
	} else {
		t.CertPEM, t.CertFile = read(r.certFile)
		t.KeyPEM, t.KeyFile = read(r.keyFile)
		if t.CertPEM != nil && t.KeyPEM != nil {
			if _, err := tls.X509KeyPair(t.CertPEM, t.KeyPEM); err != nil {
				b.fail(r.certFile.at, "%s and %s are not a certificate and its key: %v", r.certFile.v, r.keyFile.v, err)
				ok = false
			}
		}
	}
	if r.serverName.set {
		if !r.serverName.ok {
			ok = false
		} else if strings.ContainsAny(r.serverName.v, " /:\t") || r.serverName.v == "" {
			b.fail(r.serverName.at, "%q is not a server name", r.serverName.v)
			ok = false
		} else {
			t.ServerName = r.serverName.v
		}
	}
	if r.insecure.set {
		if !r.insecure.ok {
			ok = false
		}
		t.InsecureSkipVerify = r.insecure.v
		if t.InsecureSkipVerify && r.caFile.set {
			b.fail(r.insecure.at, "insecure_skip_verify would ignore ca_file: set one of them")
			ok = false
		}
	}
	return t, ok
}

// stats checks a stats block; nil when it is absent or wrong.
func (b *builder) stats(v val[*rawStats]) *Stats {
	if !v.good() {
		return nil
	}
	r := v.v
	s := &Stats{Prefix: DefaultStatsPrefix, Backend: StatsBackendName}
	ok := true
	switch {
	case !r.address.set:
		b.fail(r.at, "stats needs an address: the statsd server's IP and port")
		ok = false
	case !r.address.ok:
		ok = false
	default:
		if ap, err := netip.ParseAddrPort(r.address.v); err != nil || ap.Port() == 0 {
			b.fail(r.address.at, "%q must be an IP address and port such as 10.96.14.7:8125 (engines do not resolve statsd names)", r.address.v)
			ok = false
		} else {
			s.Address = r.address.v
		}
	}
	if r.prefix.set {
		switch {
		case !r.prefix.ok:
			ok = false
		case !statsPrefixRE.MatchString(r.prefix.v):
			b.fail(r.prefix.at, "prefix %q must be letters, digits, _, . and -, starting with a letter, digit or _", r.prefix.v)
			ok = false
		default:
			s.Prefix = r.prefix.v
		}
	}
	if r.backend.set {
		switch {
		case !r.backend.ok:
			ok = false
		case r.backend.v != StatsBackendName && r.backend.v != StatsBackendAddress:
			b.fail(r.backend.at, "backend must be %q (the engine's --backend-name) or %q, got %q", StatsBackendName, StatsBackendAddress, r.backend.v)
			ok = false
		default:
			s.Backend = r.backend.v
		}
	}
	if r.flush.set {
		switch {
		case !r.flush.ok:
			ok = false
		case r.flush.v < MinFlushInterval:
			b.fail(r.flush.at, "flush_interval must be at least %v, got %v", MinFlushInterval, r.flush.v)
			ok = false
		default:
			s.FlushInterval = r.flush.v
		}
	}
	if !ok {
		return nil
	}
	return s
}

func (b *builder) thresholds(exprs []val[string]) []threshold.Threshold {
	var out []threshold.Threshold
	for _, e := range exprs {
		if !e.ok {
			continue
		}
		t, err := threshold.Parse(e.v)
		if err != nil {
			b.fail(e.at, "threshold %q: %v", e.v, err)
			continue
		}
		out = append(out, t)
	}
	return out
}

func (b *builder) executor(rs *rawScenario, s *Scenario, ctx string, isDefaults bool) bool {
	e := rs.executor
	if !e.block.set {
		if isDefaults {
			return true
		}
		b.failIn(ctx, rs.at, "executor is required")
		return false
	}
	ok := true
	x := &s.Executor
	if e.perBackend.good() {
		x.PerBackend = e.perBackend.v
	} else if e.perBackend.set {
		ok = false
	}
	if e.openLoop.good() {
		x.OpenLoop = e.openLoop.v
	} else if e.openLoop.set {
		ok = false
	}
	switch {
	case !e.typ.set:
		if isDefaults {
			return ok
		}
		b.failIn(ctx, e.block.at, "executor type is required: %s, %s or %s", ConstantRate, RampingRate, Staircase)
		return false
	case !e.typ.ok:
		return false
	case e.typ.v != ConstantRate && e.typ.v != RampingRate && e.typ.v != Staircase:
		b.fail(e.typ.at, "executor type must be %s, %s or %s, got %q", ConstantRate, RampingRate, Staircase, e.typ.v)
		return false
	}
	x.Type = e.typ.v
	s.pos.rate, s.pos.duration, s.pos.ramp = e.rate.at, e.duration.at, e.rampTime.at

	rate := func(v val[int64]) (uint32, bool) {
		if !v.good() {
			return 0, false
		}
		if v.v < 1 || v.v > math.MaxUint32 {
			b.fail(v.at, "rate must be from 1 to %d requests per second, got %d", uint32(math.MaxUint32), v.v)
			return 0, false
		}
		return uint32(v.v), true
	}
	duration := func(v val[time.Duration], what string) (time.Duration, bool) {
		if !v.good() {
			return 0, false
		}
		if v.v <= 0 {
			b.fail(v.at, "%s must be positive, got %v", what, v.v)
			return 0, false
		}
		return v.v, true
	}
	needed := func(v val[int64], what string) {
		if !v.set && !isDefaults {
			b.failIn(ctx, e.block.at, "a %s executor needs a %s", x.Type, what)
		}
	}
	neededDur := func(v val[time.Duration], what string) {
		if !v.set && !isDefaults {
			b.failIn(ctx, e.block.at, "a %s executor needs a %s", x.Type, what)
		}
	}
	only := func(set bool, at loc, what, owner string) {
		if set {
			b.fail(at, "%s is only for the %s executor", what, owner)
			ok = false
		}
	}

	switch x.Type {
	case ConstantRate, RampingRate:
		needed(e.rate, "rate")
		neededDur(e.duration, "duration")
		if !e.rate.set || !e.duration.set {
			ok = ok && isDefaults
		}
		if r, good := rate(e.rate); good {
			x.Rate = r
		} else if e.rate.set {
			ok = false
		}
		if d, good := duration(e.duration, "duration"); good {
			x.Duration = d
		} else if e.duration.set {
			ok = false
		}
		only(e.stages.set, e.stages.at, "stages", Staircase)
		if x.Type == ConstantRate {
			only(e.rampTime.set, e.rampTime.at, "ramp_time", RampingRate)
			break
		}
		neededDur(e.rampTime, "ramp_time")
		if !e.rampTime.set {
			ok = ok && isDefaults
		}
		if d, good := duration(e.rampTime, "ramp_time"); good {
			x.RampTime = d
			if x.Duration > 0 && d > x.Duration {
				b.failIn(ctx, e.rampTime.at, "ramp_time %v is longer than duration %v (duration includes the ramp)", d, x.Duration)
				ok = false
			}
		} else if e.rampTime.set {
			ok = false
		}
	case Staircase:
		if e.rate.set || e.duration.set {
			at := e.rate.at
			if !e.rate.set {
				at = e.duration.at
			}
			b.fail(at, "a staircase sets rate and duration on each stage, not on the executor")
			ok = false
		}
		only(e.rampTime.set, e.rampTime.at, "ramp_time", RampingRate)
		switch {
		case !e.stages.set:
			if !isDefaults {
				b.failIn(ctx, e.block.at, "a staircase executor needs stages: [{rate, duration}, ...]")
				ok = false
			}
		case !e.stages.ok:
			ok = false
		case len(e.stages.v) == 0:
			b.fail(e.stages.at, "a staircase needs at least one stage")
			ok = false
		}
		for _, st := range e.stages.v {
			var stage ExecutorStage
			if !st.rate.set {
				b.fail(st.at, "a stage needs a rate")
				ok = false
			} else if r, good := rate(st.rate); good {
				stage.Rate = r
			} else {
				ok = false
			}
			if !st.duration.set {
				b.fail(st.at, "a stage needs a duration")
				ok = false
			} else if d, good := duration(st.duration, "duration"); good {
				stage.Duration = d
			} else {
				ok = false
			}
			x.Stages = append(x.Stages, stage)
			s.pos.stages = append(s.pos.stages, stagePos{rate: st.rate.at, duration: st.duration.at})
		}
	}
	return ok
}

// drainNote names the TCP or UDP drain a span includes, if any.
func drainNote(s *Scenario) string {
	if d := s.messageDrain(); d > 0 {
		return fmt.Sprintf(" and a %s drain of %v", s.Mode, d)
	}
	return ""
}

// checkSpan refuses a scenario whose executions the driver cannot time:
// each one's duration + timeout, and a staircase's stages together, must
// be at most MaxSpan, so that no deadline the driver sets (that span plus
// its drain and grace) overflows.
func (b *builder) checkSpan(s *Scenario, ctx string) bool {
	x := s.Executor
	// The TCP and UDP modes' drain counts as timeout (see messageDrain),
	// summed without overflow.
	timeout := s.Timeout
	if d := s.messageDrain(); d > MaxSpan-timeout {
		timeout = MaxSpan + 1
	} else {
		timeout += d
	}
	// fits says d + timeout is at most MaxSpan, without a sum that could
	// overflow on the way.
	fits := func(d time.Duration) bool { return d <= MaxSpan && timeout <= MaxSpan-d }
	if x.Type != Staircase {
		if !fits(x.Duration) {
			b.failIn(ctx, s.pos.duration, "duration %v with timeout %v%s is too long: duration + timeout is at most %v", x.Duration, s.Timeout, drainNote(s), MaxSpan)
			return false
		}
		return true
	}
	var total time.Duration
	for i, st := range x.Stages {
		if !fits(st.Duration) || !fits(total+min(st.Duration, MaxSpan)) {
			b.failIn(ctx, s.pos.stages[i].duration, "the stages up to this one with timeout %v%s are too long: the stages + timeout are at most %v", s.Timeout, drainNote(s), MaxSpan)
			return false
		}
		total += st.Duration
	}
	return true
}

// labels lists the scenario's execution labels in run order.
func (s *Scenario) labels() []string {
	var out []string
	for _, st := range s.stageNames() {
		for _, t := range s.Targets {
			out = append(out, label(s.Name, t.Name, st))
		}
	}
	return out
}

// stageNames is [""] for a single-stage executor, else stage-1, stage-2, ...
func (s *Scenario) stageNames() []string {
	if s.Executor.Type != Staircase {
		return []string{""}
	}
	out := make([]string, len(s.Executor.Stages))
	for i := range out {
		out[i] = fmt.Sprintf("stage-%d", i+1)
	}
	return out
}

func label(scenario, target, stage string) string {
	l := scenario
	if target != "" {
		l += "/" + target
	}
	if stage != "" {
		l += "/" + stage
	}
	return l
}
