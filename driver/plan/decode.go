package plan

// The plan is decoded by walking yaml.v3's node tree rather than with
// Unmarshal into structs: every value keeps its line and column, so a rule
// broken after defaults are applied (a rate that does not divide, a pool that
// does not exist) is reported where it was written, and every problem of the
// file is collected instead of stopping at the first.

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sortie-soak/sortie/record"
)

// maxVisits bounds the nodes a decode visits. Aliases let a small file name
// the same large mapping many times; nothing a plan needs comes near this.
const maxVisits = 100_000

// val is a decoded value with where it was written. set means the field was
// present; ok means its value decoded (a value that did not is already
// reported, and later rules skip it rather than report it again).
type val[T any] struct {
	v   T
	set bool
	ok  bool
	at  loc
}

// good reports whether the value was written and decoded.
func (v val[T]) good() bool { return v.set && v.ok }

// fill gives dst the value of src when dst was not written: how defaults fill
// a scenario.
func fill[T any](dst *val[T], src val[T]) {
	if !dst.set {
		*dst = src
	}
}

type decoder struct {
	errs   *errList
	visits int
	over   bool
	// merges is how deep merge keys are nested now; a mapping merged into
	// itself would nest for ever.
	merges int
}

// maxMerges bounds nested merge keys.
const maxMerges = 8

func (d *decoder) at(n *yaml.Node, path string) loc {
	if n == nil {
		return loc{line: 1, col: 1, path: path}
	}
	return loc{line: n.Line, col: n.Column, path: path}
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errs.add(d.at(n, path), format, args...)
}

// resolve follows aliases and counts the visit.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	if n == nil {
		n = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	d.visits++
	if d.visits > maxVisits && !d.over {
		d.over = true
		d.errs.addMsg(loc{line: 1, col: 1}, fmt.Sprintf("plan too large: more than %d values once aliases are expanded", maxVisits))
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// kindName names what a node holds, for "must be a string, got a list".
func kindName(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "nothing"
		}
		return fmt.Sprintf("%s %q", n.Tag, n.Value)
	}
	return "an alias"
}

// field is one key of a mapping and its value.
type field struct {
	key       string
	keyNode   *yaml.Node
	valueNode *yaml.Node
}

// fields lists a mapping's keys in order, with YAML merge keys (<<) expanded
// (keys written in the mapping win over merged ones), reporting duplicate and
// non-string keys. ok is false when n is not a mapping.
func (d *decoder) fields(n *yaml.Node, path string) ([]field, bool) {
	n = d.resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a mapping, got %s", kindName(n))
		return nil, false
	}
	var out []field
	seen := map[string]bool{}
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "!!int" && k.Tag != "!!bool" && k.Tag != "!!float" && k.Tag != "!!null") {
			d.fail(k, path, "a key must be a plain name, got %s", kindName(k))
			continue
		}
		if seen[k.Value] {
			d.fail(k, path, "%q is written twice", k.Value)
			continue
		}
		seen[k.Value] = true
		out = append(out, field{key: k.Value, keyNode: k, valueNode: v})
	}
	for _, m := range merged {
		m = d.resolve(m)
		var sources []*yaml.Node
		switch m.Kind {
		case yaml.MappingNode:
			sources = []*yaml.Node{m}
		case yaml.SequenceNode:
			sources = m.Content
		default:
			d.fail(m, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", kindName(m))
			continue
		}
		if d.merges >= maxMerges {
			d.fail(m, path, "merge keys (<<) nested more than %d deep", maxMerges)
			continue
		}
		for _, src := range sources {
			if d.over {
				break
			}
			d.merges++
			fs, ok := d.fields(src, path)
			d.merges--
			if !ok {
				continue
			}
			for _, f := range fs {
				if !seen[f.key] {
					seen[f.key] = true
					out = append(out, f)
				}
			}
		}
	}
	return out, true
}

// unsupported names fields of the sortie + Nighthawk plan schema that this
// driver does not take, with the reason, so that a plan written for it is
// refused with more than "unknown field".
var unsupported = map[string]string{
	"nighthawk_template": "the engine is not Nighthawk and takes no template; the plan fields that do the same job are executor (rate, duration, open_loop), connections, concurrency, max_pending_requests, timeout and headers",
	"distributor":        "pools are services or dns; there is no distributor",
	"sinks":              "only a statsd sink exists: set address",
}

