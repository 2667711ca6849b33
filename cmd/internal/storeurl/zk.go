package storeurl

import (
	"context"
	"io"
	"net/url"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencezk"
)

func init() {
	Register("zk", openZK, "zk://host1:2181,host2:2181/prefix?session_timeout=60s")
}

// openZK opens zk://h1[:2181],h2,.../prefix[?session_timeout=30s]: the
// ensemble's servers (port 2181 by default; give every host a port or
// none), the znode under which the locks live (default /fence), and the
// session timeout (default 60s, the fence command's default TTL; lease TTLs
// may not exceed the session timeout the server grants, which it clamps
// to its maxSessionTimeout: 40s by default).
func openZK(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	if u.User != nil {
		return nil, nil, badURL(u, "a zk URL takes no credentials")
	}
	hosts, err := hostList(u, "2181")
	if err != nil {
		return nil, nil, badURL(u, "%v", err)
	}
	session := 60 * time.Second
	q := u.Query()
	for k := range q {
		if k != "session_timeout" {
			return nil, nil, badURL(u, "unknown parameter %q (zk URLs take session_timeout)", k)
		}
	}
	if s := q.Get("session_timeout"); s != "" {
		if session, err = time.ParseDuration(s); err != nil || session <= 0 {
			return nil, nil, badURL(u, "session_timeout %q is not a positive duration", s)
		}
	}
	var opts []fencezk.Option
	if u.Path != "" && u.Path != "/" {
		opts = append(opts, fencezk.WithRoot(u.Path))
	}
	d, err := fencezk.Dial(hosts, session, opts...)
	if err != nil {
		return nil, nil, err
	}
	return d, d, nil
}
