package saver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// errPVCGone stops both copies: a reader pod would only wait for a claim
// that is not there.
var errPVCGone = errors.New("pvc is gone")

// readerMount is where the reader pod mounts the report PVC.
const readerMount = "/report"

// checkPVC looks for the report PVC before any reader pod is made for it.
// Only NotFound stops the copies; any other answer (a role that may not get
// PVCs, say) leaves the bounded reader wait to decide.
func (s *saver) checkPVC(ctx context.Context) error {
	_, err := s.cs.CoreV1().PersistentVolumeClaims(s.o.Env.Namespace).Get(ctx, s.o.Env.PVC, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s.problem("pvc/%s is gone: neither the results stream nor the report can be read", s.o.Env.PVC)
		return fmt.Errorf("pvc/%s is gone: %w", s.o.Env.PVC, errPVCGone)
	}
	if err != nil {
		s.log.Warn("cannot read the report pvc; trying the reader pod anyway", "pvc", s.o.Env.PVC, "err", err)
	}
	return nil
}

// copyStream copies the results stream. A copy is kept only if it extends
// the one saved before: the stream is only ever appended to, so a shorter or
// different copy is a broken download, never newer data.
func (s *saver) copyStream(ctx context.Context) error {
	dest := filepath.Join(s.o.Dir, FileStream)
	ok, why, err := s.copyFile(ctx, s.o.Env.Stream, FileStream, true, extendsSaved(dest))
	if err != nil {
		return err
	}
	if !ok {
		s.streamWhy = why
		s.problem("results stream not copied: %s", why)
		return nil
	}
	src, _, err := readStreamFile(dest)
	if err != nil {
		s.log.Warn("saved the results stream, which the gate would not grade", "err", err)
		return nil
	}
	s.log.Info("saved the results stream", "executions", len(src.All), "unparseable_lines", len(src.Skipped))
	return nil
}

// extendsSaved accepts a copy of an append-only file (the results stream,
// the live record) only if it extends the one saved at dest before, if
// any: a shorter or different copy is a broken download, never newer data.
func extendsSaved(dest string) func(tmp string) error {
	return func(tmp string) error {
		if _, err := os.Stat(dest); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		ext, err := isPrefixFile(dest, tmp)
		if err != nil {
			return err
		}
		if !ext {
			return fmt.Errorf("the copy does not extend the %s saved earlier (shorter or different), which is kept", filepath.Base(dest))
		}
		return nil
	}
}

// copyLive copies the live record, kept only if it extends the one saved
// before, as the stream is. It is not graded: a copy that fails is a
// problem named in the summary, and the rest of the save goes on.
func (s *saver) copyLive(ctx context.Context) error {
	ok, why, err := s.copyFile(ctx, s.o.Env.Live, FileLive, true, extendsSaved(filepath.Join(s.o.Dir, FileLive)))
	if err != nil {
		return err
	}
	if !ok {
		s.problem("live record not copied: %s", why)
		return nil
	}
	s.log.Info("saved the live record", "file", FileLive)
	return nil
}

// copyReport copies the report; a copy is kept only if it reads as the
// gate reads it.
func (s *saver) copyReport(ctx context.Context) error {
	ok, why, err := s.copyFile(ctx, s.o.Env.Report, FileReport, false, func(tmp string) error {
		_, err := readReportFile(tmp)
		return err
	})
	if err != nil {
		return err
	}
	if !ok {
		s.reportWhy = why
		s.problem("report not copied: %s", why)
		return nil
	}
	s.reportDone = true
	s.log.Info("saved the report")
	return nil
}

// copyFile copies pvcPath off the PVC and saves it as name when the copy is
// whole and accept agrees: in checked chunks when the reader command is
// this project's `sortie cat` (copyChunked), else whole through one reader
// pod. It returns whether the copy was kept and, if not, why in words.
// The error is only for a local write. appendOnly says the file is only
// ever appended to (the stream, the live record), so a copy saved earlier
// is where a chunked copy resumes.
func (s *saver) copyFile(ctx context.Context, pvcPath, name string, appendOnly bool, accept func(tmp string) error) (bool, string, error) {
	if s.chunked() {
		return s.copyChunked(ctx, pvcPath, name, appendOnly, accept)
	}
	return s.copyWhole(ctx, pvcPath, name, accept)
}