// unknown reports a key that is not in known, suggesting a near spelling.
func (d *decoder) unknown(f field, path string, known []string) {
	if why, ok := unsupported[f.key]; ok {
		d.fail(f.keyNode, path, "%s is not supported: %s", f.key, why)
		return
	}
	msg := fmt.Sprintf("unknown field %q", f.key)
	best, bestDist := "", 3
	for _, k := range known {
		if dist := editDistance(f.key, k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	} else {
		msg += " (known: " + strings.Join(known, ", ") + ")"
	}
	d.fail(f.keyNode, path, "%s", msg)
}

// editDistance is the Levenshtein distance, for "did you mean".
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// list calls each for the items of a sequence. A null value is an empty
// list; ok is false when n is not a sequence.
func (d *decoder) list(n *yaml.Node, path string, each func(i int, item *yaml.Node, path string)) bool {
	n = d.resolve(n)
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "must be a list, got %s", kindName(n))
		return false
	}
	for i, item := range n.Content {
		if d.over {
			return false
		}
		each(i, item, fmt.Sprintf("%s[%d]", path, i))
	}
	return true
}

// str decodes a string. Numbers and booleans are not strings: the schema
// says which fields are strings, and concurrency "1" is one of them.
func (d *decoder) str(n *yaml.Node, path string) val[string] {
	n = d.resolve(n)
	v := val[string]{set: true, at: d.at(n, path)}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float" || n.Tag == "!!bool") {
			d.fail(n, path, "must be a string, got %s (quote it: %q)", kindName(n), n.Value)
		} else {
			d.fail(n, path, "must be a string, got %s", kindName(n))
		}
		return v
	}
	v.v, v.ok = n.Value, true
	return v
}

// strs decodes a list of strings.
func (d *decoder) strs(n *yaml.Node, path string) val[[]val[string]] {
	out := val[[]val[string]]{set: true, at: d.at(d.resolve(n), path)}
	out.ok = d.list(n, path, func(_ int, item *yaml.Node, p string) {
		out.v = append(out.v, d.str(item, p))
	})
	return out
}

var numberLike = regexp.MustCompile(`^[-+]?[0-9._]+([eE][-+]?[0-9]+)?$`)

// integer decodes a whole number, written as a user writes one: decimal
// digits (10), or a decimal whose fraction is zero (10.0). Every other
// spelling YAML also reads as a number is refused with the plain one to
// write (see plainInteger).
func (d *decoder) integer(n *yaml.Node, path string) val[int64] {
	n = d.resolve(n)
	v := val[int64]{set: true, at: d.at(n, path)}
	switch {
	case n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float" || n.Tag == "!!str" && n.Style&quoted == 0 && numberLike.MatchString(n.Value)):
		// An unquoted number yaml.v3 could not hold (1e400) it tags as a
		// string: it is still a number the user wrote, and out of range.
		i, ok, msg := plainInteger(n.Value)
		if msg != "" {
			d.fail(n, path, "%s", msg)
		}
		v.v, v.ok = i, ok
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str" && numberLike.MatchString(n.Value):
		d.fail(n, path, "must be a number, got the string %q (write it without quotes)", n.Value)
	default:
		d.fail(n, path, "must be a whole number, got %s", kindName(n))
	}
	return v
}

// quoted are the styles of a scalar written in quotes.
const quoted = yaml.SingleQuotedStyle | yaml.DoubleQuotedStyle

