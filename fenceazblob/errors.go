package fenceazblob

import "github.com/fencing/fence/internal/azkit"

// notHeld turns the service's refusal of a lease operation into an error
// matching fence.ErrNotHeld: 409 (the lease is another's, released,
// broken or breaking), 412 (the lease is lost) and 404 (the blob or its
// container is gone). Other errors (5xx, the network) are returned as
// they are: the store may still hold the lease, and the Client retries.
func notHeld(op string, err error) error {
	if azkit.Conflict(err) {
		return azkit.NotHeld(op, err)
	}
	return azkit.Err(op, err)
}