// copyWhole prints pvcPath through one reader pod and saves it as name
// when the pod Succeeded, its whole log was read and accept agrees.
func (s *saver) copyWhole(ctx context.Context, pvcPath, name string, accept func(tmp string) error) (bool, string, error) {
	t, err := createTemp(s.o.Dir, name)
	if err != nil {
		return false, "", err
	}
	n, why, _ := s.runReader(ctx, s.readerArgs(pvcPath), t)
	if why != "" {
		t.Abort()
		return false, why, nil
	}
	if err := accept(t.TempName()); err != nil {
		t.Abort()
		return false, fmt.Sprintf("the copy (%d bytes) is not accepted: %v", n, err), nil
	}
	if sameFile(t.TempName(), filepath.Join(s.o.Dir, name)) {
		t.Abort()
		return true, "", nil
	}
	if err := t.Commit(); err != nil {
		return false, "", err
	}
	return true, "", nil
}

// readerArgs is the reader's command line that prints pvcPath, args
// before the file.
func (s *saver) readerArgs(pvcPath string, args ...string) []string {
	cmd := append(append([]string{}, s.o.Env.readerCommand()...), args...)
	return append(cmd, readerMount+"/"+pvcPath)
}

// runReader runs one reader pod with command cmd and copies its whole log
// into w once it Succeeded. It returns the bytes copied and, when the
// output is not whole, why in words, with failed true when the pod ran
// and Failed. The reader pod is deleted before it returns.
func (s *saver) runReader(ctx context.Context, cmd []string, w io.Writer) (n int64, why string, failed bool) {
	pod := s.o.Env.readerPod()
	if err := s.freeReaderName(ctx); err != nil {
		return 0, err.Error(), false
	}
	if _, err := s.cs.CoreV1().Pods(s.o.Env.Namespace).Create(ctx, s.readerPodSpec(cmd), metav1.CreateOptions{}); err != nil {
		return 0, fmt.Sprintf("create pod/%s: %v", pod, err), false
	}
	defer s.deleteReader(ctx)

	phase, detail := s.waitReader(ctx)
	switch phase {
	case corev1.PodSucceeded:
	case corev1.PodFailed:
		// A reader that failed printed why (cat: can't open ...) where the
		// file would have been: that is the reason, not a download.
		var said strings.Builder
		s.readLog(ctx, pod, "reader", false, &limitWriter{w: &said, n: 300})
		why := fmt.Sprintf("pod/%s Failed (%s)", pod, detail)
		if t := strings.TrimSpace(said.String()); t != "" {
			why += "; it said: " + oneLine(t, 200)
		}
		return 0, why, true
	default:
		return 0, fmt.Sprintf("pod/%s did not finish within %s: %s", pod, s.o.CopyTimeout, detail), false
	}
	n, rerr := s.readLog(ctx, pod, "reader", false, w)
	if rerr != nil {
		return n, fmt.Sprintf("the log of pod/%s broke off after %d bytes (%v): the download is not whole", pod, n, rerr), false
	}
	return n, "", false
}

// freeReaderName deletes any pod of the reader's name and waits, bounded,
// until it is gone: first a plain delete, then a forced one.
func (s *saver) freeReaderName(ctx context.Context) error {
	pods := s.cs.CoreV1().Pods(s.o.Env.Namespace)
	name := s.o.Env.readerPod()
	for i, try := range []struct {
		grace *int64
		wait  time.Duration
	}{{nil, s.o.DeleteTimeout}, {ptr(int64(0)), s.o.ForceDeleteTimeout}} {
		err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: try.grace})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			s.log.Warn("cannot delete the earlier reader pod", "pod", name, "err", err, "forced", i > 0)
		}
		deadline := s.clk.Now().Add(try.wait)
		for {
			_, err := pods.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if !s.clk.Now().Before(deadline) {
				break
			}
			if err := s.clk.Sleep(ctx, s.o.ReaderPoll); err != nil {
				return fmt.Errorf("waiting for the earlier pod/%s to go: %w", name, err)
			}
		}
	}
	return fmt.Errorf("an earlier pod/%s could not be deleted within %s (is the node that holds pvc/%s answering?)",
		name, s.o.DeleteTimeout+s.o.ForceDeleteTimeout, s.o.Env.PVC)
}

