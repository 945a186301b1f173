package engine

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	enginev1 "github.com/sortie-soak/sortie/engine/api/v1"
	"github.com/sortie-soak/sortie/engine/pacer"
)

// Defaults and limits of an execution.
const (
	defaultConnections   = 100
	defaultTimeout       = 30 * time.Second
	defaultFlushInterval = 10 * time.Second
	defaultUserAgent     = "sortie"
	// maxWorkers bounds workers per execution; each is a goroutine with
	// its own pool and histograms.
	maxWorkers = 256
	// maxStartPast is how far in the past a start time may lie; a later
	// start is a clock or driver problem, refused rather than caught up.
	maxStartPast = 10 * time.Second
	// maxStartAhead is how far in the future a start time may lie.
	maxStartAhead = time.Hour
	// minProgressInterval keeps progress from flooding the stream.
	minProgressInterval = 10 * time.Millisecond
	// lateTolerance is how late a send may be before it counts in
	// benchmark.late_sends.
	lateTolerance = time.Millisecond
	// statsdSamples bounds the latency samples per worker per statsd
	// flush.
	statsdSamples = 100
)

// spec is a validated ExecuteRequest with everything the hot path needs
// prepared: the request bytes, the dial address, the TLS config.
type spec struct {
	id, label string
	runID     string
	host      string // the URL's host, for the allowlist
	addr      string // host:port to dial
	tls       *tls.Config
	request   []byte // the whole serialised request
	head      bool
	// h2 is the request as HTTP/2 sends it (protocol HTTP2); nil for
	// HTTP/1.1, which sends request.
	h2      *h2Spec
	pacer   pacer.Pacer
	workers int
	start   time.Time // wall clock instant of request 0
	// first is the index of each worker's first request: the first due
	// at or after start_offset (0 without one). Requests before it are
	// not this execution's.
	first       uint64
	openLoop    bool
	connections int
	maxPending  int
	timeout     time.Duration
	// requestTimeout bounds each response from its request's write; 0:
	// none.
	requestTimeout time.Duration
	// maxLateness: a request due longer ago than this when the pacer
	// reaches it is dropped, not sent; 0: none.
	maxLateness time.Duration
	progress    time.Duration
	stats       *statsSpec
	// The timeline: bucket width, bucket count, failure sample budget.
	bucketWidth  time.Duration
	buckets      uint32
	sampleBudget int
	// mode is modeHTTP, modeTCP or modeUDP, as the url's scheme says, or
	// modeWS for an http(s) url with websocket settings; in the last three
	// message is what each message carries, and tcp, udp or ws its
	// settings.
	mode    string
	message []byte
	tcp     tcpSpec
	udp     udpSpec
	ws      *wsSpec
}

// Modes of an execution.
const (
	modeHTTP = "http"
	modeTCP  = "tcp"
	modeUDP  = "udp"
	modeWS   = "websocket"
)

type statsSpec struct {
	addr          string
	names         string // "<prefix>.<scenario>.<target>.<backend>.cluster."
	flushInterval time.Duration
}

// fieldErr names the request field a problem is about.
func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

