package churn

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// restartedAtAnnotation is the pod template annotation kubectl's rollout
// restart sets; changing it changes the template, so the controller
// replaces every pod by its usual rollout.
const restartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// restartPatch is the strategic merge patch of a rollout restart at t.
func restartPatch(t time.Time) []byte {
	return fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, restartedAtAnnotation, stamp(t))
}

// getWorkload reads ref.
func (c *Churner) getWorkload(ctx context.Context, ref Ref) (runtime.Object, error) {
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	defer cancel()
	apps := c.Client.AppsV1()
	switch ref.Kind {
	case KindDeployment:
		return apps.Deployments(ref.Namespace).Get(rctx, ref.Name, metav1.GetOptions{})
	case KindDaemonSet:
		return apps.DaemonSets(ref.Namespace).Get(rctx, ref.Name, metav1.GetOptions{})
	case KindStatefulSet:
		return apps.StatefulSets(ref.Namespace).Get(rctx, ref.Name, metav1.GetOptions{})
	}
	return nil, fmt.Errorf("unknown kind %q", ref.Kind)
}

// restart starts a rollout of ref and returns the generation the
// controller must observe for it.
func (c *Churner) restart(ctx context.Context, ref Ref, at time.Time) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, c.Opts.RequestTimeout)
	defer cancel()
	apps := c.Client.AppsV1()
	patch := restartPatch(at)
	opts := metav1.PatchOptions{FieldManager: fieldManager}
	var obj metav1.Object
	var err error
	switch ref.Kind {
	case KindDeployment:
		obj, err = apps.Deployments(ref.Namespace).Patch(rctx, ref.Name, types.StrategicMergePatchType, patch, opts)
	case KindDaemonSet:
		obj, err = apps.DaemonSets(ref.Namespace).Patch(rctx, ref.Name, types.StrategicMergePatchType, patch, opts)
	case KindStatefulSet:
		obj, err = apps.StatefulSets(ref.Namespace).Patch(rctx, ref.Name, types.StrategicMergePatchType, patch, opts)
	default:
		return 0, fmt.Errorf("unknown kind %q", ref.Kind)
	}
	if err != nil {
		return 0, fmt.Errorf("rollout restart: %w", err)
	}
	return obj.GetGeneration(), nil
}

// errRolloutFailed is a rollout the controller itself gave up on.
type errRolloutFailed struct{ why string }

func (e errRolloutFailed) Error() string { return e.why }

// rolloutDone says whether the rollout of obj that made generation gen has
// completed, and if not, where it stands. A non-nil error is a rollout that
// will not complete (the controller reported its progress deadline passed).
func rolloutDone(obj runtime.Object, gen int64) (bool, string, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		st := o.Status
		want := replicas(o.Spec.Replicas)
		if st.ObservedGeneration < gen {
			return false, fmt.Sprintf("observedGeneration=%d/%d", st.ObservedGeneration, gen), nil
		}
		for _, cond := range st.Conditions {
			if cond.Type == appsv1.DeploymentProgressing && cond.Reason == "ProgressDeadlineExceeded" {
				return false, "", errRolloutFailed{fmt.Sprintf("progress deadline exceeded: %s", cond.Message)}
			}
		}
		switch {
		case st.UpdatedReplicas < want:
			return false, fmt.Sprintf("updated=%d/%d", st.UpdatedReplicas, want), nil
		case st.Replicas > st.UpdatedReplicas:
			return false, fmt.Sprintf("old replicas terminating: replicas=%d updated=%d", st.Replicas, st.UpdatedReplicas), nil
		case st.AvailableReplicas < st.UpdatedReplicas:
			return false, fmt.Sprintf("available=%d/%d", st.AvailableReplicas, want), nil
		}
		return true, "", nil
	case *appsv1.DaemonSet:
		st := o.Status
		if st.ObservedGeneration < gen {
			return false, fmt.Sprintf("observedGeneration=%d/%d", st.ObservedGeneration, gen), nil
		}
		switch {
		case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
			return false, fmt.Sprintf("updated=%d/%d", st.UpdatedNumberScheduled, st.DesiredNumberScheduled), nil
		case st.NumberAvailable < st.DesiredNumberScheduled:
			return false, fmt.Sprintf("available=%d/%d", st.NumberAvailable, st.DesiredNumberScheduled), nil
		}
		return true, "", nil
	case *appsv1.StatefulSet:
		st := o.Status
		want := replicas(o.Spec.Replicas)
		if st.ObservedGeneration < gen {
			return false, fmt.Sprintf("observedGeneration=%d/%d", st.ObservedGeneration, gen), nil
		}
		switch {
		case st.UpdatedReplicas < want:
			return false, fmt.Sprintf("updated=%d/%d", st.UpdatedReplicas, want), nil
		case st.UpdateRevision != st.CurrentRevision:
			return false, fmt.Sprintf("revision %s not yet current (%s)", st.UpdateRevision, st.CurrentRevision), nil
		case st.ReadyReplicas < want:
			return false, fmt.Sprintf("ready=%d/%d", st.ReadyReplicas, want), nil
		case st.AvailableReplicas < want:
			return false, fmt.Sprintf("available=%d/%d", st.AvailableReplicas, want), nil
		}
		return true, "", nil
	}
	return false, "", fmt.Errorf("cannot follow the rollout of a %T", obj)
}

// replicas reads an optional replica count the way the API defaults it.
func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
