package chart

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/sortie-soak/sortie/internal/helmvalues"
)

// testRelease and testNamespace are the release the tests render; the
// plan in testdata/plan.yaml points its dns pool at their Service.
const (
	testRelease   = "soak"
	testNamespace = "aether-test"
)

func readPlan(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// vals builds a values map from dotted paths and values:
// vals("engine.kind", "Deployment", "job.enabled", false).
func vals(kv ...any) map[string]any {
	if len(kv)%2 != 0 {
		panic("vals: odd number of arguments")
	}
	// Every release names its targets (the render fails otherwise):
	// those of testdata/plan.yaml, unless the test says otherwise.
	m := map[string]any{"engine": map[string]any{"allowTargets": []any{"*.aether-test.mesh"}}}
	for i := 0; i < len(kv); i += 2 {
		helmvalues.Set(m, kv[i].(string), kv[i+1])
	}
	return m
}

// rendered is one release decoded into typed objects. Each field is nil
// when the release has no such object; every decoded object is in all.
type rendered struct {
	manifests map[string]string
	all       []runtime.Object
	kinds     []string // one per object, in Paths order

	daemonSet  *appsv1.DaemonSet
	deployment *appsv1.Deployment
	service    *corev1.Service
	policy     *networkingv1.NetworkPolicy
	account    *corev1.ServiceAccount
	configMap  *corev1.ConfigMap
	claim      *corev1.PersistentVolumeClaim
	job        *batchv1.Job
}

// enginePod is the engines' pod template, of the DaemonSet or the
// Deployment.
func (r *rendered) enginePod() *corev1.PodTemplateSpec {
	switch {
	case r.daemonSet != nil:
		return &r.daemonSet.Spec.Template
	case r.deployment != nil:
		return &r.deployment.Spec.Template
	}
	return nil
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// strictYAML decodes like the API server's strict field validation: an
// unknown or duplicated field is an error, which catches a misspelled field
// in a template that the lenient decoder would drop.
var strictYAML = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// decode decodes every document of manifests with client-go's scheme.
func decode(manifests map[string]string) (*rendered, error) {
	r := &rendered{manifests: manifests}
	deser := scheme.Codecs.UniversalDeserializer()
	for _, p := range Paths(manifests) {
		for _, doc := range docSep.Split(manifests[p], -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			obj, gvk, err := deser.Decode([]byte(doc), nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: decode: %w", p, err)
			}
			if _, _, err := strictYAML.Decode([]byte(doc), nil, nil); err != nil {
				return nil, fmt.Errorf("%s: strict decode: %w", p, err)
			}
			r.all = append(r.all, obj)
			r.kinds = append(r.kinds, gvk.Kind)
			var dup bool
			switch o := obj.(type) {
			case *appsv1.DaemonSet:
				dup, r.daemonSet = r.daemonSet != nil, o
			case *appsv1.Deployment:
				dup, r.deployment = r.deployment != nil, o
			case *corev1.Service:
				dup, r.service = r.service != nil, o
			case *networkingv1.NetworkPolicy:
				dup, r.policy = r.policy != nil, o
			case *corev1.ServiceAccount:
				dup, r.account = r.account != nil, o
			case *corev1.ConfigMap:
				dup, r.configMap = r.configMap != nil, o
			case *corev1.PersistentVolumeClaim:
				dup, r.claim = r.claim != nil, o
			case *batchv1.Job:
				dup, r.job = r.job != nil, o
			default:
				return nil, fmt.Errorf("%s: unexpected kind %s", p, gvk.Kind)
			}
			if dup {
				return nil, fmt.Errorf("%s: a second %s", p, gvk.Kind)
			}
		}
	}
	return r, nil
}

// renderDecode renders values as the test release and decodes the result.
func renderDecode(t testing.TB, values map[string]any) *rendered {
	t.Helper()
	m, err := Render(values, testRelease, testNamespace)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	r, err := decode(m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// container returns the container named name of pod, failing the test if
// there is none.
func container(t testing.TB, pod *corev1.PodTemplateSpec, name string) *corev1.Container {
	t.Helper()
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	t.Fatalf("pod has no container %q", name)
	return nil
}

// argAfter returns the argument after flag in args, and whether flag is
// there.
func argAfter(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func hasArg(args []string, flag string) bool {
	for _, a := range args {
		if a == flag {
			return true
		}
	}
	return false
}

func metaOf(o runtime.Object) (metav1.Object, error) { return meta.Accessor(o) }

func metav1LabelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

func policyTypes(np *networkingv1.NetworkPolicy) []string {
	var out []string
	for _, p := range np.Spec.PolicyTypes {
		out = append(out, string(p))
	}
	return out
}
