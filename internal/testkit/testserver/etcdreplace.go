package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
)

// ReplaceEmpty brings member i back the way an operator replaces a member
// whose disk was lost (etcd's runtime reconfiguration): it kills the
// member, removes it from the cluster, adds a new member with the same
// name and peer URL, and starts it on an empty data directory to join the
// cluster as it is (--initial-cluster-state existing). The new member has
// a new ID and copies the cluster's data from the leader; the others keep
// a quorum throughout. Unlike Restart it returns its error, so any
// goroutine may call it.
func (c *EtcdClusterServer) ReplaceEmpty(i int) error {
	if i < 0 || i >= len(c.Members) || len(c.Members) < 3 {
		return fmt.Errorf("testserver: ReplaceEmpty(%d) of a cluster of %d (needs 3 members at least)", i, len(c.Members))
	}
	m := c.Members[i]
	m.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	// Remove the member, then add it back: each retried on another
	// member while the others elect a leader or catch up.
	err := c.onOthers(ctx, i, func(ctx context.Context, ep string) error {
		id, err := etcdMemberID(ctx, ep, m.name)
		if err != nil || id == "" {
			return err // "" : already removed
		}
		_, err = etcdPost(ctx, ep+"/v3/cluster/member/remove", map[string]string{"ID": id})
		return err
	})
	if err != nil {
		return fmt.Errorf("testserver: removing etcd member %s: %w", m.name, err)
	}
	err = c.onOthers(ctx, i, func(ctx context.Context, ep string) error {
		_, err := etcdPost(ctx, ep+"/v3/cluster/member/add", map[string][]string{"peerURLs": {m.peerURL}})
		return err
	})
	if err != nil {
		return fmt.Errorf("testserver: adding etcd member %s back: %w", m.name, err)
	}
	if err := os.RemoveAll(m.data); err != nil {
		return err
	}
	m.mu.Lock()
	if j := slices.Index(m.args, "--initial-cluster-state"); j >= 0 && j+1 < len(m.args) {
		m.args = slices.Clone(m.args)
		m.args[j+1] = "existing"
	}
	m.mu.Unlock()
	return m.start()
}

// onOthers runs f on the endpoint of each member but skip in turn until
// it succeeds, for as long as ctx allows.
func (c *EtcdClusterServer) onOthers(ctx context.Context, skip int, f func(ctx context.Context, endpoint string) error) error {
	var last error
	for n := 0; ; n++ {
		j := n % len(c.Members)
		if j != skip {
			try, cancel := context.WithTimeout(ctx, 5*time.Second)
			last = f(try, c.Members[j].Endpoint())
			cancel()
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// etcdMemberID returns the ID (as the gateway writes it: a decimal
// string) of the member named name, "" if the cluster has none.
func etcdMemberID(ctx context.Context, endpoint, name string) (string, error) {
	b, err := etcdPost(ctx, endpoint+"/v3/cluster/member/list", map[string]any{})
	if err != nil {
		return "", err
	}
	var out struct {
		Members []struct {
			ID   string
			Name string
		}
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return "", fmt.Errorf("%v: %s", err, b)
	}
	for _, mb := range out.Members {
		if mb.Name == name {
			return mb.ID, nil
		}
	}
	return "", nil
}
