package main

import (
	"fmt"
	"time"

	"github.com/fencing/fence"
)

// ttlLimiter is a driver whose store grants lease TTLs up to a limit:
// ZooKeeper's, the session timeout the server granted.
type ttlLimiter interface {
	MaxTTL() time.Duration
}

// fitTTL fits "fence run"'s TTL to the longest the store grants, where it
// has a limit. Without --ttl, a default above the limit becomes the limit,
// and fence says so; a --ttl above it is a usage error that names the
// range.
func fitTTL(st *store, f *runFlags, ev *events) error {
	lim, ok := st.client.Driver().(ttlLimiter)
	if !ok {
		return nil
	}
	limit := lim.MaxTTL()
	if f.ttl <= limit {
		return nil
	}
	if f.ttlSet {
		return usagef("run: --ttl %v is longer than store %s grants: at most %v (its session timeout: "+
			"for ZooKeeper, the zk URL's session_timeout, 60s unless given, capped by the server's "+
			"maxSessionTimeout); give a --ttl from %v to %v", f.ttl, st.url, limit, fence.MinTTL, limit)
	}
	ev.emit(event{Event: "ttl", Message: fmt.Sprintf(
		"store %s grants leases of at most %v (its session timeout): using --ttl %v instead of the default %v",
		st.url, limit, limit, f.ttl)}, true)
	f.ttl = limit
	return nil
}