// parseSpec validates req at wall-clock time now. It returns a gRPC status
// error: INVALID_ARGUMENT listing every problem, or FAILED_PRECONDITION for
// a statsd name the engine cannot give.
func parseSpec(req *enginev1.ExecuteRequest, now time.Time, backendName string) (*spec, error) {
	var errs []error
	s := &spec{
		id:          req.GetExecutionId(),
		label:       req.GetLabel(),
		runID:       req.GetRunId(),
		openLoop:    req.GetOpenLoop(),
		connections: int(req.GetConnections()),
		maxPending:  int(req.GetMaxPendingRequests()),
		workers:     int(req.GetWorkers()),
	}
	if s.id == "" {
		errs = append(errs, fieldErr("execution_id", "must not be empty"))
	}
	if s.label == "" {
		s.label = s.id
	}
	if s.workers == 0 {
		s.workers = 1
	}
	if s.workers > maxWorkers {
		errs = append(errs, fieldErr("workers", "%d is more than %d", s.workers, maxWorkers))
	}
	if s.connections == 0 {
		s.connections = defaultConnections
	}
	if s.maxPending < 1 {
		s.maxPending = 1
	}

	u, host, err := parseTarget(req.GetUrl())
	if err != nil {
		errs = append(errs, err)
	}

	// Rate, duration and ramp.
	duration, err := durationField("duration", req.GetDuration(), 0)
	if err != nil {
		errs = append(errs, err)
	}
	ramp, err := durationField("ramp", req.GetRamp(), 0)
	if err != nil {
		errs = append(errs, err)
	}
	switch {
	case req.GetRate() == 0:
		errs = append(errs, fieldErr("rate", "must be at least 1 request per second"))
	case duration <= 0:
		errs = append(errs, fieldErr("duration", "must be positive"))
	case ramp < 0:
		errs = append(errs, fieldErr("ramp", "must not be negative"))
	case ramp > duration:
		errs = append(errs, fieldErr("ramp", "%v is longer than duration %v", ramp, duration))
	default:
		p, err := pacer.New(req.GetRate(), duration, ramp)
		if err != nil {
			errs = append(errs, fieldErr("rate", "%v (the planned count must be whole, it is never rounded)", err))
		}
		s.pacer = p
	}

	s.timeout, err = durationField("timeout", req.GetTimeout(), defaultTimeout)
	if err != nil {
		errs = append(errs, err)
	} else if s.timeout <= 0 {
		errs = append(errs, fieldErr("timeout", "must be positive"))
	}
	// Both off by default, as in the older stack, which had neither.
	if s.requestTimeout, err = durationField("request_timeout", req.GetRequestTimeout(), 0); err != nil {
		errs = append(errs, err)
	}
	if s.maxLateness, err = durationField("max_lateness", req.GetMaxLateness(), 0); err != nil {
		errs = append(errs, err)
	}
	s.progress, err = durationField("progress_interval", req.GetProgressInterval(), 0)
	if err != nil {
		errs = append(errs, err)
	} else if s.progress != 0 && s.progress < minProgressInterval {
		errs = append(errs, fieldErr("progress_interval", "%v is shorter than %v", s.progress, minProgressInterval))
	}

	if err := parseTimeline(req, s); err != nil {
		errs = append(errs, err)
	}

	offset, err := parseOffset(req, s.pacer)
	if err != nil {
		errs = append(errs, err)
	}
	if s.pacer.Planned() > 0 {
		s.first = s.pacer.Before(offset)
	}

	// Start time. The window applies to where the execution takes up the
	// schedule: a rejoining engine's start_time is the stage's, long past.
	s.start = now
	if ts := req.GetStartTime(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			errs = append(errs, fieldErr("start_time", "%v", err))
		} else {
			s.start = ts.AsTime()
			if ago := now.Sub(s.start.Add(offset)); ago > maxStartPast {
				errs = append(errs, fieldErr("start_time", "%s is %v in the past (more than %v)", s.start.Format(time.RFC3339Nano), ago.Round(time.Millisecond), maxStartPast))
			} else if ahead := s.start.Sub(now); ahead > maxStartAhead {
				errs = append(errs, fieldErr("start_time", "%s is %v ahead (more than %v)", s.start.Format(time.RFC3339Nano), ahead.Round(time.Second), maxStartAhead))
			}
		}
	}

	// Request bytes, or a message.
	if u != nil && u.Scheme != "http" && u.Scheme != "https" {
		if err := parseMessages(req, u, host, s); err != nil {
			errs = append(errs, err)
		}
	} else if u != nil {
		s.mode = modeHTTP
		raw, head, err := buildRequest(req, u)
		if err != nil {
			errs = append(errs, err)
		}
		s.request, s.head = raw, head
		port := u.Port()
		if port == "" {
			port = "80"
			if u.Scheme == "https" {
				port = "443"
			}
		}
		s.host = host
		s.addr = net.JoinHostPort(host, port)
		if u.Scheme == "https" {
			cfg, err := tlsConfig(req.GetTls(), host)
			if err != nil {
				errs = append(errs, err)
			}
			s.tls = cfg
		}
		switch req.GetProtocol() {
		case enginev1.Protocol_HTTP1:
			if req.GetMaxConcurrentStreams() != 0 {
				errs = append(errs, fieldErr("max_concurrent_streams", "applies to protocol HTTP2 only"))
			}
		case enginev1.Protocol_HTTP2:
			s.h2 = parseH2(req, u)
			if s.tls != nil {
				// h2 by ALPN, or no connection (see h2Dial).
				s.tls.NextProtos = []string{"h2"}
			}
		default:
			errs = append(errs, fieldErr("protocol", "%d is not HTTP1 or HTTP2", req.GetProtocol()))
		}
		if req.GetWebsocket() != nil {
			if err := parseWebSocket(req, u, s); err != nil {
				errs = append(errs, err)
			}
		}
		if g := req.GetGrpc(); g != nil {
			switch {
			case req.GetProtocol() != enginev1.Protocol_HTTP2:
				errs = append(errs, fieldErr("grpc", "requires protocol HTTP2"))
			case g.GetMode() != enginev1.GRPC_UNARY:
				errs = append(errs, fieldErr("grpc.mode", "%s is not driven by this engine (UNARY only)", g.GetMode()))
			}
		}
	}

	var precondition error
	if st := req.GetStats(); st != nil {
		ss, err, pre := parseStats(st, backendName)
		if err != nil {
			errs = append(errs, err)
		}
		precondition = pre
		s.stats = ss
	}
	if len(errs) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "invalid execution %q: %v", s.label, joinLines(errs))
	}
	if precondition != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "execution %q: %v", s.label, precondition)
	}
	return s, nil
}

