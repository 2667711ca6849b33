package fencepg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
)

var errDriverClosed = errors.New("fencepg: driver closed")

// LeaseStore is lease mode: a fence.Driver that keeps one row per key in
// the lock table, with its owner, its expiry by the database's clock and
// its token. Every operation is one statement on a pooled connection, so a
// lease survives reconnects and, being ordinary replicated data, a
// failover. Waiters wake on a NOTIFY sent when a lease is released and at
// the holder's reported expiry.
//
// Choose lease mode unless you need the key freed the moment its holder's
// connection drops (session mode) or the lock to be part of one
// transaction (LockTx).
type LeaseStore struct {
	pool *pgxpool.Pool
	ts   tables
	auto bool

	setupMu   sync.Mutex
	setupDone bool

	listen *listener

	qAcquire, qHolder, qExtend, qExtendBatch, qRelease, qInspect, qList string

	qSemLock, qSemTake, qSemExtend, qSemRelease string
}

var (
	_ fence.Driver    = (*LeaseStore)(nil)
	_ fence.Watcher   = (*LeaseStore)(nil)
	_ fence.Inspector = (*LeaseStore)(nil)
	_ fence.Lister    = (*LeaseStore)(nil)
)

// NewLeaseStore returns a lease mode driver over pool. The tables must
// exist (see Setup), unless WithAutoSetup is given. Close the driver when
// done: it owns the connection on which waiters listen.
func NewLeaseStore(pool *pgxpool.Pool, opts ...Option) (*LeaseStore, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: fencepg: nil pool", fence.ErrInvalidOption)
	}
	o, ts, err := collect(opts, "NewLeaseStore", "WithAutoSetup")
	if err != nil {
		return nil, err
	}
	L := ts.locks.quoted
	d := &LeaseStore{pool: pool, ts: ts, auto: o.autoSetup, listen: newListener(pool, ts.locks.name)}

	// One statement takes a free or expired row, bumping its token, and
	// returns the token; it returns no row if the key is held, and
	// qHolder then reads the holder. clock_timestamp() rather than now():
	// now() is frozen at the start of the transaction, so after a wait for
	// a concurrent writer's row lock it would judge expiry by a stale
	// time. Releasing keeps the row and its token, so tokens never go
	// back.
	//
	// Returning the holder from the same statement (a CTE around the
	// INSERT and a UNION with a read of the row) saved a round trip on a
	// refused try but cost every acquisition the setup of the extra plan
	// nodes in the server (docs/performance.md); the uncontended acquire
	// is the one to make fast.
	//
	// A lease is live until expires_at; its row blocks the key until
	// expires_at + lock_delay, its lock-delay ($5, 0 for none). In between,
	// the lease has ended without a release: acquisition is refused to
	// everyone, the holder reads show it with the time until the key is
	// free (what waiters wake at: nothing is notified when a delay ends),
	// and its own extend and release are refused, so that they can
	// neither revive it nor lift the delay.
	d.qAcquire = `INSERT INTO ` + L + ` AS l (key, token, owner, expires_at, meta, acquired_at, lock_delay)
		VALUES ($1, ` + clockToken + `, $2, clock_timestamp() + $3::bigint * interval '1 microsecond', $4, clock_timestamp(),
			$5::bigint * interval '1 microsecond')
		ON CONFLICT (key) DO UPDATE
			SET token = ` + nextToken("l.token") + `, owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
				meta = EXCLUDED.meta, acquired_at = EXCLUDED.acquired_at, lock_delay = EXCLUDED.lock_delay
			WHERE l.owner IS NULL OR l.expires_at + l.lock_delay <= clock_timestamp()
		RETURNING l.token`
	d.qHolder = `SELECT owner, token, meta, ` + leftUS + `
		FROM ` + L + ` WHERE key = $1 AND owner IS NOT NULL`

	// Extend, alone or in a batch (ExtendBatch), moves the expiry of a
	// live lease only: extendable refuses one past its expiry, in its
	// lock-delay or not.
	d.qExtend = `UPDATE ` + L + ` AS l SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
		WHERE l.key = $1 AND l.owner = $2 AND ` + extendable
	d.qExtendBatch = `WITH done AS (UPDATE ` + L + ` AS l SET expires_at = clock_timestamp() + t.ttl_us * interval '1 microsecond'
		FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS t(key, owner, ttl_us, i)
		WHERE l.key = t.key AND l.owner = t.owner AND ` + extendable + `
		RETURNING t.i)
		SELECT array_agg(i) FROM done`

	// Release clears the owner only if it is ours, keeps the token and the
	// expiry (so it can tell whether the lease had expired) and announces
	// the release to waiters: RETURNING runs pg_notify for the released
	// row only, and the NOTIFY is delivered at commit.
	// The channel is the table's name: letters, digits, underscores and a
	// dot (see parseTable), so it needs no escaping as a literal.
	d.qRelease = `UPDATE ` + L + ` SET owner = NULL, meta = NULL
		WHERE key = $1 AND owner = $2 AND (expires_at > clock_timestamp() OR expires_at + lock_delay <= clock_timestamp())
		RETURNING expires_at > clock_timestamp(), pg_notify('` + ts.locks.name + `', $3)::text`

	d.qInspect = `SELECT key, owner, token, meta, ` + leftUS + `
		FROM ` + L + ` WHERE key = $1 AND owner IS NOT NULL AND expires_at + lock_delay > clock_timestamp()`
	d.qList = `SELECT key, owner, token, meta, ` + leftUS + `
		FROM ` + L + ` WHERE starts_with(key, $1) AND owner IS NOT NULL AND expires_at + lock_delay > clock_timestamp()`
	d.semaphoreQueries()
	return d, nil
}

