package kube

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEventTime(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Unix(int64(s), 0)) }
	created := metav1.ObjectMeta{CreationTimestamp: at(1)}
	for _, c := range []struct {
		name string
		e    corev1.Event
		want int
	}{
		{"last seen wins", corev1.Event{ObjectMeta: created, LastTimestamp: at(4), EventTime: metav1.NewMicroTime(time.Unix(3, 0)), FirstTimestamp: at(2)}, 4},
		{"events.k8s.io shape", corev1.Event{ObjectMeta: created, EventTime: metav1.NewMicroTime(time.Unix(3, 0)), FirstTimestamp: at(2)}, 3},
		{"first seen only", corev1.Event{ObjectMeta: created, FirstTimestamp: at(2)}, 2},
		{"made", corev1.Event{ObjectMeta: created}, 1},
	} {
		if got := EventTime(&c.e); !got.Equal(time.Unix(int64(c.want), 0)) {
			t.Errorf("%s: %v, want %d", c.name, got, c.want)
		}
	}
}