var (
	// plainDecimal is a number as a user writes one: 10, -3, 2.5, 10.0.
	plainDecimal = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?$`)
	// leadingZero is a decimal YAML 1.1 reads as octal: 010 is 8.
	leadingZero = regexp.MustCompile(`^[-+]?0[0-9_]+$`)
	// bigExponent is a decimal with an exponent too large for ParseDecimal.
	bigExponent = regexp.MustCompile(`^[0-9]*\.?[0-9]*e\+?[0-9]+$`)
	// durationSyntax is what time.ParseDuration reads, whatever its size.
	durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)
)

// plainInteger reads a YAML number that must be whole. ok says i holds its
// value; msg is a problem to report, set when ok is false and also when a
// value was read but spelled in a form the plan does not take (0x10, 1_000,
// +10, 1e3): that value is kept, so a range rule can say its piece too.
func plainInteger(s string) (i int64, ok bool, msg string) {
	if plainDecimal.MatchString(s) {
		r, _ := new(big.Rat).SetString(s)
		if !r.IsInt() {
			return 0, false, fmt.Sprintf("must be a whole number, got %s", s)
		}
		if !r.Num().IsInt64() {
			return 0, false, fmt.Sprintf("%s is out of range: a whole number here is from %d to %d", s, int64(math.MinInt64), int64(math.MaxInt64))
		}
		return r.Num().Int64(), true, ""
	}
	if leadingZero.MatchString(s) {
		dec := strings.TrimLeft(strings.ReplaceAll(strings.TrimLeft(s, "+-"), "_", ""), "0")
		if dec == "" {
			dec = "0"
		}
		return 0, false, fmt.Sprintf("%s has a leading zero, which YAML reads as an octal number: write %s%s", s, sign(s), dec)
	}
	r, how := yamlNumber(s)
	if r == nil {
		return 0, false, fmt.Sprintf("must be a whole number written in decimal digits, got %s", s)
	}
	if !r.IsInt() {
		return 0, false, fmt.Sprintf("must be a whole number, got %s", s)
	}
	plain := r.Num().String()
	if !r.Num().IsInt64() {
		return 0, false, fmt.Sprintf("%s is out of range: a whole number here is from %d to %d", s, int64(math.MinInt64), int64(math.MaxInt64))
	}
	return r.Num().Int64(), true, fmt.Sprintf("%s is written %s: write %s", s, how, plain)
}

// sign is "-" for a negative number as written, else "".
func sign(s string) string {
	if strings.HasPrefix(s, "-") {
		return "-"
	}
	return ""
}

// yamlNumber reads the other number spellings YAML accepts, exactly, and
// says which it was; nil for what is not a finite number (.inf, .nan).
func yamlNumber(s string) (*big.Rat, string) {
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimLeft(s, "+-")
	how := "with a plus sign"
	if strings.Contains(body, "_") {
		body, how = strings.ReplaceAll(body, "_", ""), "with underscores"
	}
	var r *big.Rat
	switch lower := strings.ToLower(body); {
	case strings.HasPrefix(lower, "0x"), strings.HasPrefix(lower, "0o"), strings.HasPrefix(lower, "0b"):
		n, ok := new(big.Int).SetString(lower, 0)
		if !ok {
			return nil, ""
		}
		r = new(big.Rat).SetInt(n)
		how = map[byte]string{'x': "in hexadecimal", 'o': "in octal", 'b': "in binary"}[lower[1]]
	case strings.ContainsAny(lower, "e"):
		if _, err := record.ParseDecimal(lower); err != nil {
			if bigExponent.MatchString(lower) {
				// Finite, but more than any field holds: say so rather
				// than "not a number".
				return new(big.Rat).SetFrac(new(big.Int).Lsh(big.NewInt(1), 200), big.NewInt(1)), "with an exponent"
			}
			return nil, ""
		}
		r, _ = new(big.Rat).SetString(lower)
		how = "with an exponent"
	default:
		var ok bool
		if r, ok = new(big.Rat).SetString(body); !ok || strings.ContainsAny(lower, "/") {
			return nil, ""
		}
		if strings.HasPrefix(body, ".") || strings.HasSuffix(body, ".") {
			how = "without a digit on each side of its point"
		}
	}
	if neg {
		r.Neg(r)
	}
	return r, how
}

// boolean decodes true or false.
func (d *decoder) boolean(n *yaml.Node, path string) val[bool] {
	n = d.resolve(n)
	v := val[bool]{set: true, at: d.at(n, path)}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		d.fail(n, path, "must be true or false, got %s", kindName(n))
		return v
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		d.fail(n, path, "must be true or false, got %q", n.Value)
		return v
	}
	v.v, v.ok = b, true
	return v
}

// duration decodes a duration string such as 30s, 15m or 8h30m. A number is
// refused: seconds or nanoseconds would be a guess.
func (d *decoder) duration(n *yaml.Node, path string) val[time.Duration] {
	n = d.resolve(n)
	v := val[time.Duration]{set: true, at: d.at(n, path)}
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		d.fail(n, path, "a duration is a string with a unit such as \"30s\", \"15m\" or \"8h30m\", got the number %s", n.Value)
		return v
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		d.fail(n, path, "must be a duration such as \"30s\", got %s", kindName(n))
		return v
	}
	t, err := time.ParseDuration(n.Value)
	if err != nil {
		if durationSyntax.MatchString(n.Value) {
			d.fail(n, path, "%q is too long: a duration is at most %v", n.Value, time.Duration(math.MaxInt64))
		} else if _, nerr := strconv.ParseFloat(n.Value, 64); nerr == nil {
			d.fail(n, path, "a duration needs a unit, such as \"%ss\", got %q", n.Value, n.Value)
		} else {
			d.fail(n, path, "%q is not a duration such as \"30s\", \"15m\" or \"8h30m\"", n.Value)
		}
		return v
	}
	v.v, v.ok = t, true
	return v
}

// rawPlan is the plan as written, before defaults and rules.
type rawPlan struct {
	root       loc
	mapping    bool // the root is a mapping; if not, nothing else is said
	version    val[string]
	pools      val[[]*rawPool]
	defaults   val[*rawScenario]
	scenarios  val[[]*rawScenario]
	thresholds val[[]val[string]]
	stats      val[*rawStats]
}

type rawPool struct {
	at       loc
	name     val[string]
	services val[[]val[string]]
	dns      val[string]
}

type rawScenario struct {
	at                                                loc
	name, pool, target, method, body, bodyFile, proto val[string]
	concurrency                                       val[string]
	targets                                           val[[]*rawTarget]
	headers, thresholds                               val[[]val[string]]
	connections, maxPending, maxStreams               val[int64]
	timeout, requestTimeout, maxLateness              val[time.Duration]
	tls                                               val[*rawTLS]
	stats                                             val[*rawStats]
	executor                                          rawExecutor
	grpc                                              val[*rawGRPC]
	websocket                                         val[*rawWebSocket]
	tcp                                               val[*rawTCP]
	udp                                               val[*rawUDP]
}

type rawTarget struct {
	at         loc
	name, url  val[string]
	weight     val[int64]
	thresholds val[[]val[string]]
}

type rawTLS struct {
	caFile, certFile, keyFile, serverName val[string]
	insecure                              val[bool]
}

type rawStats struct {
	at                       loc
	address, prefix, backend val[string]
	flush                    val[time.Duration]
}

type rawExecutor struct {
	// block is where the executor mapping was written.
	block              val[bool]
	typ                val[string]
	rate               val[int64]
	duration, rampTime val[time.Duration]
	stages             val[[]*rawStage]
	perBackend         val[bool]
	openLoop           val[bool]
}

type rawStage struct {
	at       loc
	rate     val[int64]
	duration val[time.Duration]
}

var planKeys = []string{"version", "pools", "defaults", "scenarios", "thresholds", "stats"}

func (d *decoder) plan(n *yaml.Node) *rawPlan {
	n = d.resolve(n)
	p := &rawPlan{root: d.at(n, "")}
	fs, ok := d.fields(n, "plan")
	if !ok {
		return p
	}
	p.mapping = true
	for _, f := range fs {
		v := f.valueNode
		switch f.key {
		case "version":
			p.version = d.str(v, "version")
		case "pools":
			p.pools = val[[]*rawPool]{set: true, at: d.at(d.resolve(v), "pools")}
			p.pools.ok = d.list(v, "pools", func(_ int, item *yaml.Node, path string) {
				if pool := d.pool(item, path); pool != nil {
					p.pools.v = append(p.pools.v, pool)
				}
			})
		case "defaults":
			if isNull(d.resolve(v)) {
				continue
			}
			s := d.scenario(v, "defaults")
			p.defaults = val[*rawScenario]{v: s, set: true, ok: s != nil, at: d.at(d.resolve(v), "defaults")}
		case "scenarios":
			p.scenarios = val[[]*rawScenario]{set: true, at: d.at(d.resolve(v), "scenarios")}
			p.scenarios.ok = d.list(v, "scenarios", func(_ int, item *yaml.Node, path string) {
				if s := d.scenario(item, path); s != nil {
					p.scenarios.v = append(p.scenarios.v, s)
				}
			})
		case "thresholds":
			p.thresholds = d.strs(v, "thresholds")
		case "stats":
			p.stats = d.statsBlock(v, "stats")
		default:
			d.unknown(f, "plan", planKeys)
		}
	}
	return p
}

var poolKeys = []string{"name", "services", "dns"}

func (d *decoder) pool(n *yaml.Node, path string) *rawPool {
	n = d.resolve(n)
	fs, ok := d.fields(n, path)
	if !ok {
		return nil
	}
	p := &rawPool{at: d.at(n, path)}
	for _, f := range fs {
		v := f.valueNode
		switch f.key {
		case "name":
			p.name = d.str(v, path+".name")
		case "services":
			p.services = d.strs(v, path+".services")
		case "dns":
			p.dns = d.str(v, path+".dns")
		default:
			d.unknown(f, path, poolKeys)
		}
	}
	return p
}

var scenarioKeys = []string{
	"name", "pool", "target", "targets", "method", "headers", "body", "body_file",
	"protocol", "connections", "concurrency", "max_pending_requests", "timeout",
	"request_timeout", "max_lateness", "max_concurrent_streams",
	"tls", "stats", "executor", "thresholds", "grpc", "websocket", "tcp", "udp",
}

func (d *decoder) scenario(n *yaml.Node, path string) *rawScenario {
	n = d.resolve(n)
	fs, ok := d.fields(n, path)
	if !ok {
		return nil
	}
	s := &rawScenario{at: d.at(n, path)}
	for _, f := range fs {
		v := f.valueNode
		p := path + "." + f.key
		switch f.key {
		case "name":
			s.name = d.str(v, p)
		case "pool":
			s.pool = d.str(v, p)
		case "target":
			s.target = d.str(v, p)
		case "targets":
			s.targets = val[[]*rawTarget]{set: true, at: d.at(d.resolve(v), p)}
			s.targets.ok = d.list(v, p, func(_ int, item *yaml.Node, ip string) {
				if t := d.target(item, ip); t != nil {
					s.targets.v = append(s.targets.v, t)
				}
			})
		case "method":
			s.method = d.str(v, p)
		case "headers":
			s.headers = d.strs(v, p)
		case "body":
			s.body = d.str(v, p)
		case "body_file":
			s.bodyFile = d.str(v, p)
		case "protocol":
			s.proto = d.str(v, p)
		case "connections":
			s.connections = d.integer(v, p)
		case "concurrency":
			s.concurrency = d.str(v, p)
		case "max_pending_requests":
			s.maxPending = d.integer(v, p)
		case "timeout":
			s.timeout = d.duration(v, p)
		case "request_timeout":
			s.requestTimeout = d.duration(v, p)
		case "max_lateness":
			s.maxLateness = d.duration(v, p)
		case "max_concurrent_streams":
			s.maxStreams = d.integer(v, p)
		case "grpc":
			s.grpc = d.grpcBlock(v, p)
		case "websocket":
			s.websocket = d.websocketBlock(v, p)
		case "tls":
			s.tls = d.tlsBlock(v, p)
		case "stats":
			s.stats = d.statsBlock(v, p)
		case "executor":
			s.executor = d.executor(v, p)
		case "thresholds":
			s.thresholds = d.strs(v, p)
		case "tcp":
			s.tcp = d.tcpBlock(v, p)
		case "udp":
			s.udp = d.udpBlock(v, p)
		default:
			d.unknown(f, path, scenarioKeys)
		}
	}
	return s
}

var targetKeys = []string{"name", "url", "weight", "thresholds"}

func (d *decoder) target(n *yaml.Node, path string) *rawTarget {
	n = d.resolve(n)
	fs, ok := d.fields(n, path)
	if !ok {
		return nil
	}
	t := &rawTarget{at: d.at(n, path)}
	for _, f := range fs {
		v := f.valueNode
		switch f.key {
		case "name":
			t.name = d.str(v, path+".name")
		case "url":
			t.url = d.str(v, path+".url")
		case "weight":
			t.weight = d.integer(v, path+".weight")
		case "thresholds":
			t.thresholds = d.strs(v, path+".thresholds")
		default:
			d.unknown(f, path, targetKeys)
		}
	}
	return t
}

var tlsKeys = []string{"ca_file", "cert_file", "key_file", "server_name", "insecure_skip_verify"}

func (d *decoder) tlsBlock(n *yaml.Node, path string) val[*rawTLS] {
	n = d.resolve(n)
	out := val[*rawTLS]{set: true, at: d.at(n, path)}
	if isNull(n) {
		return val[*rawTLS]{}
	}
	fs, ok := d.fields(n, path)
	if !ok {
		return out
	}
	t := &rawTLS{}
	for _, f := range fs {
		v := f.valueNode
		p := path + "." + f.key
		switch f.key {
		case "ca_file":
			t.caFile = d.str(v, p)
		case "cert_file":
			t.certFile = d.str(v, p)
		case "key_file":
			t.keyFile = d.str(v, p)
		case "server_name":
			t.serverName = d.str(v, p)
		case "insecure_skip_verify":
			t.insecure = d.boolean(v, p)
		default:
			d.unknown(f, path, tlsKeys)
		}
	}
	out.v, out.ok = t, true
	return out
}

var statsKeys = []string{"address", "prefix", "backend", "flush_interval", "statsd"}

func (d *decoder) statsBlock(n *yaml.Node, path string) val[*rawStats] {
	n = d.resolve(n)
	out := val[*rawStats]{set: true, at: d.at(n, path)}
	if isNull(n) {
		return val[*rawStats]{}
	}
	fs, ok := d.fields(n, path)
	if !ok {
		return out
	}
	s := &rawStats{at: d.at(n, path)}
	for _, f := range fs {
		v := f.valueNode
		p := path + "." + f.key
		switch f.key {
		case "address":
			if s.address.set {
				d.fail(f.keyNode, path, "set address or statsd.address, not both")
				continue
			}
			s.address = d.str(v, p)
		case "statsd":
			// The sortie + Nighthawk spelling: statsd: {address: ...}.
			sfs, ok := d.fields(v, p)
			if !ok {
				continue
			}
			for _, sf := range sfs {
				if sf.key != "address" {
					d.unknown(sf, p, []string{"address"})
					continue
				}
				if s.address.set {
					d.fail(sf.keyNode, p, "set address or statsd.address, not both")
					continue
				}
				s.address = d.str(sf.valueNode, p+".address")
			}
		case "prefix":
			s.prefix = d.str(v, p)
		case "backend":
			s.backend = d.str(v, p)
		case "flush_interval":
			s.flush = d.duration(v, p)
		default:
			d.unknown(f, path, statsKeys)
		}
	}
	out.v, out.ok = s, true
	return out
}

var executorKeys = []string{"type", "rate", "duration", "ramp_time", "stages", "per_backend", "open_loop"}

func (d *decoder) executor(n *yaml.Node, path string) rawExecutor {
	n = d.resolve(n)
	e := rawExecutor{block: val[bool]{set: true, ok: true, at: d.at(n, path)}}
	if isNull(n) {
		return rawExecutor{}
	}
	fs, ok := d.fields(n, path)
	if !ok {
		return e
	}
	for _, f := range fs {
		v := f.valueNode
		p := path + "." + f.key
		switch f.key {
		case "type":
			e.typ = d.str(v, p)
		case "rate":
			e.rate = d.rate(v, p)
		case "duration":
			e.duration = d.duration(v, p)
		case "ramp_time":
			e.rampTime = d.duration(v, p)
		case "stages":
			e.stages = val[[]*rawStage]{set: true, at: d.at(d.resolve(v), p)}
			e.stages.ok = d.list(v, p, func(_ int, item *yaml.Node, sp string) {
				if st := d.stage(item, sp); st != nil {
					e.stages.v = append(e.stages.v, st)
				}
			})
		case "per_backend":
			e.perBackend = d.boolean(v, p)
		case "open_loop":
			e.openLoop = d.boolean(v, p)
		default:
			d.unknown(f, path, executorKeys)
		}
	}
	return e
}

// rate decodes a rate: a whole number of requests per second. A fraction is
// refused with the whole numbers around it, never rounded.
func (d *decoder) rate(n *yaml.Node, path string) val[int64] {
	r := d.resolve(n)
	if r.Kind == yaml.ScalarNode && r.Tag == "!!float" && plainDecimal.MatchString(r.Value) {
		if q, _ := new(big.Rat).SetString(r.Value); q.Sign() > 0 && !q.IsInt() {
			v := val[int64]{set: true, at: d.at(r, path)}
			lo := new(big.Int).Quo(q.Num(), q.Denom())
			hi := new(big.Int).Add(lo, big.NewInt(1))
			d.fail(r, path, "a rate is a whole number of requests per second, got %s (nearest: %s or %s)", r.Value, lo, hi)
			return v
		}
	}
	d.visits-- // integer resolves n again
	return d.integer(n, path)
}

var stageKeys = []string{"rate", "duration"}

func (d *decoder) stage(n *yaml.Node, path string) *rawStage {
	n = d.resolve(n)
	fs, ok := d.fields(n, path)
	if !ok {
		return nil
	}
	s := &rawStage{at: d.at(n, path)}
	for _, f := range fs {
		switch f.key {
		case "rate":
			s.rate = d.rate(f.valueNode, path+".rate")
		case "duration":
			s.duration = d.duration(f.valueNode, path+".duration")
		default:
			d.unknown(f, path, stageKeys)
		}
	}
	return s
}
