package images

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// findValuesDigest returns the scalar node of images.<key>.digest in a
// values.yaml document.
func findValuesDigest(doc *yaml.Node, key string) (*yaml.Node, error) {
	path := []string{"images", key, "digest"}
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, fmt.Errorf("%s: empty document", strings.Join(path, "."))
		}
		n = n.Content[0]
	}
	for i, k := range path {
		if n.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: not a mapping", strings.Join(path[:i], "."))
		}
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == k {
				next = n.Content[j+1]
				break
			}
		}
		if next == nil {
			return nil, fmt.Errorf("%s not found", strings.Join(path[:i+1], "."))
		}
		n = next
	}
	if n.Kind != yaml.ScalarNode {
		return nil, fmt.Errorf("%s: not a scalar", strings.Join(path, "."))
	}
	return n, nil
}

// ValuesDigest returns the value of images.<key>.digest in a chart's
// values.yaml.
func ValuesDigest(values []byte, key string) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return "", fmt.Errorf("values: %w", err)
	}
	n, err := findValuesDigest(&doc, key)
	if err != nil {
		return "", fmt.Errorf("values: %w", err)
	}
	return n.Value, nil
}

// PinValues returns values with images.<key>.digest set to the lock's
// digest for every entry of Binaries that has a ValuesKey. Only the digest
// scalars change, in place and in their own quoting style: comments, order
// and layout of the file stay as they are. A key the file lacks, or an
// image the lock lacks, is an error.
func PinValues(values []byte, l Lock) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	lines := strings.SplitAfter(string(values), "\n")
	var errs []error
	for _, b := range Binaries {
		if b.ValuesKey == "" {
			continue
		}
		digest, ok := l.Digest(b.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("lock has no digest for %s (images.%s.digest)", b.Name, b.ValuesKey))
			continue
		}
		n, err := findValuesDigest(&doc, b.ValuesKey)
		if err != nil {
			errs = append(errs, fmt.Errorf("values: %w", err))
			continue
		}
		if err := replaceScalar(lines, n, digest); err != nil {
			errs = append(errs, fmt.Errorf("values: images.%s.digest: %w", b.ValuesKey, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := []byte(strings.Join(lines, ""))
	// The rewrite is textual; read the result back so that a scalar the
	// rewrite misjudged (an odd quoting, a value spanning lines) is an
	// error rather than a broken values file.
	for _, b := range Binaries {
		if b.ValuesKey == "" {
			continue
		}
		want, _ := l.Digest(b.Name)
		if got, err := ValuesDigest(out, b.ValuesKey); err != nil || got != want {
			return nil, fmt.Errorf("values: images.%s.digest: rewriting it in place failed (write it as digest: \"\" on one line)", b.ValuesKey)
		}
	}
	return out, nil
}

// replaceScalar rewrites the single-line scalar n inside lines (the file
// split after each newline) to value, keeping the scalar's quoting style.
func replaceScalar(lines []string, n *yaml.Node, value string) error {
	if n.Line < 1 || n.Line > len(lines) {
		return fmt.Errorf("line %d out of range", n.Line)
	}
	line := []rune(lines[n.Line-1])
	start := n.Column - 1
	if start < 0 || start >= len(line) {
		return fmt.Errorf("line %d: column %d out of range", n.Line, n.Column)
	}
	var end int
	var repl string
	switch n.Style {
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		q := '"'
		repl = `"` + value + `"`
		if n.Style == yaml.SingleQuotedStyle {
			q = '\''
			repl = "'" + value + "'"
		}
		if line[start] != q {
			return fmt.Errorf("line %d: no quote at column %d", n.Line, n.Column)
		}
		end = -1
		for i := start + 1; i < len(line); i++ {
			switch {
			case q == '"' && line[i] == '\\':
				i++ // an escape: skip the escaped character
			case q == '\'' && line[i] == q && i+1 < len(line) && line[i+1] == q:
				i++ // '' is a quote inside a single-quoted scalar
			case line[i] == q:
				end = i + 1
			}
			if end >= 0 {
				break
			}
		}
		if end < 0 {
			return fmt.Errorf("line %d: a quoted digest must fit on its line", n.Line)
		}
	case 0: // plain
		text := []rune(n.Value)
		if len(text) == 0 || start+len(text) > len(line) || string(line[start:start+len(text)]) != n.Value {
			return fmt.Errorf("line %d: want a digest on the key's line (write digest: \"\" for none)", n.Line)
		}
		end = start + len(text)
		repl = value
	default:
		return fmt.Errorf("line %d: want a plain or quoted scalar", n.Line)
	}
	lines[n.Line-1] = string(line[:start]) + repl + string(line[end:])
	return nil
}

// readmeRefRE matches an image reference by digest in prose: the image
// name (the last path element, after any registry and repository prefix)
// and its digest.
var readmeRefRE = regexp.MustCompile(`([a-z0-9][a-z0-9-]*)@(sha256:[0-9a-f]{64})`)

// isSortieName reports whether a README reference names one of sortie's
// images (rather than, say, a third-party image in an example).
func isSortieName(n string) bool { return n == "sortie" || strings.HasPrefix(n, "sortie-") }

// ReadmeDigests returns, for every sortie image named by digest in a
// README (as name@sha256:..., with or without a registry prefix), the
// distinct digests it is given, in order of appearance.
func ReadmeDigests(readme []byte) map[string][]string {
	out := map[string][]string{}
	for _, m := range readmeRefRE.FindAllSubmatch(readme, -1) {
		n, d := string(m[1]), string(m[2])
		if !isSortieName(n) {
			continue
		}
		dup := false
		for _, have := range out[n] {
			dup = dup || have == d
		}
		if !dup {
			out[n] = append(out[n], d)
		}
	}
	return out
}

// PinReadme returns readme with the digest of every sortie image reference
// (name@sha256:...) replaced by the lock's. A sortie image the lock does
// not know is an error, so a renamed image is not left behind silently.
func PinReadme(readme []byte, l Lock) ([]byte, error) {
	var unknown []string
	out := readmeRefRE.ReplaceAllFunc(readme, func(m []byte) []byte {
		sub := readmeRefRE.FindSubmatch(m)
		n := string(sub[1])
		if !isSortieName(n) {
			return m
		}
		d, ok := l.Digest(n)
		if !ok {
			unknown = append(unknown, n)
			return m
		}
		return []byte(n + "@" + d)
	})
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("README names images the lock does not pin: %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

// ReadmeSnippet returns the README block that pins the images of l: a
// fenced block with one name@digest line per image, which PinReadme keeps
// current and the pin test compares with the lock.
func ReadmeSnippet(l Lock) string {
	var b bytes.Buffer
	b.WriteString("```text\n")
	for _, e := range l.Images {
		fmt.Fprintf(&b, "%s@%s\n", e.Name, e.Digest)
	}
	b.WriteString("```\n")
	return b.String()
}
