// Package jsonscan walks JSON text without reflection: it finds where values end and splits arrays
// into their elements' raw bytes, as sub-slices of the input (no copies). It does not validate: it
// serves documents already checked (a request body after json.Valid) or written by a trusted
// producer (PostgreSQL's json_build_array), and on anything else it reports failure rather than
// panic. Decoding a value is left to the caller, and to encoding/json when it is not simple.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Space returns the index of the first byte at or after i that is not JSON white space.
func Space(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// String returns the index just after the string starting at b[i] (a '"'), or -1 when it is not
// terminated.
func String(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// Value returns the index just after the value starting at b[i], or -1 when none starts there or
// it is not terminated. Only strings and nesting are followed; a number or literal is the run of
// bytes up to the next delimiter.
func Value(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return String(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := String(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) {
		c := b[j]
		if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			break
		}
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// SplitArray appends the raw elements of the array b (white space around it allowed, nothing
// else) to dst. It reports false when b is not an array or an element does not end.
func SplitArray(b []byte, dst [][]byte) ([][]byte, bool) {
	i := Space(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	i = Space(b, i+1)
	if i < len(b) && b[i] == ']' {
		return dst, Space(b, i+1) == len(b)
	}
	for {
		end := Value(b, i)
		if end < 0 {
			return nil, false
		}
		dst = append(dst, b[i:end:end])
		i = Space(b, end)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = Space(b, i+1)
		case ']':
			return dst, Space(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// Text decodes the JSON string v (no white space around it). One without escapes and in UTF-8 is
// sliced; any other goes through encoding/json.
func Text(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) && !hasControl(inner) {
		return string(inner), true
	}
	var s string
	return s, json.Unmarshal(v, &s) == nil
}

func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// Int decodes the JSON integer v (no fraction, no exponent) within int64.
func Int(v []byte) (int64, bool) {
	digits := v
	if len(v) > 0 && v[0] == '-' {
		digits = v[1:]
	}
	if len(digits) == 0 || len(digits) > 19 {
		return 0, false
	}
	if len(digits) == 19 {
		// Long enough to overflow the loop below: the exact path.
		n, err := strconv.ParseInt(string(v), 10, 64)
		return n, err == nil
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if v[0] == '-' {
		n = -n
	}
	return n, true
}
