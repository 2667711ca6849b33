package main

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/storeurl"
)

// storeTimeout bounds opening the store and each one-shot call to it
// (status, list, the first try of run), so that an unreachable store is
// reported instead of waited for.
const storeTimeout = 20 * time.Second

// store is the store a command works on.
type store struct {
	client *fence.Client
	raw    string // as given: may hold credentials, never printed
	url    string // redacted, for messages
	closer io.Closer
}

// openStore opens the store named by flagValue, else $FENCE_STORE, else
// the per-user default directory. Its errors say which store, without
// credentials; errors for a URL that cannot name a store are usage errors.
func openStore(ctx context.Context, flagValue string, opts ...fence.Option) (*store, error) {
	raw := flagValue
	if raw == "" {
		raw = os.Getenv("FENCE_STORE")
	}
	if raw == "" {
		dir, err := storeurl.DefaultDir()
		if err != nil {
			return nil, &usageError{msg: err.Error(), err: err}
		}
		raw = dir
	}
	s := &store{raw: raw, url: storeurl.Redact(raw)}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	drv, closer, err := storeurl.Open(ctx, raw)
	if err != nil {
		if errors.Is(err, storeurl.ErrBadURL) {
			return nil, &usageError{msg: storeurl.Scrub(raw, err.Error()), err: err}
		}
		// storeurl.Open's message names the store already.
		return nil, &storeError{err: err, text: storeurl.Scrub(raw, err.Error())}
	}
	s.client = fence.New(drv, opts...)
	s.closer = closer
	return s, nil
}

func (s *store) Close() { s.closer.Close() }

// wrap turns an error of a call to the store into one that names the
// store and shows none of its credentials. Errors that are the caller's
// own (bad input, a held key, a lost lease) pass unchanged.
func (s *store) wrap(err error) error {
	var held *fence.HeldError
	var lost *fence.LostError
	if err == nil || errors.As(err, &held) || errors.As(err, &lost) ||
		errors.Is(err, fence.ErrInvalidKey) || errors.Is(err, fence.ErrInvalidTTL) || errors.Is(err, fence.ErrInvalidOption) {
		return err
	}
	return &storeError{err: err, text: "store " + s.url + ": " + storeurl.Scrub(s.raw, trimFence(err.Error()))}
}

// storeError is an error from the store, with the text to show for it.
type storeError struct {
	err  error
	text string
}

func (e *storeError) Error() string { return e.text }
func (e *storeError) Unwrap() error { return e.err }
