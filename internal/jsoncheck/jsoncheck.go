// Package jsoncheck refuses, in one pass and without decoding, the JSON values and strings that some
// store cannot hold, so that every store accepts and refuses the same input:
//
//   - the NUL character, escaped ("\u0000") or raw: PostgreSQL's jsonb and text refuse it;
//   - bytes that are not UTF-8, and lone UTF-16 surrogates ("\ud800"): PostgreSQL refuses them, and
//     SQLite would store them and serve back JSON that is not valid;
//   - numbers that are not a finite IEEE 754 double (1e1000000, or a non-zero 1e-400 that rounds to
//     zero) or that are written with more than MaxNumberLen characters: PostgreSQL's numeric
//     overflows on some of them, and no JSON reader can read them back as written.
//
// It also turns text that must be stored whatever it holds (a failed attempt's error message and
// trace) into text every store can hold: Sanitize and SanitizeJSON.
package jsoncheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pronto-jobs/pronto/internal/jsonscan"
)

// MaxNumberLen bounds how many characters a JSON number may be written with. A double never needs
// more than a few dozen significant digits; PostgreSQL's numeric refuses more than 16383 after the
// decimal point.
const MaxNumberLen = 1000

// MaxDepth bounds the nesting of arrays and objects, as encoding/json does.
const MaxDepth = 10000

// ErrUnstorable is matched (errors.Is) by every error of this package.
var ErrUnstorable = errors.New("value cannot be stored")

// Error names a value no store can hold: where it is and why.
type Error struct {
	// Path is the value's place, as the caller named the document and then JSON-path-like steps
	// ("args[0]", "meta.trace.id"); empty for the document itself when the caller gave no name.
	Path string
	// Reason says what is wrong ("string contains a NUL character").
	Reason string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// Is makes every *Error match ErrUnstorable.
func (e *Error) Is(target error) bool { return target == ErrUnstorable }

// Reasons.
const (
	reasonNUL       = "string contains a NUL character"
	reasonUTF8      = "string is not valid UTF-8"
	reasonSurrogate = "string contains a lone UTF-16 surrogate (\\ud800-\\udfff without its pair)"
	reasonNumber    = "number is out of range (it must be a finite double, at most 1000 characters)"
	reasonDepth     = "nested deeper than 10000 levels"
	reasonSyntax    = "not valid JSON"
)

// frame is one open array or object while walking a document.
type frame struct {
	array     bool
	index     int    // array: the current element
	key       []byte // object: the current member's key, raw (with its quotes)
	expectKey bool   // object: the next string is a key
}

// Check reports the first value of the JSON document raw that some store cannot hold, as an *Error
// whose Path starts with name, or nil. It walks raw once and allocates only to report an error. raw
// should be valid JSON (check that separately, with json.Valid); on input that is not, Check never
// panics and reports what it can.
func Check(raw []byte, name string) error {
	var stackBuf [16]frame
	stack := stackBuf[:0]
	fail := func(reason string, isKey bool, key []byte) error {
		return &Error{Path: path(name, stack, isKey, key), Reason: reason}
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			i++
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].array {
					stack[n-1].index++
				} else {
					stack[n-1].expectKey = true
				}
			}
			i++
		case '{', '[':
			if len(stack) >= MaxDepth {
				return fail(reasonDepth, false, nil)
			}
			stack = append(stack, frame{array: c == '[', expectKey: c == '{'})
			i++
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			i++
		case '"':
			end, reason := scanString(raw, i)
			isKey := false
			if n := len(stack); n > 0 && !stack[n-1].array && stack[n-1].expectKey {
				isKey = true
			}
			if reason != "" {
				var key []byte
				if isKey {
					key = raw[i:stringEnd(raw, i)]
				}
				return fail(reason, isKey, key)
			}
			if isKey {
				stack[len(stack)-1].key = raw[i:end]
				stack[len(stack)-1].expectKey = false
			}
			i = end
		default:
			j := i
			for j < len(raw) && isNumberByte(raw[j]) {
				j++
			}
			if j == i { // true, false, null, or not JSON
				for j < len(raw) && raw[j] >= 'a' && raw[j] <= 'z' {
					j++
				}
				if j == i {
					if c == 0 {
						return fail(reasonNUL, false, nil)
					}
					return fail(reasonSyntax, false, nil)
				}
			} else if !numberOK(raw[i:j]) {
				return fail(reasonNumber, false, nil)
			}
			i = j
		}
	}
	return nil
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// maxScale is the most digits after the decimal point a number may stand for: PostgreSQL's numeric
// (jsonb's numbers) holds 16383, and a zero written 0e-20000 would otherwise pass every other check.
const maxScale = 16383

// numberOK reports whether a JSON number reads as a finite double that is zero only when written as
// zero, with at most maxScale digits after the decimal point. Short numbers without an exponent are
// always fine and are not parsed.
func numberOK(num []byte) bool {
	if len(num) > MaxNumberLen {
		return false
	}
	if len(num) <= 15 && !bytes.ContainsAny(num, "eE") {
		return true
	}
	if k := bytes.IndexAny(num, "eE"); k >= 0 {
		exp, err := strconv.Atoi(string(num[k+1:]))
		if err != nil {
			return false // an exponent beyond int: no double has it
		}
		frac := 0
		if d := bytes.IndexByte(num[:k], '.'); d >= 0 {
			frac = k - d - 1
		}
		if frac-exp > maxScale {
			return false
		}
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return false
	}
	if f == 0 {
		// Underflow: a non-zero mantissa that rounds to zero.
		mant := num
		if k := bytes.IndexAny(num, "eE"); k >= 0 {
			mant = num[:k]
		}
		for _, d := range mant {
			if d >= '1' && d <= '9' {
				return false
			}
		}
	}
	return true
}