// leftUS is the time, in µs by the server's clock, until a lock row no
// longer blocks its key: its expiry plus its lock-delay.
const leftUS = `ceil(extract(epoch FROM expires_at + lock_delay - clock_timestamp()) * 1e6)::bigint`

// extendable is the condition, beside its key and owner, on which a lock
// row's lease (alias l) is extended: it has not expired.
const extendable = `l.expires_at > clock_timestamp()`

// SupportsLockDelay implements fence.LockDelayer: lease mode keeps the
// lock-delay of locks, in the lease's row (not of semaphores).
func (d *LeaseStore) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

// Setup creates the tables (see the package function Setup).
func (d *LeaseStore) Setup(ctx context.Context) error { return d.ts.setup(ctx, d.pool) }

// Close stops the driver's LISTEN connection. It does not close the pool
// and does not release leases (the Client does that).
func (d *LeaseStore) Close() error {
	d.listen.close()
	return nil
}

func (d *LeaseStore) ensureSetup(ctx context.Context) error {
	if !d.auto {
		return nil
	}
	d.setupMu.Lock()
	defer d.setupMu.Unlock()
	if d.setupDone {
		return nil
	}
	if err := d.ts.setup(ctx, d.pool); err != nil {
		return err
	}
	d.setupDone = true
	return nil
}

// metaArg is the holder's metadata as a jsonb parameter: JSON text (pgx
// sends a string as is; encoding a map costs it allocations),
// or NULL if there is none.
func metaArg(meta map[string]string) any {
	if len(meta) == 0 {
		return nil
	}
	return metajson.Encode(meta)
}

func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// TryAcquire implements fence.Driver in one round trip.
func (d *LeaseStore) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = markUnavailable(ctx, err) }()
	if err := d.ensureSetup(ctx); err != nil {
		return nil, err
	}
	if req.LockDelay < 0 || (req.LockDelay > 0 && req.Kind != fence.KindLock) {
		return nil, fmt.Errorf("fencepg: acquire %q: %w: lock-delay %v on a %s", req.Key, fence.ErrUnsupported, req.LockDelay, req.Kind)
	}
	switch req.Kind {
	case fence.KindLock:
	case fence.KindSemaphore:
		return d.trySlot(ctx, req)
	default:
		return nil, fmt.Errorf("fencepg: acquire %q: %w: %s in lease mode", req.Key, fence.ErrUnsupported, req.Kind)
	}
	c := &leaseClaim{d: d, key: req.Key, owner: req.Owner}
	err = d.pool.QueryRow(ctx, d.qAcquire, req.Key, req.Owner, micros(req.TTL), metaArg(req.Meta),
		micros(req.LockDelay)).Scan(&c.token)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, d.heldError(ctx, req.Key)
	case err != nil:
		return nil, fmt.Errorf("fencepg: acquire %q: %w", req.Key, err)
	}
	return c, nil
}

