package primitives

import (
	"crypto/rand"
	"encoding/hex"
)

// newHolder returns 128 random bits from crypto/rand, hex-encoded: an id nobody can guess.
func newHolder() string {
	var b [16]byte
	rand.Read(b[:]) // never fails: crypto/rand.Read panics rather than return an error
	return hex.EncodeToString(b[:])
}
