package uuidv7

import (
	"encoding/hex"
	"strings"
	"testing"
)

// FuzzValid compares Valid with a reading of RFC 9562's layout written out by hand (36 characters,
// hyphens at 8, 13, 18 and 23, lowercase hex elsewhere, version 7, variant 10), and checks that
// every valid id is Format of its own bytes, whose time Time reads back.
func FuzzValid(f *testing.F) {
	for _, s := range []string{New(), "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f", "019461A8-1a2b-7c3d-8e4f-5a6b7c8d9e0f",
		"019461a8-1a2b-6c3d-8e4f-5a6b7c8d9e0f", "019461a8-1a2b-7c3d-ce4f-5a6b7c8d9e0f", "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f\n",
		"019461a81a2b7c3d8e4f5a6b7c8d9e0f", "{019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f}", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := len(s) == 36
		for i := 0; want && i < 36; i++ {
			c := s[i]
			switch i {
			case 8, 13, 18, 23:
				want = c == '-'
			case 14:
				want = c == '7'
			case 19:
				want = c == '8' || c == '9' || c == 'a' || c == 'b'
			default:
				want = c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
			}
		}
		if Valid(s) != want {
			t.Fatalf("Valid(%q) = %v, want %v", s, !want, want)
		}
		if !want {
			if !Time(s).IsZero() {
				t.Fatalf("Time(%q) of an invalid id = %v", s, Time(s))
			}
			return
		}
		var b [16]byte
		if _, err := hex.Decode(b[:], []byte(strings.ReplaceAll(s, "-", ""))); err != nil {
			t.Fatal(err)
		}
		if Format(b) != s {
			t.Fatalf("Format(bytes of %q) = %q", s, Format(b))
		}
		ms := int64(0)
		for _, x := range b[:6] {
			ms = ms<<8 | int64(x)
		}
		if Time(s).UnixMilli() != ms {
			t.Fatalf("Time(%q) = %v, want ms %d", s, Time(s), ms)
		}
	})
}

// FuzzFormat: Format of any 16 bytes is 36 characters that decode back to those bytes, and is Valid
// exactly when the version and variant bits are those of a UUIDv7.
func FuzzFormat(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Add([]byte("\x01\x94\x61\xa8\x1a\x2b\x7c\x3d\x8e\x4f\x5a\x6b\x7c\x8d\x9e\x0f"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var b [16]byte
		copy(b[:], in)
		s := Format(b)
		var back [16]byte
		if _, err := hex.Decode(back[:], []byte(strings.ReplaceAll(s, "-", ""))); err != nil || back != b || len(s) != 36 {
			t.Fatalf("Format(%x) = %q", b, s)
		}
		if want := b[6]>>4 == 7 && b[8]>>6 == 2; Valid(s) != want {
			t.Fatalf("Valid(Format(%x)) = %v, want %v", b, !want, want)
		}
	})
}