// parseTimeline validates the timeline's width and sample budget into s,
// whose pacer and workers are set unless they were invalid.
func parseTimeline(req *enginev1.ExecuteRequest, s *spec) error {
	var errs []error
	width, err := durationField("bucket_width", req.GetBucketWidth(), 0)
	if err != nil {
		errs = append(errs, err)
	} else if s.pacer.Planned() > 0 {
		s.bucketWidth, s.buckets, err = timelineGeometry(width, s.pacer, s.workers)
		if err != nil {
			errs = append(errs, err)
		}
	}
	s.sampleBudget = int(req.GetSampleBudget())
	if s.sampleBudget == 0 {
		s.sampleBudget = defaultSampleBudget
	} else if s.sampleBudget > maxSampleBudget {
		errs = append(errs, fieldErr("sample_budget", "%d is more than %d", s.sampleBudget, maxSampleBudget))
	}
	return errors.Join(errs...)
}

// parseOffset reads start_offset: not negative, and before the due time
// of the last planned request of p (a schedule with nothing left to send
// is no execution). 0 when unset or when p is not valid.
func parseOffset(req *enginev1.ExecuteRequest, p pacer.Pacer) (time.Duration, error) {
	offset, err := durationField("start_offset", req.GetStartOffset(), 0)
	switch {
	case err != nil:
		return 0, err
	case offset < 0:
		return 0, fieldErr("start_offset", "must not be negative, not %v", offset)
	case offset == 0 || p.Planned() == 0:
		return 0, nil
	case offset > p.Last():
		return 0, fieldErr("start_offset", "%v is past the last request's due time %v: nothing of the schedule is left", offset, p.Last())
	}
	return offset, nil
}

// planned is how many requests the execution plans: each worker's from
// its first on.
func (s *spec) planned() uint64 { return (s.pacer.Planned() - s.first) * uint64(s.workers) }

// joinLines joins problems with "; " so a status message stays one line.
func joinLines(errs []error) string {
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		parts = append(parts, strings.ReplaceAll(e.Error(), "\n", "; "))
	}
	return strings.Join(parts, "; ")
}

// durationField reads an optional Duration; unset or zero gives def.
func durationField(field string, d *durationpb.Duration, def time.Duration) (time.Duration, error) {
	if d == nil {
		return def, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fieldErr(field, "%v", err)
	}
	v := d.AsDuration()
	if v == 0 {
		return def, nil
	}
	if v < 0 {
		return 0, fieldErr(field, "%v must not be negative", v)
	}
	return v, nil
}

