package fence

import (
	"fmt"
	"time"
)

// WithLockDelay keeps a key blocked for d after its lease ends without a
// release: when its TTL runs out in the store or its session drops, no
// one, whatever options they give, acquires the key until d after the
// store noticed. A lease released by its holder frees the key at once. It
// protects resources that cannot check fencing tokens from a holder that
// lost its lease without knowing it (paused, partitioned) and may still
// be writing, the way Chubby's and Consul's lock-delay do.
//
// The delay belongs to the lease, not to the next contender: the holder
// asks for it when it acquires, and the store keeps it with the lease, so
// it binds every later contender. It applies to locks (Acquire,
// TryAcquire, AcquireAll, Run) on drivers that implement LockDelayer;
// elsewhere the call fails with an error matching ErrUnsupported. d must
// not be negative; zero, the default, means no delay. docs/primitives.md
// tells, store by store, how the delay is kept.
func WithLockDelay(d time.Duration) Option {
	return setting{"WithLockDelay", func(c *config) {
		if d < 0 {
			c.invalid("lock-delay %v is negative", d)
		}
		c.lockDelay = d
	}}
}

// supportsLockDelay checks that the driver keeps the lock-delay that cfg
// asks for with tgt's kind.
func (c *Client) supportsLockDelay(tgt target, cfg *config) error {
	if cfg.lockDelay <= 0 {
		return nil
	}
	if ld, ok := c.drv.(LockDelayer); ok && ld.SupportsLockDelay(tgt.kind) {
		return nil
	}
	return fmt.Errorf("%w: lock-delay on %s %q", ErrUnsupported, tgt.kind, tgt.key)
}
