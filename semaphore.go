package fence

import "context"

// Semaphore admits up to a fixed number of holders of one key at once. Each
// holder gets a Lease that behaves exactly like a lock's: renewed, lost and
// released the same way, with a token greater than every earlier grant's
// for the key. Semaphores need a store that supports them (KindSemaphore);
// on others every call fails with ErrUnsupported.
//
// Every holder of a key must use the same limit: a call with a different
// limit while the key has holders fails with ErrLimitMismatch, never with
// silent over-admission.
type Semaphore struct {
	c     *Client
	key   string
	limit int
	opts  []AcquireOption
}

// Semaphore returns the semaphore on key admitting limit holders. The
// options apply to every acquisition through it.
func (c *Client) Semaphore(key string, limit int, opts ...AcquireOption) *Semaphore {
	return &Semaphore{c: c, key: key, limit: limit, opts: opts}
}

// Acquire takes a slot, waiting while all are held, like Client.Acquire.
func (s *Semaphore) Acquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return s.c.acquire(ctx, s.target(), with(with(s.c.cfg, s.opts), opts), true)
}

// TryAcquire takes a slot if one is free, and fails at once with a
// *HeldError otherwise, like Client.TryAcquire.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return s.c.acquire(ctx, s.target(), tryConfig(with(s.c.cfg, s.opts), opts, "Semaphore.TryAcquire"), false)
}

// Run takes a slot, runs fn under it and releases it, like Client.Run.
func (s *Semaphore) Run(ctx context.Context, fn func(ctx context.Context, l *Lease) error, opts ...RunOption) error {
	return s.c.run(ctx, s.target(), runConfig(with(s.c.cfg, s.opts), opts, "Semaphore.Run"), fn)
}

func (s *Semaphore) target() target { return target{key: s.key, kind: KindSemaphore, limit: s.limit} }

// RWMutex is a reader-writer lock on one key: many readers at once, or one
// writer. The policy prefers writers: once a writer waits, new readers wait
// too, so a stream of readers cannot starve it. A writer's token is greater
// than the tokens of every reader granted before it, so a resource guarded
// by tokens refuses a reader-era write once the writer has written.
// RWMutex needs a store that supports it (KindRead, KindWrite); on others
// every call fails with ErrUnsupported.
type RWMutex struct {
	c    *Client
	key  string
	opts []AcquireOption
}

// RWMutex returns the reader-writer lock on key. The options apply to every
// acquisition through it.
func (c *Client) RWMutex(key string, opts ...AcquireOption) *RWMutex {
	return &RWMutex{c: c, key: key, opts: opts}
}

// AcquireRead takes a read lease, waiting while a writer holds or waits.
func (m *RWMutex) AcquireRead(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return m.c.acquire(ctx, target{key: m.key, kind: KindRead}, with(with(m.c.cfg, m.opts), opts), true)
}

// TryAcquireRead takes a read lease if no writer holds or waits.
func (m *RWMutex) TryAcquireRead(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return m.c.acquire(ctx, target{key: m.key, kind: KindRead}, tryConfig(with(m.c.cfg, m.opts), opts, "RWMutex.TryAcquireRead"), false)
}

// AcquireWrite takes the write lease, waiting while readers or a writer
// hold it.
func (m *RWMutex) AcquireWrite(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return m.c.acquire(ctx, target{key: m.key, kind: KindWrite}, with(with(m.c.cfg, m.opts), opts), true)
}

// TryAcquireWrite takes the write lease if nobody holds the key.
func (m *RWMutex) TryAcquireWrite(ctx context.Context, opts ...AcquireOption) (*Lease, error) {
	return m.c.acquire(ctx, target{key: m.key, kind: KindWrite}, tryConfig(with(m.c.cfg, m.opts), opts, "RWMutex.TryAcquireWrite"), false)
}
