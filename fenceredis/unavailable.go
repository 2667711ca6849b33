package fenceredis

import (
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence/internal/kit/unavail"
)

// markUnavailable marks *err, the error of an acquisition, with
// fence.ErrUnavailable where Redis could not answer for now: the network
// (unavail.Network) or a reply that says so (passing).
func markUnavailable(err *error) { *err = unavail.Mark(*err, passing) }

// passing reports whether err says Redis could not answer for now. The
// server's replies are go-redis's typed errors (v9, error.go and
// internal/proto/redis_errors.go), which go-redis already retried up to
// MaxRetries times. A held key is a HeldError, never one of these.
// NOSCRIPT is not here: Script.Run, which runs every script of the
// driver, answers it with EVAL.
func passing(err error) bool {
	switch {
	// LOADING: the server is loading its dataset after a restart.
	case redis.IsLoadingError(err):
	// BUSY: a script or function runs past its time limit, and the server
	// serves nothing but SCRIPT KILL and SHUTDOWN until it ends. The space
	// keeps BUSYKEY and BUSYGROUP out.
	case redis.HasErrorPrefix(err, "BUSY "):
	// CLUSTERDOWN: a Cluster without a master for the slot, or without a
	// majority of its masters.
	case redis.IsClusterDownError(err):
	// TRYAGAIN: the slot is being migrated and its keys are split.
	case redis.IsTryAgainError(err):
	// MOVED and ASK that go-redis passed on after its redirects
	// (MaxRedirects): the nodes' views of a slot differ for a moment, as
	// when a master that was failed over comes back as a replica, or a
	// slot migrates.
	case isRedirect(err):
	// MASTERDOWN: a replica that lost its link to its master.
	case redis.IsMasterDownError(err):
	// READONLY: a master that a failover made a replica, still in the
	// client's pool until go-redis learns the new master.
	case redis.IsReadOnlyError(err):
	// NOREPLICAS: a master cut off from the replicas that
	// min-replicas-to-write asks for.
	case redis.IsNoReplicasError(err):
	// "ERR max number of clients reached".
	case redis.IsMaxClientsError(err):
	// "redis: connection pool timeout": no connection freed within
	// PoolTimeout, as when the server stopped answering.
	case errors.Is(err, redis.ErrPoolTimeout):
	// Redlock: too few servers answered for a quorum (a key held on
	// enough servers is a HeldError instead).
	case errors.Is(err, ErrNoQuorum):
	default:
		return false
	}
	return true
}

func isRedirect(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask
}
