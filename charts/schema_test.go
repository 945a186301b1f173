package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sortie-soak/sortie/internal/helmvalues"
)

// schemaNode resolves a "#/definitions/x" reference against root.
func schemaNode(t *testing.T, root, node map[string]any) map[string]any {
	t.Helper()
	ref, ok := node["$ref"].(string)
	if !ok {
		return node
	}
	name, ok := strings.CutPrefix(ref, "#/definitions/")
	if !ok {
		t.Fatalf("unexpected $ref %q", ref)
	}
	def, ok := root["definitions"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("$ref %q names no definition", ref)
	}
	return def
}

// TestSchemaCoversValues walks values.yaml beside values.schema.json: every
// key of values.yaml is described by the schema and every key the schema
// describes has a default in values.yaml; and at every level the schema
// closes (additionalProperties false), a key nobody knows is refused with a
// message that names where.
func TestSchemaCoversValues(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(c.Schema, &root); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	if root["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("$schema %v, want draft-07", root["$schema"])
	}
	// Keys the schema knows that values.yaml may leave out: Helm's globals,
	// and resource limits (none by default).
	optional := map[string]bool{
		"/global": true, "/engine/resources/limits": true, "/job/resources/limits": true,
	}
	plan := readPlan(t)
	var closed []string
	var walk func(path []string, values map[string]any, node map[string]any)
	walk = func(path []string, values map[string]any, node map[string]any) {
		node = schemaNode(t, root, node)
		where := "/" + strings.Join(path, "/")
		if node["type"] != "object" {
			t.Errorf("%s: schema type %v for a map value", where, node["type"])
			return
		}
		props, _ := node["properties"].(map[string]any)
		if node["additionalProperties"] != false {
			// A free-form map (labels, resources, affinity): its keys are the
			// user's.
			return
		}
		closed = append(closed, where)
		for k, v := range values {
			p, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s: values.yaml key %q is not in the schema", where, k)
				continue
			}
			if m, ok := v.(map[string]any); ok {
				walk(append(slices.Clone(path), k), m, p)
			}
		}
		for k := range props {
			if optional["/"+strings.Join(append(slices.Clone(path), k), "/")] {
				continue
			}
			if _, ok := values[k]; !ok {
				t.Errorf("%s: schema key %q has no default in values.yaml", where, k)
			}
		}
		// An unknown key at this level is refused, and the message says where.
		v := vals("plan", plan)
		if len(path) > 0 {
			helmvalues.Set(v, strings.Join(path, ".")+".bogusKey", 1)
		} else {
			v["bogusKey"] = 1
		}
		_, err := Render(v, testRelease, testNamespace)
		if err == nil || !strings.Contains(err.Error(), "'"+strings.TrimSuffix(where, "/")+"'") ||
			!strings.Contains(err.Error(), "bogusKey") {
			t.Errorf("%s: an unknown key gave %v, want a refusal naming it", where, err)
		}
	}
	walk(nil, c.Values, root)
	// The walk reached the nested objects, not only the top.
	for _, want := range []string{"/images/engine", "/images/driver", "/engine", "/job", "/report", "/networkPolicy", "/serviceAccount"} {
		if !slices.Contains(closed, want) {
			t.Errorf("the schema does not close %s (closed: %q)", want, closed)
		}
	}
}

// TestReadmeListsEveryValue: the chart's README documents every value of
// values.yaml (each as `path` in its table), and nothing that is not one.
func TestReadmeListsEveryValue(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(c.Schema, &root); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(ChartName, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	var walk func(prefix string, values map[string]any, node map[string]any)
	walk = func(prefix string, values map[string]any, node map[string]any) {
		props, _ := schemaNode(t, root, node)["properties"].(map[string]any)
		for k, v := range values {
			p := prefix + k
			sub, _ := props[k].(map[string]any)
			// Resources are a Kubernetes type, documented as one value.
			if m, ok := v.(map[string]any); ok && sub != nil && sub["$ref"] != "#/definitions/resources" &&
				schemaNode(t, root, sub)["additionalProperties"] == false {
				walk(p+".", m, sub)
				continue
			}
			want = append(want, p)
		}
	}
	walk("", c.Values, root)
	slices.Sort(want)
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z.]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		got = append(got, m[1])
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("README values table (-values.yaml +README):\n%s", diff)
	}
}
