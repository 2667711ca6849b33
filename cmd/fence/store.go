package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
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
func openStore(ctx context.Context, flagValue string, opts ...fence.ClientOption) (*store, error) {
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
	drv, closer, err := openWithin(ctx, raw, storeTimeout)
	if err != nil {
		if errors.Is(err, storeurl.ErrBadURL) {
			return nil, &usageError{msg: err.Error(), err: err}
		}
		// storeurl.Open's message names the store already, and shows no
		// credential.
		return nil, &storeError{err: err, text: err.Error(), host: s.host(), open: true}
	}
	s.client = fence.New(drv, opts...)
	s.closer = closer
	return s, nil
}

func (s *store) Close() { s.closer.Close() }

// warner is a driver with something to say about how its store is set
// up (fencefile: a directory other users can list).
type warner interface {
	Warnings() []string
}

// warn shows the store's warnings, if its driver has any, as "warning"
// events.
func (s *store) warn(ev *events) {
	w, ok := s.client.Driver().(warner)
	if !ok {
		return
	}
	for _, msg := range w.Warnings() {
		ev.emit(event{Event: "warning", Store: s.url, Message: "warning: " + msg}, true)
	}
}

// openWithin opens the store, giving up after d even if the driver does
// not heed its context: fence is about to exit then, and a late result
// is closed.
func openWithin(ctx context.Context, raw string, d time.Duration) (fence.Driver, io.Closer, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel() // the context bounds the opening only
	type opened struct {
		drv    fence.Driver
		closer io.Closer
		err    error
	}
	done := make(chan opened, 1)
	go func() {
		drv, closer, err := storeurl.Open(ctx, raw)
		done <- opened{drv, closer, err}
	}()
	select {
	case o := <-done:
		return o.drv, o.closer, o.err
	case <-ctx.Done():
		select {
		case o := <-done: // answered just in time
			return o.drv, o.closer, o.err
		default:
		}
		go func() {
			if o := <-done; o.err == nil {
				o.closer.Close()
			}
		}()
		return nil, nil, fmt.Errorf("open store %s: no answer within %v: %w", storeurl.Redact(raw), d, context.DeadlineExceeded)
	}
}

// wrap turns an error of a call to the store into one that names the
// store, its credentials hidden. Errors that are the caller's own (bad
// input, a held key, a lost lease) pass unchanged. The driver's own text
// is shown as it is: no driver's error repeats a credential (the tests
// of each store check it).
func (s *store) wrap(err error) error {
	var held *fence.HeldError
	var lost *fence.LostError
	if err == nil || errors.As(err, &held) || errors.As(err, &lost) ||
		errors.Is(err, fence.ErrInvalidKey) || errors.Is(err, fence.ErrInvalidTTL) || errors.Is(err, fence.ErrInvalidOption) {
		return err
	}
	return &storeError{err: err, text: "store " + s.url + ": " + trimFence(err.Error()), host: s.host()}
}

// host returns the host part of the store URL ("h1:2379,h2:2379"), "" for
// stores on this machine. The user info is not part of it.
func (s *store) host() string {
	u, err := storeurl.Parse(s.raw)
	if err != nil || u.Scheme == "file" {
		return ""
	}
	return u.Host
}

// storeError is an error from the store, with the text to show for it.
type storeError struct {
	err  error
	text string
	host string // the store URL's host part, "" if none
	open bool   // opening the store failed
}

func (e *storeError) Error() string { return e.text }
func (e *storeError) Unwrap() error { return e.err }
