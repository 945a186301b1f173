// Package oneshot is the engine's client mode, `sortie-engine oneshot`: a
// bounded burst of plain HTTP requests to a few targets, then one tally
// line. The churn driver's new-serviceaccount step runs it in a pod under a
// ServiceAccount created a moment before, so its first requests are the
// first a node's proxy ever sees from that identity (first-use failures
// are a known class of mesh defect), and reads the tally back through the
// pod's log.
//
// Each target gets Requests requests, request i due at start + i/Rate (a
// pure function of i, open loop: a slow answer delays nothing), each bounded
// by Timeout, so the whole burst ends by (Requests-1)/Rate + Timeout. No
// request is retried.
package oneshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/sortie-soak/sortie/internal/clock"
)

// Target is one destination of the burst.
type Target struct {
	// Name names it in the tally: [A-Za-z0-9._-], no ':'.
	Name string
	// URL is an http:// or https:// URL with a host.
	URL string
}

// Options shape a burst.
type Options struct {
	Targets []Target
	// Requests is how many requests each target gets (1..100000).
	Requests int
	// Rate is the requests per second each target gets (1..1000).
	Rate int
	// Timeout bounds one request, connection included.
	Timeout time.Duration
	// Step and Node name the burst in the final line.
	Step, Node string
	// UserAgent is sent with every request, so a proxy's access log can be
	// filtered to exactly these requests.
	UserAgent string
}

// DefaultOptions is two minutes at 2 requests a second per target, as the
// bash harness's step ran, with its 5 s request bound.
func DefaultOptions() Options {
	return Options{Requests: 240, Rate: 2, Timeout: 5 * time.Second, Node: "unknown"}
}

// UserAgentPrefix is the default User-Agent before the step's name: the
// value the soak's access-log queries select on.
const UserAgentPrefix = "aether-soak-newsa/"

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Validate returns every problem of o.
func (o Options) Validate() error {
	var errs []error
	if len(o.Targets) == 0 {
		errs = append(errs, errors.New("at least one --target name=url is required"))
	}
	seen := map[string]bool{}
	for _, t := range o.Targets {
		if !nameRE.MatchString(t.Name) || len(t.Name) > 253 {
			errs = append(errs, fmt.Errorf("target name %q: want [A-Za-z0-9._-], at most 253", t.Name))
		}
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("target %s given twice", t.Name))
		}
		seen[t.Name] = true
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("target %s: %q is not an http:// or https:// URL with a host", t.Name, t.URL))
		}
	}
	if o.Requests < 1 || o.Requests > 100000 {
		errs = append(errs, fmt.Errorf("--requests %d: want 1..100000", o.Requests))
	}
	if o.Rate < 1 || o.Rate > 1000 {
		errs = append(errs, fmt.Errorf("--rate %d: want 1..1000 requests a second", o.Rate))
	}
	if o.Timeout <= 0 || o.Timeout > 5*time.Minute {
		errs = append(errs, fmt.Errorf("--timeout %v: want more than 0, at most 5m", o.Timeout))
	}
	for what, v := range map[string]string{"--step": o.Step, "--node": o.Node} {
		if !nameRE.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s %q: want [A-Za-z0-9._-]", what, v))
		}
	}
	return errors.Join(errs...)
}

// Due is when request i of a target is due, after the burst's start.
func (o Options) Due(i int) time.Duration {
	return time.Duration(i) * time.Second / time.Duration(o.Rate)
}

// Bound is how long a burst can take at most: the last request's due time
// plus its timeout.
func (o Options) Bound() time.Duration { return o.Due(o.Requests-1) + o.Timeout }

// NewTransport is the burst's HTTP transport: no proxy from the
// environment (the mesh is what is under test), the connect part bounded
// by the request timeout, and a connection of its own for every request:
// net/http silently sends a request again when a reused connection turns
// out closed, and a request here is sent once or counted as failed.
func NewTransport(timeout time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:       (&net.Dialer{Timeout: timeout}).DialContext,
		DisableKeepAlives: true,
	}
}

// Burst sends the requests of every target and returns the final tally.
// It returns ctx's error, and no tally, when ctx ends first.
func Burst(ctx context.Context, clk clock.Clock, rt http.RoundTripper, o Options) (Final, error) {
	client := &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	f := Final{Step: o.Step, Node: o.Node, Dests: make([]Dest, len(o.Targets))}
	start := clk.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(o.Targets))
	for i, t := range o.Targets {
		f.Dests[i] = Dest{Name: t.Name, Codes: map[string]int64{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = burstOne(ctx, clk, client, o, start, t, &f.Dests[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Final{}, err
	}
	return f, nil
}

// burstOne paces one target's requests, each in a goroutine of its own,
// and counts their outcomes into d once all are back.
func burstOne(ctx context.Context, clk clock.Clock, client *http.Client, o Options, start time.Time, t Target, d *Dest) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range o.Requests {
		if err := clk.Sleep(ctx, start.Add(o.Due(i)).Sub(clk.Now())); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := send(ctx, client, o, t.URL)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case code == "":
				d.OK++
			case code[0] == 'e':
				d.ConnErr++
				d.Codes[code]++
			default:
				d.Non2xx++
				d.Codes[code]++
			}
		}()
	}
	wg.Wait()
	if len(d.Codes) == 0 {
		d.Codes = nil
	}
	return ctx.Err()
}

// maxBody bounds what is read of an answer: the status decides.
const maxBody = 1 << 20

// send makes one request and returns "" for a 2xx, the status for another
// answer, or an err_ class when there was none.
func send(ctx context.Context, client *http.Client, o Options, target string) string {
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, target, nil)
	if err != nil {
		return ErrOther
	}
	req.Header.Set("User-Agent", o.UserAgent)
	resp, err := client.Do(req)
	if err != nil {
		return classify(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return ""
	}
	return fmt.Sprint(resp.StatusCode)
}

// classify names the class of a request that got no HTTP status.
func classify(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	var ne net.Error
	switch {
	case errors.As(err, &dns):
		return ErrDNS
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ErrTimeout
	case errors.As(err, &op) && op.Op == "dial":
		return ErrConnect
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		return ErrReset
	}
	return ErrOther
}
