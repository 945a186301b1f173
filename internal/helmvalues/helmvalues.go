// Package helmvalues reads and writes a Helm release's values, the nested
// maps a chart's values.yaml decodes to, by dotted path ("job.enabled"),
// so the kickoff that composes a release's values and the chart's tests
// that render it spell a value's place the same way.
package helmvalues

import (
	"strings"

	"helm.sh/helm/v3/pkg/chartutil"
)

// Lookup returns the value at a dotted path of nested maps, or nil.
func Lookup(m map[string]any, path string) any {
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := asMap(cur)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

// Set sets the value at a dotted path, making maps on the way and
// replacing whatever on the way is not a map.
func Set(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := asMap(m[p])
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

// Clone copies nested maps and slices, so values changed for one release
// never alias the base they were made from.
func Clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	if m, ok := asMap(v); ok {
		return Clone(m)
	}
	if s, ok := v.([]any); ok {
		out := make([]any, len(s))
		for i, e := range s {
			out[i] = cloneValue(e)
		}
		return out
	}
	return v
}

// asMap sees through chartutil.Values, which Helm hands out for the same
// nested maps under its own name.
func asMap(v any) (map[string]any, bool) {
	switch t := v.(type) {
	case map[string]any:
		return t, true
	case chartutil.Values:
		return t, true
	}
	return nil, false
}