// parseTarget checks the URL and returns it with its host (no brackets).
func parseTarget(raw string) (*url.URL, string, error) {
	if raw == "" {
		return nil, "", fieldErr("url", "must not be empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fieldErr("url", "%v", err)
	}
	switch u.Scheme {
	case "http", "https":
	case "tcp", "tcps", "udp":
		if u.Port() == "" {
			return nil, "", fieldErr("url", "%q needs an explicit port", raw)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, "", fieldErr("url", "%q is host:port only, no path or query", raw)
		}
	default:
		return nil, "", fieldErr("url", "scheme %q of %q is not http, https, tcp, tcps or udp", u.Scheme, raw)
	}
	if u.User != nil {
		return nil, "", fieldErr("url", "%q carries user information; send an Authorization header instead", raw)
	}
	host := u.Hostname()
	if host == "" {
		return nil, "", fieldErr("url", "%q has no host", raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, "", fieldErr("url", "port %q of %q is not 1 to 65535", p, raw)
		}
	}
	return u, host, nil
}

// buildRequest serialises the request once; every send writes these bytes.
func buildRequest(req *enginev1.ExecuteRequest, u *url.URL) ([]byte, bool, error) {
	var errs []error
	method := req.GetMethod()
	if method == "" {
		method = "GET"
	}
	for i := 0; i < len(method); i++ {
		if !isToken(method[i]) {
			errs = append(errs, fieldErr("method", "%q is not a token", method))
			break
		}
	}
	host, agent := u.Host, defaultUserAgent
	var extra strings.Builder
	for i, h := range req.GetHeaders() {
		field := fmt.Sprintf("headers[%d]", i)
		name, value := h.GetName(), strings.TrimSpace(h.GetValue())
		ok := name != ""
		for j := 0; j < len(name); j++ {
			ok = ok && isToken(name[j])
		}
		if !ok {
			errs = append(errs, fieldErr(field, "name %q is not a token", name))
			continue
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			errs = append(errs, fieldErr(field, "value of %s holds CR, LF or NUL", name))
			continue
		}
		switch strings.ToLower(name) {
		case "host":
			host = value
			continue
		case "user-agent":
			agent = value
			continue
		case "content-length", "transfer-encoding":
			errs = append(errs, fieldErr(field, "%s is set by the engine from the body", name))
			continue
		}
		extra.WriteString(name)
		extra.WriteString(": ")
		extra.WriteString(value)
		extra.WriteString("\r\n")
	}
	if len(errs) > 0 {
		return nil, false, errors.Join(errs...)
	}
	body := req.GetBody()
	var b strings.Builder
	b.WriteString(method)
	b.WriteByte(' ')
	b.WriteString(u.RequestURI())
	b.WriteString(" HTTP/1.1\r\nHost: ")
	b.WriteString(host)
	b.WriteString("\r\n")
	if agent != "" {
		b.WriteString("User-Agent: ")
		b.WriteString(agent)
		b.WriteString("\r\n")
	}
	b.WriteString(extra.String())
	switch method {
	case "POST", "PUT", "PATCH":
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	default:
		if len(body) > 0 {
			b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
		}
	}
	b.WriteString("\r\n")
	b.Write(body)
	return []byte(b.String()), method == "HEAD", nil
}

func isToken(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// tlsConfig builds the client TLS config of an https target.
func tlsConfig(t *enginev1.TLS, host string) (*tls.Config, error) {
	cfg := &tls.Config{
		ServerName:         host,
		NextProtos:         []string{"http/1.1"},
		ClientSessionCache: tls.NewLRUClientSessionCache(64),
		MinVersion:         tls.VersionTLS12,
	}
	if t == nil {
		return cfg, nil
	}
	var errs []error
	if t.GetServerName() != "" {
		cfg.ServerName = t.GetServerName()
	}
	cfg.InsecureSkipVerify = t.GetInsecureSkipVerify()
	if len(t.GetCaPem()) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.GetCaPem()) {
			errs = append(errs, fieldErr("tls.ca_pem", "holds no PEM certificate"))
		}
		cfg.RootCAs = pool
	}
	if len(t.GetCertPem()) > 0 || len(t.GetKeyPem()) > 0 {
		cert, err := tls.X509KeyPair(t.GetCertPem(), t.GetKeyPem())
		if err != nil {
			errs = append(errs, fieldErr("tls.cert_pem", "%v", err))
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg, errors.Join(errs...)
}

// parseStats validates the statsd sink. The third result is a
// precondition failure: a metric name needs a backend and the engine has
// none.
func parseStats(st *enginev1.Stats, backendName string) (*statsSpec, error, error) {
	var errs []error
	ap, err := netip.ParseAddrPort(st.GetAddress())
	if err != nil {
		errs = append(errs, fieldErr("stats.address", "%q is not an IP literal with a port (host names are refused)", st.GetAddress()))
	} else if ap.Port() == 0 {
		errs = append(errs, fieldErr("stats.address", "%q has port 0", st.GetAddress()))
	}
	if st.GetScenario() == "" {
		errs = append(errs, fieldErr("stats.scenario", "must not be empty"))
	}
	if st.GetTarget() == "" {
		errs = append(errs, fieldErr("stats.target", "must not be empty"))
	}
	flush, err := durationField("stats.flush_interval", st.GetFlushInterval(), defaultFlushInterval)
	if err != nil {
		errs = append(errs, err)
	} else if flush < minProgressInterval {
		errs = append(errs, fieldErr("stats.flush_interval", "%v is shorter than %v", flush, minProgressInterval))
	}
	backend := st.GetBackend()
	if backend == "" {
		backend = backendName
	}
	var pre error
	if backend == "" {
		pre = errors.New("stats.backend is empty and the engine has no --backend-name to name its metrics")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...), nil
	}
	var names strings.Builder
	if p := st.GetPrefix(); p != "" {
		names.WriteString(p)
		names.WriteByte('.')
	}
	names.WriteString(st.GetScenario())
	names.WriteByte('.')
	names.WriteString(st.GetTarget())
	names.WriteByte('.')
	names.WriteString(metricElement(backend))
	names.WriteString(".cluster.")
	return &statsSpec{addr: ap.String(), names: names.String(), flushInterval: flush}, nil, pre
}

// metricElement reduces s to [a-z0-9_]: lower case, any other rune '_'.
func metricElement(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
