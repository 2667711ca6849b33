package fencepg

import "time"

// SetIdleWindow sets how long d remembers how many connections it had in
// use at once (see minIdle).
func SetIdleWindow(d *SessionStore, w time.Duration) {
	d.mu.Lock()
	d.idleWindow = w
	d.mu.Unlock()
}
