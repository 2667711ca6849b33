package storeurl

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencenats"
)

func init() {
	// nats.go takes a user info without a password as a token.
	register("nats", scheme{open: openNATS, userIsSecret: true, credentials: []string{"token"},
		forms: []string{"nats://host:4222/bucket"}})
}

// openNATS opens nats://[user:password@|token@]h1[:4222],h2,.../bucket: the
// servers (port 4222 by default; give every host a port or none) and the
// JetStream KV bucket (default "fence"), created if missing.
func openNATS(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	if u.RawQuery != "" {
		return nil, nil, badURL(u, "a nats URL takes no parameters")
	}
	hosts, err := hostList(u, "4222")
	if err != nil {
		return nil, nil, badURL(u, "%v", err)
	}
	bucket := strings.Trim(u.Path, "/")
	if bucket == "" {
		bucket = fencenats.DefaultBucket
	}
	if strings.ContainsAny(bucket, "/. ") {
		return nil, nil, badURL(u, "bucket %q: a bucket name has letters, digits, - and _ only", bucket)
	}
	servers := make([]string, len(hosts))
	for i, h := range hosts {
		s := url.URL{Scheme: "nats", Host: h, User: u.User}
		servers[i] = s.String()
	}
	d, err := fencenats.Dial(ctx, strings.Join(servers, ","), bucket)
	if errors.Is(err, nats.ErrNoServers) {
		// nats.go drops a refused connection's error and says only that no
		// server is available: find out why.
		if why := refused(ctx, "NATS server", hosts); why != nil {
			err = why
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return d, d, nil
}
