package bench

// Analysis is the part of docs/performance.md that explains the figures:
// why fence costs what it costs on each store, and where a peer's design
// wins. It is written by hand, so it speaks of designs and round trips;
// the tables and the targets above it are measured on every run.
const Analysis = `
## What the figures say

**Round trips.** Every contender takes two requests per uncontended
acquire + release on every store, fence included: fence's extra work
(the token, the holder's metadata, the renewal timer, the kill-switch
context) costs server and client time, not round trips. Where fence is
slower than the raw floor on the uncontended path, the difference is
work on the client (allocations, goroutines, timers) and in the server
(fence's Redis scripts also keep the holder hash and a time-seeded
counter; its PostgreSQL statements also store the holder's metadata).

**Handoff.** Here the designs differ, and the peers that poll pay for it:
redsync waits 50 to 250 ms between attempts and bsm/redislock the 10 ms
of its backoff, while fence wakes on the release message (Redis pub/sub,
PostgreSQL LISTEN/NOTIFY) or is woken by the server (PostgreSQL advisory
locks, etcd watches). etcd's Mutex and fence on etcd both queue waiters
in FIFO order and watch the predecessor only.

**The 2x handoff goal.** A handoff is a release round trip, a message from
the server to the waiter, and the waiter's own acquire round trip, with
three processes (the releaser, the server, the waiter) to schedule on two
shared cores; even the raw protocol takes several times its uncontended
acquire + release here, so that goal measures this machine as much as
fence.

**Noise.** Figures on this 2-core machine move by 10 to 30% from run to
run, p99 figures more; the ratios within one run, measured interleaved,
are the figures to compare.
`
