// Package kubetest renders the actions a client-go fake clientset recorded
// as one stable line each, so tests of the harness programs can compare the
// ordered API calls a run made with a golden transcript.
package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// Line renders one action, e.g. "list pods ns=aether-test" or
// "patch deployments ns=aether-test name=svc-1 type=strategic patch={...}".
func Line(a k8stesting.Action) string {
	var b strings.Builder
	b.WriteString(a.GetVerb())
	b.WriteString(" ")
	b.WriteString(a.GetResource().Resource)
	if sub := a.GetSubresource(); sub != "" {
		b.WriteString("/" + sub)
	}
	if ns := a.GetNamespace(); ns != "" {
		b.WriteString(" ns=" + ns)
	}
	field := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	switch a := a.(type) {
	// Concrete types: the interfaces overlap (a patch also has GetName).
	case k8stesting.GetActionImpl:
		field("name", a.GetName())
	case k8stesting.ListActionImpl:
		r := a.GetListRestrictions()
		if !r.Labels.Empty() {
			field("labels", r.Labels.String())
		}
		if !r.Fields.Empty() {
			field("fields", r.Fields.String())
		}
	case k8stesting.DeleteActionImpl:
		field("name", a.GetName())
	case k8stesting.PatchActionImpl:
		field("name", a.GetName())
		field("type", patchType(a.GetPatchType()))
		field("patch", string(a.GetPatch()))
	case k8stesting.CreateActionImpl:
		objectFields(field, a.GetObject())
	case k8stesting.UpdateActionImpl:
		objectFields(field, a.GetObject())
	}
	return b.String()
}

// objectFields adds the name of a created or updated object, and the fields
// that say what the call asked for when the object is a request rather than
// a resource (a scale, an access review).
func objectFields(field func(k, v string), obj any) {
	switch o := obj.(type) {
	case *autoscalingv1.Scale:
		field("name", o.Name)
		field("replicas", fmt.Sprint(o.Spec.Replicas))
		return
	case *authorizationv1.SelfSubjectAccessReview:
		if ra := o.Spec.ResourceAttributes; ra != nil {
			field("verb", ra.Verb)
			field("group", ra.Group)
			field("resource", ra.Resource)
			field("subresource", ra.Subresource)
			field("namespace", ra.Namespace)
			field("name", ra.Name)
		}
		return
	}
	if m, err := meta.Accessor(obj); err == nil {
		field("name", m.GetName())
	}
}

func patchType(t types.PatchType) string {
	switch t {
	case types.StrategicMergePatchType:
		return "strategic"
	case types.MergePatchType:
		return "merge"
	case types.JSONPatchType:
		return "json"
	case types.ApplyPatchType, types.ApplyCBORPatchType:
		return "apply"
	}
	return string(t)
}

// Transcript renders actions one per line, each ending in a newline.
func Transcript(actions []k8stesting.Action) string {
	var b strings.Builder
	for _, a := range actions {
		b.WriteString(Line(a))
		b.WriteString("\n")
	}
	return b.String()
}

// Mutating returns the lines of the actions that change the cluster:
// everything but get, list and watch, and the access reviews (a create
// that only asks a question).
func Mutating(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		if a.GetResource().Resource == "selfsubjectaccessreviews" {
			continue
		}
		out = append(out, Line(a))
	}
	return out
}

// Golden compares got with the file at path, or rewrites the file when
// update is set (the test package's -update flag).
func Golden(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (-want +got):\n%s", path, cmp.Diff(strings.Split(string(want), "\n"), strings.Split(got, "\n")))
	}
}

// Recorder is a golden transcript built by hand: a test's fakes add the
// lines of the calls they see (a Helm call, an action they act on), from
// any goroutine, in the order they were made.
type Recorder struct {
	mu    sync.Mutex
	lines []string
}

// Add appends one line.
func (r *Recorder) Add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, s)
}

// String is every line, each ended by a newline; "" when there is none.
func (r *Recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == 0 {
		return ""
	}
	return strings.Join(r.lines, "\n") + "\n"
}
