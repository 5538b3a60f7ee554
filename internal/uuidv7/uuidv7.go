// Package uuidv7 generates RFC 9562 version 7 UUIDs: time-ordered, so jobs sort by creation, and
// unique without coordination, so clients can choose a job's id before inserting it.
package uuidv7

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"sync"
	"time"
)

var (
	mu       sync.Mutex
	lastMS   int64
	lastSeq  uint16 // 12-bit counter in rand_a, keeps ids monotonic within one millisecond
	randPool [256]byte
	randPos  = len(randPool)
)

// New returns a new UUIDv7 in its canonical lowercase 8-4-4-4-12 form. Ids made by one process are
// strictly increasing.
func New() string {
	var b [16]byte
	mu.Lock()
	ms := time.Now().UnixMilli()
	if ms > lastMS {
		lastMS = ms
		lastSeq = uint16(nextRand(1)[0]) & 0x3ff // leave headroom for increments
	} else {
		lastSeq++
		if lastSeq > 0xfff { // counter exhausted: borrow the next millisecond
			lastMS++
			lastSeq = 0
		}
		ms = lastMS
	}
	seq := lastSeq
	r := nextRand(8)
	copy(b[8:], r)
	mu.Unlock()

	b[0] = byte(ms >> 40)
	b[1] = byte(ms >> 32)
	b[2] = byte(ms >> 24)
	b[3] = byte(ms >> 16)
	b[4] = byte(ms >> 8)
	b[5] = byte(ms)
	b[6] = 0x70 | byte(seq>>8)&0x0f
	b[7] = byte(seq)
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return Format(b)
}

// nextRand returns n random bytes from a buffered pool; mu must be held.
func nextRand(n int) []byte {
	if randPos+n > len(randPool) {
		if _, err := rand.Read(randPool[:]); err != nil {
			panic("uuidv7: crypto/rand failed: " + err.Error())
		}
		randPos = 0
	}
	out := randPool[randPos : randPos+n]
	randPos += n
	return out
}

// Format writes 16 bytes as a UUID in canonical lowercase 8-4-4-4-12 form.
func Format(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

var canonical = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Valid reports whether s is a UUIDv7 in canonical lowercase form, as OJS requires of job ids.
func Valid(s string) bool { return canonical.MatchString(s) }

// Time returns the millisecond timestamp embedded in a valid UUIDv7.
func Time(s string) time.Time {
	if !Valid(s) {
		return time.Time{}
	}
	var b [6]byte
	hexPart := s[0:8] + s[9:13]
	if _, err := hex.Decode(b[:], []byte(hexPart)); err != nil {
		return time.Time{}
	}
	ms := int64(b[0])<<40 | int64(b[1])<<32 | int64(b[2])<<24 | int64(b[3])<<16 | int64(b[4])<<8 | int64(b[5])
	return time.UnixMilli(ms)
}
