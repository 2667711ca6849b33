package fencek8s

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The lock-delay annotation binds only the holder it names, and a
// malformed one is an error, never read as no delay.
func TestLockDelayAnnotation(t *testing.T) {
	lease := func(holder, v string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "k", Annotations: map[string]string{}}}
		l.Spec.HolderIdentity = ptr(holder)
		if v != "" {
			l.Annotations[AnnotationLockDelay] = v
		}
		return l
	}
	for _, tc := range []struct {
		holder, v string
		want      time.Duration
		bad       bool
	}{
		{"a", "", 0, false},
		{"a", "4000:a", 4 * time.Second, false},
		{"a:b", "1:a:b", time.Millisecond, false},
		{"elector", "4000:a", 0, false}, // a former fence holder's
		{"a", "4000", 0, true},
		{"a", "4s:a", 0, true},
		{"a", "-1:a", 0, true},
		{"a", "99999999999999999:a", 0, true},
	} {
		got, err := lockDelay(lease(tc.holder, tc.v))
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("holder %q, annotation %q: %v, %v; want %v (error: %v)", tc.holder, tc.v, got, err, tc.want, tc.bad)
		}
	}
}
