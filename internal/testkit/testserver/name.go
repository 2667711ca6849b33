package testserver

import (
	"crypto/rand"
	"encoding/hex"
)

// Name returns prefix and 12 random hex digits: a name for a table or a
// container on a server that no other test uses.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