// deleteReader deletes the reader pod without waiting for it to go: the
// next copy frees the name first anyway.
func (s *saver) deleteReader(ctx context.Context) {
	err := s.cs.CoreV1().Pods(s.o.Env.Namespace).Delete(ctx, s.o.Env.readerPod(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn("cannot delete the reader pod; teardown removes it", "pod", s.o.Env.readerPod(), "err", err)
	}
}

// waitReader polls the reader pod until it Succeeded or Failed, bounded by
// CopyTimeout. It returns the last phase and, for anything but Succeeded,
// what the pod says about itself.
func (s *saver) waitReader(ctx context.Context) (corev1.PodPhase, string) {
	name := s.o.Env.readerPod()
	deadline := s.clk.Now().Add(s.o.CopyTimeout)
	phase, detail := corev1.PodPhase(""), "never seen"
	for {
		p, err := s.cs.CoreV1().Pods(s.o.Env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			phase, detail = p.Status.Phase, describePod(p)
			if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
				return phase, detail
			}
		} else {
			detail = err.Error()
		}
		if !s.clk.Now().Before(deadline) {
			return phase, detail
		}
		if err := s.clk.Sleep(ctx, s.o.ReaderPoll); err != nil {
			return phase, detail + " (" + err.Error() + ")"
		}
	}
}

// describePod says why a pod is where it is: its phase, an unschedulable
// reason, each container's waiting or terminated state.
func describePod(p *corev1.Pod) string {
	parts := []string{"phase " + orDash(string(p.Status.Phase))}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			parts = append(parts, "not scheduled: "+oneLine(c.Reason+" "+c.Message, 200))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("container %s waiting: %s", cs.Name,
				oneLine(cs.State.Waiting.Reason+" "+cs.State.Waiting.Message, 200)))
		case cs.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("container %s exited %d: %s", cs.Name,
				cs.State.Terminated.ExitCode, oneLine(cs.State.Terminated.Reason, 100)))
		}
	}
	return strings.Join(parts, ", ")
}

// readerPodSpec is the hardened pod that prints one file of the report PVC
// to its log: `kubectl exec` is denied on some clusters, a pod's log is not.
// It mounts the claim read-only, runs as a non-root user with no
// capabilities, no service account token and a read-only root, lands on the
// volume's node by the volume's own node affinity, and tolerates every taint
// so a cordoned or tainted node still serves it.
func (s *saver) readerPodSpec(cmd []string) *corev1.Pod {
	env := s.o.Env
	// The pod removes itself from the node's work if the saver dies before
	// deleting it: a cat that has not ended by then never will.
	deadline := int64((s.o.CopyTimeout + time.Minute) / time.Second)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      env.readerPod(),
			Namespace: env.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":       "sortie",
				"app.kubernetes.io/component":  "report-reader",
				"app.kubernetes.io/managed-by": "sortie-save",
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(5)),
			ActiveDeadlineSeconds:         &deadline,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr(true),
				RunAsUser:      ptr(int64(65532)),
				RunAsGroup:     ptr(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            "reader",
				Image:           env.ReaderImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         cmd,
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr(true),
					RunAsUser:                ptr(int64(65532)),
					AllowPrivilegeEscalation: ptr(false),
					ReadOnlyRootFilesystem:   ptr(true),
					Privileged:               ptr(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("10m"),
						corev1.ResourceMemory: resource.MustParse("16Mi"),
					},
					Limits: corev1.ResourceList{
						corev1.ResourceMemory: resource.MustParse("64Mi"),
					},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "report", MountPath: readerMount, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{
				Name: "report",
				VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: env.PVC, ReadOnly: true},
				},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// limitWriter keeps the first n bytes and drops the rest without error, so
// a failed reader's message is read whole but kept short.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
