package kubetest

import (
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

func TestLine(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	deps := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	list := k8stesting.NewListAction(pods, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "aether-test", metav1.ListOptions{})
	list.ListRestrictions = k8stesting.ListRestrictions{Labels: labels.SelectorFromSet(labels.Set{"app": "x"}), Fields: fields.Everything()}
	for _, tc := range []struct {
		action k8stesting.Action
		want   string
	}{
		{k8stesting.NewListAction(pods, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "aether-test", metav1.ListOptions{}), "list pods ns=aether-test"},
		{list, "list pods ns=aether-test labels=app=x"},
		{k8stesting.NewGetAction(deps, "ns", "svc-1"), "get deployments ns=ns name=svc-1"},
		{k8stesting.NewPatchAction(deps, "ns", "svc-1", types.StrategicMergePatchType, []byte(`{"a":1}`)), `patch deployments ns=ns name=svc-1 type=strategic patch={"a":1}`},
		{k8stesting.NewDeleteAction(deps, "ns", "svc-1"), "delete deployments ns=ns name=svc-1"},
		{k8stesting.NewCreateAction(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, "ns",
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa"}}), "create serviceaccounts ns=ns name=sa"},
		{k8stesting.NewUpdateSubresourceAction(deps, "scale", "ns", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "svc-5"}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}),
			"update deployments/scale ns=ns name=svc-5 replicas=0"},
		{k8stesting.NewRootCreateAction(schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"},
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "patch", Group: "apps", Resource: "deployments", Namespace: "ns", Name: "svc-1"}}}),
			"create selfsubjectaccessreviews verb=patch group=apps resource=deployments namespace=ns name=svc-1"},
	} {
		if got := Line(tc.action); got != tc.want {
			t.Errorf("Line = %q, want %q", got, tc.want)
		}
	}
	m := Mutating([]k8stesting.Action{
		k8stesting.NewGetAction(deps, "ns", "a"),
		k8stesting.NewRootCreateAction(schema.GroupVersionResource{Resource: "selfsubjectaccessreviews"}, &authorizationv1.SelfSubjectAccessReview{}),
		k8stesting.NewDeleteAction(deps, "ns", "a"),
	})
	if len(m) != 1 || m[0] != "delete deployments ns=ns name=a" {
		t.Errorf("Mutating = %q", m)
	}
}
