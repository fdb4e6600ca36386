// Package ids makes Podium's identifiers: a type prefix and a time-ordered
// random part ("task_01JD…"), so an id says what it names and sorting ids sorts
// by creation time, which keeps btree inserts at the right-hand edge.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"time"
)

// Crockford's base32: no I, L, O or U, so ids survive being read aloud.
const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// New returns prefix + "_" + 26 characters: 48 bits of milliseconds since the
// epoch then 80 random bits.
func New(prefix string) string {
	return prefix + "_" + encode(time.Now())
}

func encode(t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint64(b[0:8], ms<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic("ids: crypto/rand failed: " + err.Error())
	}
	// 128 bits as 26 base32 digits, most significant first (the top two bits
	// of the first digit are always zero).
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Valid reports whether s looks like an id with the given prefix.
func Valid(prefix, s string) bool {
	rest, ok := strings.CutPrefix(s, prefix+"_")
	if !ok || len(rest) != 26 {
		return false
	}
	for _, r := range rest {
		if !strings.ContainsRune(alphabet, r) {
			return false
		}
	}
	return true
}
