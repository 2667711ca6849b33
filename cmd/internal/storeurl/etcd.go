package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
)

func init() {
	Register("etcd", openEtcd, "etcd://host1:2379,host2:2379,host3:2379/prefix")
}

// openEtcd opens etcd://[user:password@]h1[:2379],h2,.../prefix: the
// cluster's client endpoints (plain HTTP, port 2379 by default; give every
// host a port or none) and the key prefix of the locks (default "fence").
func openEtcd(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
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
		// New authenticates, waiting up to DialTimeout for a connection.
		if err := refused(ctx, "etcd endpoint", hosts); err != nil {
			return nil, nil, err
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := awaitConnection(ctx, cli, hosts); err != nil {
		cli.Close()
		return nil, nil, err
	}
	var opts []fenceetcd.Option
	if p := strings.Trim(u.Path, "/"); p != "" {
		opts = append(opts, fenceetcd.WithPrefix(p))
	}
	d := fenceetcd.New(cli, opts...)
	return d, closerFunc(func() error { return errors.Join(d.Close(), cli.Close()) }), nil
}

// connectWait bounds how long opening an etcd store waits for a
// connection: gRPC's own connect timeout, and the fence command's limit
// for opening a store.
const connectWait = 20 * time.Second

// awaitConnection waits until the client is connected to an endpoint.
// If every endpoint fails first (gRPC's TRANSIENT_FAILURE), it returns
// why, as refused finds it: "connection refused" at once, where the
// client's calls would wait out their deadline and say only that. It
// returns ctx's error if ctx ends first (an endpoint that does not
// answer), and nil after connectWait: the store's calls then report what
// goes wrong, as they would have.
func awaitConnection(ctx context.Context, cli *clientv3.Client, hosts []string) error {
	wctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	conn := cli.ActiveConnection()
	conn.Connect()
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure:
			if err := refused(wctx, "etcd endpoint", hosts); err != nil {
				return err
			}
		}
		if !conn.WaitForStateChange(wctx, state) {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("no etcd endpoint connected: %w", err)
			}
			return nil
		}
	}
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
