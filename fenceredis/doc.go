// Package fenceredis is the fence driver for Redis, on go-redis v9: Store
// for one Redis deployment (a single server, a Sentinel-managed primary or
// a Redis Cluster, through any redis.UniversalClient), Redlock for N
// independent servers, and Guard, the resource side of fencing for data
// kept in Redis.
//
// # Protocol
//
// Every operation is one Lua script, atomic on the server and one round
// trip, run by EVALSHA with a fallback to EVAL when the server has
// forgotten it (after a restart):
//
//   - acquire: SET lock value NX PX ttl, the value being the owner id and
//     the holder's metadata, and, only if that succeeded, issue the token
//     max(counter+1, server time in microseconds) and store it on the
//     key's counter; otherwise report the holder (owner, token, metadata,
//     PTTL);
//   - extend: PEXPIRE only if the lock's value is still this
//     acquisition's;
//   - release: DEL only if it is still this acquisition's, then publish on
//     the key's release channel, which waiters subscribe to.
//
// A lock key K lives under three names that share the hash tag {K'}, K'
// being K with '%', '{' and '}' percent-encoded, so all three are in one
// Cluster slot whatever K contains: fence:{K'} (the lock),
// fence:{K'}:token (the counter, which holds the last token issued: the
// holder's while the lock exists) and fence:{K'}:released (the channel).
//
// Store also takes several locks in one script, all or none
// (fence.MultiAcquirer), and keeps a lock-delay (fence.LockDelayer) by
// writing the lock with PX TTL + delay and the lease's own end beside it;
// see multi.go and lockdelay.go.
//
// Store also does semaphores (a sorted set of holders scored by expiry)
// and reader-writer locks (a readers' set, a writer key and a waiting-
// writer mark), each operation one script; see kinds.go. Redlock does
// neither.
//
// # Tokens and the clock
//
// Redis may lose a counter: a server without persistence restarts empty, a
// failover can lose recent writes, and counters expire on purpose some
// time after their lock is gone (WithTokenRetention), so keys used once do
// not pile up. The time seed keeps tokens increasing anyway. That makes
// one assumption: the clock of the server that issues a token (after a
// restart or failover, the new one) reads later than the clocks of the
// servers that issued earlier tokens did when they issued them. A clock
// stepped back, or a failover to a replica whose clock is behind by more
// than the time since the key's last acquisition, can break it; while the
// counter exists it cannot. Tokens are microseconds since 1970 (about
// 1.8e15 in 2026), positive, within int64 and exact in Lua's doubles.
//
// # Waiting
//
// Waiters subscribe to the key's release channel (sharded pub/sub on
// Redis 7 and later) and also wake at the holder's reported expiry, since
// a holder that crashed never publishes. A Store multiplexes all its
// waiters over one subscription connection (one per master on a Cluster).
//
// # What it does not promise
//
// A lease on one Redis is only as durable as that Redis: a failover to a
// replica that had not yet received the lock lets a second holder in
// until the first one's next renewal, which then ends its lease.
// Redlock tolerates the loss of a minority of its servers but assumes
// bounded clock drift and process pauses. In both cases the fencing
// token, checked by the resource (Guard, or the guards of other
// packages), is what keeps the data safe. See docs/redis.md.
//
// Give go-redis clients ContextTimeoutEnabled, so that a renewal gives up
// when its lease's validity ends.
package fenceredis
