package storeurl_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fencek8s"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestOpenK8s(t *testing.T) {
	k := testserver.Kube(t)
	kubeconfig := k.Kubeconfig()
	for raw, ns := range map[string]string{
		"k8s:///kube-system?kubeconfig=" + kubeconfig:             "kube-system",
		"k8s://?kubeconfig=" + kubeconfig + "&context=fence-test": "default", // the context names none
	} {
		useStore(t, raw, func(d fence.Driver) {
			if k, ok := d.(*fencek8s.Store); !ok || k.Namespace() != ns {
				t.Errorf("Open(%q) = %T; want a *fencek8s.Store on namespace %s", raw, d, ns)
			}
		})
	}
	t.Setenv("KUBECONFIG", kubeconfig) // as kubectl finds it
	useStore(t, "k8s:///default", func(fence.Driver) {})
}

func TestK8sURLErrors(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{
		"k8s://apiserver:6443/ns",
		"k8s://user@/ns",
		"k8s:///a/b",
		"k8s:///ns?namespace=x",
	} {
		_, _, err := storeurl.Open(ctx, raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q): %v; want ErrBadURL", raw, err)
		}
	}
	_, _, err := storeurl.Open(ctx, "k8s:///ns?kubeconfig=/nonexistent/kubeconfig")
	if err == nil || errors.Is(err, storeurl.ErrBadURL) {
		t.Errorf("Open with a missing kubeconfig: %v; want an error opening it", err)
	}
}