// scanString returns the index just after the JSON string starting at b[i] (a '"'), or the reason
// it cannot be stored.
func scanString(b []byte, i int) (int, string) {
	for j := i + 1; j < len(b); {
		c := b[j]
		switch {
		case c == '"':
			return j + 1, ""
		case c == '\\':
			if j+1 >= len(b) {
				return j, reasonSyntax
			}
			if b[j+1] != 'u' {
				j += 2
				continue
			}
			r, ok := Hex4(b, j+2)
			if !ok {
				return j, reasonSyntax
			}
			switch {
			case r == 0:
				return j, reasonNUL
			case r >= 0xD800 && r <= 0xDBFF:
				// A high surrogate must be followed at once by an escaped low one.
				if j+7 < len(b) && b[j+6] == '\\' && b[j+7] == 'u' {
					if lo, ok := Hex4(b, j+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
						j += 12
						continue
					}
				}
				return j, reasonSurrogate
			case r >= 0xDC00 && r <= 0xDFFF:
				return j, reasonSurrogate
			}
			j += 6
		case c == 0:
			return j, reasonNUL
		case c < 0x20:
			return j, reasonSyntax
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && size <= 1 {
				return j, reasonUTF8
			}
			j += size
		}
	}
	return len(b), reasonSyntax
}

// stringEnd returns the index just after the string starting at b[i], or len(b).
func stringEnd(b []byte, i int) int {
	if end := jsonscan.String(b, i); end >= 0 {
		return end
	}
	return len(b)
}

// Hex4 reads the four hex digits of a \u escape at b[i:]; ok is false when they are not all there.
func Hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// path renders where the walk stands: name, then each open array's index and object's key.
func path(name string, stack []frame, isKey bool, badKey []byte) string {
	var sb strings.Builder
	sb.WriteString(name)
	for k, f := range stack {
		last := k == len(stack)-1
		switch {
		case f.array:
			sb.WriteByte('[')
			sb.WriteString(strconv.Itoa(f.index))
			sb.WriteByte(']')
		case last && isKey:
			// The bad string is a key of this object: name the object, and the key as best it reads.
			if badKey != nil {
				sb.WriteString(" (key ")
				sb.WriteString(strconv.Quote(Sanitize(keyText(badKey))))
				sb.WriteByte(')')
			}
		case f.key != nil:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(Sanitize(keyText(f.key)))
		}
	}
	return sb.String()
}

// keyText decodes a raw JSON string for display; it never fails.
func keyText(raw []byte) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.Trim(raw, `"`))
}

// CheckString reports a Go string some store cannot hold (a NUL character or bytes that are not
// UTF-8, lone surrogates included) as an *Error on name, or nil.
func CheckString(s, name string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return &Error{Path: name, Reason: reasonNUL}
	}
	if !utf8.ValidString(s) {
		return &Error{Path: name, Reason: reasonUTF8}
	}
	return nil
}

// CheckStrings is CheckString on each element, named name[i].
func CheckStrings(ss []string, name string) error {
	for i, s := range ss {
		if err := CheckString(s, name+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	return nil
}

// NULReplacement stands for a NUL character in sanitized text: U+2400 SYMBOL FOR NULL, visible, and
// never confused with the escapes of JSON.
const NULReplacement = "\u2400"

// Sanitize returns s in a form every store can hold, changed as little as possible: each NUL becomes
// NULReplacement and each byte that is not part of valid UTF-8 becomes U+FFFD. Use it on text that
// must be stored whatever it holds, such as the message and trace of a failed attempt.
func Sanitize(s string) string {
	if CheckString(s, "") == nil {
		return s
	}
	var sb strings.Builder
	sb.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0 {
			sb.WriteString(NULReplacement)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			sb.WriteByte(c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			sb.WriteRune(utf8.RuneError)
			i++
			continue
		}
		sb.WriteString(s[i : i+size])
		i += size
	}
	return sb.String()
}

// SanitizeJSON returns raw in a form every store can hold: raw itself when Check finds nothing;
// otherwise each string (keys too) is Sanitized, lone surrogates become U+FFFD, and each number
// out of range becomes a string holding it as written. raw that is not valid JSON becomes a JSON
// string holding its sanitized text.
func SanitizeJSON(raw json.RawMessage) json.RawMessage {
	if Check(raw, "") == nil {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		b, _ := json.Marshal(Sanitize(string(raw)))
		return b
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(sanitizeValue(v)); err != nil {
		b, _ := json.Marshal(Sanitize(string(raw)))
		return b
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// sanitizeValue rewrites a decoded JSON value (decoded with UseNumber) as SanitizeJSON describes.
// encoding/json has already turned invalid UTF-8 and lone surrogates into U+FFFD.
func sanitizeValue(v any) any {
	switch x := v.(type) {
	case string:
		return Sanitize(x)
	case json.Number:
		if !numberOK([]byte(x)) {
			return Sanitize(string(x))
		}
		return x
	case []any:
		for i := range x {
			x[i] = sanitizeValue(x[i])
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[Sanitize(k)] = sanitizeValue(e)
		}
		return out
	}
	return v
}
