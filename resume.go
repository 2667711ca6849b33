package fence

import (
	"context"
	"fmt"
	"time"
)

// Resumer is implemented by drivers that can hand a still-valid lease
// back to its owner: a process that restarted (a deploy, a crash) with
// the key, owner id and token of the lease it held.
type Resumer interface {
	// Resume takes key's lock (req.Kind is KindLock) back for req.Owner,
	// only if the store still holds it for req.Owner with token, and in
	// the same atomic step extends it to at least req.TTL from now (and
	// stores req.Meta where it keeps metadata). The returned claim has
	// token as its token; no new token is issued.
	//
	// If the key is free (or its lease expired), Resume returns an error
	// matching ErrNotHeld; if it is held by another owner or with another
	// token, a *HeldError. Either way it changes nothing.
	Resume(ctx context.Context, req Request, token int64) (Claim, error)
}

// WithResume makes an acquisition take back the lease that owner holds
// on the key with token, keeping its token, instead of a new one: for a
// process that restarted while its lease was still valid in the store,
// and saved the lease's Owner and Token (fence run passes them to its
// command as FENCE_OWNER and FENCE_TOKEN). The lease is granted only if
// the store still holds it for exactly that owner and token; the call
// makes one attempt and never waits, nor falls back to a new lease:
//
//   - the store holds it for them: the lease, its validity measured
//     from the moment the resume request was sent, as for a fresh grant;
//   - another owner or token holds the key: a *HeldError (ErrHeld);
//   - the key is free, the lease expired: an error matching ErrNotHeld
//     (acquire it anew; the resource may have had another holder since).
//
// The owner id is the secret that proves ownership: keep it as private
// as the lease. The process that held the lease must be gone: to the
// store, the two are one owner, and either could release the other's.
// Drivers without a Resumer return an error matching ErrUnsupported.
// Locks only (not semaphores or reader-writer locks).
func WithResume(owner string, token int64) AcquireOption {
	return acquireSetting{"WithResume", func(c *config) {
		switch {
		case owner == "":
			c.invalid("WithResume with an empty owner")
		case !printable(owner):
			c.invalid("WithResume with owner %q, which has control characters", owner)
		case token <= 0:
			c.invalid("WithResume with token %d: tokens are > 0", token)
		}
		c.resumeOwner, c.resumeToken = owner, token
	}}
}

// acquireSetting is an AcquireOption only.
type acquireSetting setting

func (s acquireSetting) applyTo(c *config) { s.set(c) }
func (acquireSetting) acquireOption()      {}

// resume is an acquisition WithResume: one Resume, granted as a fresh
// lease from the moment it was sent.
func (c *Client) resume(ctx, callCtx context.Context, cfg *config, req Request) (*Lease, error) {
	if req.Kind != KindLock {
		return nil, fmt.Errorf("%w: WithResume of a %s (%q): locks only", ErrUnsupported, req.Kind, req.Key)
	}
	r, ok := c.drv.(Resumer)
	if !ok {
		return nil, fmt.Errorf("%w: resume %q", ErrUnsupported, req.Key)
	}
	req.Owner = cfg.resumeOwner
	sent := time.Now()
	claim, err := r.Resume(callCtx, req, cfg.resumeToken)
	if err != nil {
		return nil, c.acquireError(ctx, req.Key, fmt.Errorf("resume token %d: %w", cfg.resumeToken, err))
	}
	if tok := claim.Token(); tok != cfg.resumeToken {
		// Not released: to the store, the claim is the owner's lease.
		return nil, fmt.Errorf("fence: resume %q: driver returned token %d, asked for %d", req.Key, tok, cfg.resumeToken)
	}
	cfg.logger.InfoContext(ctx, "fence: lease resumed", "key", req.Key, "token", cfg.resumeToken, "owner", req.Owner)
	return c.grant(ctx, cfg, req, claim, sent)
}
