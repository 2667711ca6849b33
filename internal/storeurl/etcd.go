package storeurl

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
)

func init() {
	Register("etcd", openEtcd, "etcd://host1:2379,host2:2379,host3:2379/prefix")
}

// openEtcd opens etcd://[user:password@]h1[:2379],h2,.../prefix: the
// cluster's client endpoints (plain HTTP, port 2379 by default; give every
// host a port or none) and the key prefix of the locks (default "fence").
func openEtcd(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	if u.RawQuery != "" {
		return nil, nil, badURL(u, "an etcd URL takes no parameters")
	}
	hosts, err := hostList(u, "2379")
	if err != nil {
		return nil, nil, badURL(u, "%v", err)
	}
	cfg := clientv3.Config{DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	for _, h := range hosts {
		cfg.Endpoints = append(cfg.Endpoints, "http://"+h)
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	var opts []fenceetcd.Option
	if p := strings.Trim(u.Path, "/"); p != "" {
		opts = append(opts, fenceetcd.WithPrefix(p))
	}
	d := fenceetcd.New(cli, opts...)
	return d, closerFunc(func() error { return errors.Join(d.Close(), cli.Close()) }), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// hostList returns the comma-separated hosts of u, each with a port
// (defaultPort if it has none).
func hostList(u *url.URL, defaultPort string) ([]string, error) {
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	var hosts []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, errors.New("empty host in the host list")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPort)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}
