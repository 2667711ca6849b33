// Package bench measures fence side by side with the Go lock libraries
// people use for the same stores and with the raw protocol of each store:
// the fewest round trips that can take a lock and issue a fencing token.
//
// It is its own module, so that the library never depends on the peers.
// The command in cmd/fence-bench runs every measurement in one go against
// private servers and writes docs/performance.md; the Go benchmarks in this
// package measure the same contenders one at a time.
package bench

import (
	"context"
	"sync/atomic"
)

// Role is what a contender stands for in the comparison.
type Role int

// The roles.
const (
	// RoleFence is fence itself, through its public API.
	RoleFence Role = iota
	// RolePeer is another Go library for the same store.
	RolePeer
	// RoleRaw is the store's raw protocol: the fewest round trips that do
	// the job with a fencing token, with no library around them.
	RoleRaw
)

func (r Role) String() string {
	switch r {
	case RoleFence:
		return "fence"
	case RolePeer:
		return "peer"
	}
	return "raw"
}

// Contender is one lock implementation on one store.
type Contender struct {
	// Store is "redis", "postgres", "etcd", "sqlite", "aztable" or "dynamodb".
	Store string
	// Name is short and unique within the store ("fence", "redsync").
	Name string
	Role Role
	// Desc says in a few words what one acquire and release send.
	Desc string
	// Open connects one client, as one process would: its own
	// connections, shared by the Lockers it hands out. rt counts the
	// client's round trips to the store.
	Open func(ctx context.Context, rt *atomic.Int64) (Client, error)
}

// ID is store/name.
func (c Contender) ID() string { return c.Store + "/" + c.Name }

// Client is one connected client of a contender.
type Client interface {
	// Locker returns a handle for one goroutine.
	Locker() Locker
	// Close releases the client's connections and background work.
	Close() error
}

// Locker takes one lock at a time, for one goroutine.
type Locker interface {
	// Lock takes key, waiting while another holds it, until ctx is done.
	Lock(ctx context.Context, key string) error
	// Unlock releases the lock taken by the last Lock.
	Unlock(ctx context.Context) error
}

// Contenders returns every contender on the servers in srv, store by
// store, fence first within each store.
func Contenders(srv *Servers) []Contender {
	var cs []Contender
	if srv.RedisAddr != "" {
		cs = append(cs, redisContenders(srv.RedisAddr)...)
	}
	if srv.PostgresDSN != "" {
		cs = append(cs, postgresContenders(srv.PostgresDSN)...)
	}
	if len(srv.EtcdEndpoints) > 0 {
		cs = append(cs, etcdContenders(srv.EtcdEndpoints)...)
	}
	if srv.SQLiteDir != "" {
		cs = append(cs, sqliteContenders(srv.SQLiteDir)...)
	}
	if srv.AztableConn != "" {
		cs = append(cs, aztableContenders(srv.AztableConn)...)
	}
	if srv.DynamoURL != "" {
		cs = append(cs, dynamoContenders(srv.DynamoURL)...)
	}
	return cs
}

// Comparison is a pair whose ratio the report shows: Fence's figure
// divided by Other's.
type Comparison struct {
	Fence, Other string // contender names within the store
}

// Comparisons returns, for each store, the ratios the report shows.
func Comparisons(store string) []Comparison {
	switch store {
	case "redis":
		return []Comparison{{"fence", "redsync"}, {"fence", "redislock"}, {"fence", "raw"}, {"fence", "raw-incr"}}
	case "postgres":
		return []Comparison{
			{"fence-lease", "raw-lease"},
			{"fence-session", "pgx-advisory"},
			{"fence-session", "raw-advisory"},
		}
	case "etcd":
		return []Comparison{{"fence", "etcd-mutex"}, {"fence", "raw"}}
	case "sqlite", "aztable", "dynamodb":
		return []Comparison{{"fence", "raw"}}
	}
	return nil
}