// heldError returns the *fence.HeldError for key, which a try found
// held, with its holder if it still has one.
func (d *LeaseStore) heldError(ctx context.Context, key string) error {
	// Scanned into types that need no allocation to scan into (a map or
	// a pointer would cost several); the metadata is decoded only if
	// there is a holder.
	var (
		owner  string
		token  int64
		meta   []byte
		leftUS int64
	)
	err := d.pool.QueryRow(ctx, d.qHolder, key).Scan(&owner, &token, &meta, &leftUS)
	if err != nil {
		// Released since the try (no row), or unreadable: held all the
		// same when the try ran.
		return &fence.HeldError{Key: key}
	}
	// A holder whose time ran out since the try gets the least ExpiresIn,
	// not 0 (unknown): the waiter then tries again at once.
	h := fence.Holder{Key: key, Token: token, Owner: owner, ExpiresIn: time.Duration(max(leftUS, 1)) * time.Microsecond}
	h.Meta = metajson.Decode(string(meta)) // metadata is informational
	return &fence.HeldError{Key: key, Holder: &h}
}

type leaseClaim struct {
	d     *LeaseStore
	key   string
	owner string
	token int64
}

func (c *leaseClaim) Token() int64 { return c.token }

func (c *leaseClaim) Extend(ctx context.Context, ttl time.Duration) error {
	tag, err := c.d.pool.Exec(ctx, c.d.qExtend, c.key, c.owner, micros(ttl))
	if err != nil {
		return fmt.Errorf("fencepg: extend %q: %w", c.key, err)
	}
	if tag.RowsAffected() == 0 {
		return c.notHeld()
	}
	return nil
}

// notHeld is the refusal of an extension of c, alone or in a batch.
func (c *leaseClaim) notHeld() error {
	return fmt.Errorf("%w: %q: lease of %s expired or taken over", fence.ErrNotHeld, c.key, c.owner)
}

func (c *leaseClaim) Release(ctx context.Context) error {
	var live bool
	err := c.d.pool.QueryRow(ctx, c.d.qRelease, c.key, c.owner, notifyPayload(c.key)).Scan(&live, nil)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %q no longer held by %s (taken over, or expired with its lock-delay running)",
			fence.ErrNotHeld, c.key, c.owner)
	case err != nil:
		return fmt.Errorf("fencepg: release %q: %w", c.key, err)
	case !live:
		return fmt.Errorf("%w: %q: lease of %s had expired", fence.ErrNotHeld, c.key, c.owner)
	}
	return nil
}

// Watch implements fence.Watcher with LISTEN on the lock table's channel,
// over one connection shared by all of the driver's waiters.
func (d *LeaseStore) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	return d.listen.watch(ctx, key)
}

// Inspect implements fence.Inspector.
func (d *LeaseStore) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return fence.Holder{}, err
	}
	hs, err := d.holders(ctx, d.qInspect, key)
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencepg: inspect %q: %w", key, err)
	}
	if len(hs) == 0 {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	return hs[0], nil
}

// List implements fence.Lister.
func (d *LeaseStore) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return nil, err
	}
	hs, err := d.holders(ctx, d.qList, prefix)
	if err != nil {
		return nil, fmt.Errorf("fencepg: list %q: %w", prefix, err)
	}
	return hs, nil
}

func (d *LeaseStore) holders(ctx context.Context, q, arg string) ([]fence.Holder, error) {
	rows, err := d.pool.Query(ctx, q, arg)
	if err != nil {
		return nil, err
	}
	var hs []fence.Holder
	for rows.Next() {
		var (
			h      fence.Holder
			leftUS int64
		)
		if err := rows.Scan(&h.Key, &h.Owner, &h.Token, &h.Meta, &leftUS); err != nil {
			rows.Close()
			return nil, err
		}
		h.ExpiresIn = time.Duration(max(leftUS, 1)) * time.Microsecond
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return hs, nil
}
