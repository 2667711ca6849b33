package storeurl

import (
	"context"
	"io"
	"net/url"
	"strings"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencek8s"
)

func init() {
	register("k8s", scheme{open: openK8s, hostOptional: true, hostless: true, forms: []string{
		"k8s:///namespace (Leases; in a pod, or with ~/.kube/config)",
		"k8s:///namespace?kubeconfig=/path&context=name",
	}})
}

// openK8s opens k8s:///[namespace][?kubeconfig=PATH&context=NAME]: Leases
// in namespace (default: the kubeconfig context's, or the pod's, or
// "default"), on the API server of the kubeconfig at PATH (default: as
// kubectl finds it: $KUBECONFIG, ~/.kube/config) and its context NAME
// (default: its current context), or, with no kubeconfig at all, of the
// cluster the program runs in (its service account).
func openK8s(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	if u.Host != "" || u.User != nil {
		return nil, nil, badURL(u, "a k8s URL names no server: the API server comes from the kubeconfig, or from the pod the program runs in")
	}
	q := u.Query()
	for p := range q {
		if p != "kubeconfig" && p != "context" {
			return nil, nil, badURL(u, "unknown parameter %q; a k8s URL takes kubeconfig and context", p)
		}
	}
	ns := strings.Trim(u.Path, "/")
	if strings.Contains(ns, "/") {
		return nil, nil, badURL(u, "the path is one namespace, not %q", ns)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if p := q.Get("kubeconfig"); p != "" {
		rules.ExplicitPath = p
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: q.Get("context")}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, err
	}
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, nil, err
		}
	}
	cfg.UserAgent = "fence"
	d, err := fencek8s.NewForConfig(cfg, ns)
	if err != nil {
		return nil, nil, err
	}
	return d, nopCloser{}, nil
}
