package server

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/internal/jsonscan"
)

// A request body is split into its top-level members without reflection: after json.Valid has
// checked the whole document, splitObject walks it once and returns each member's key and raw value
// as sub-slices of the body (no copies). Values are decoded only when a handler reads them.

// member is one member of a JSON object.
type member struct {
	key string
	val json.RawMessage
}

// object is a JSON object's members in document order.
type object []member

// get returns the value of key; when a key repeats, the last one wins, as with encoding/json.
func (o object) get(key string) (json.RawMessage, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].key == key {
			return o[i].val, true
		}
	}
	return nil, false
}

// splitObject splits a valid JSON object (it must start with '{' after white space). It returns
// false for anything else.
func splitObject(b []byte) (object, bool) {
	i := jsonscan.Space(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = jsonscan.Space(b, i+1)
	out := make(object, 0, 8)
	if i < len(b) && b[i] == '}' {
		return object{}, true
	}
	for i < len(b) {
		if b[i] != '"' {
			return nil, false
		}
		end := jsonscan.String(b, i)
		if end < 0 {
			return nil, false
		}
		key, ok := rawString(b[i:end])
		if !ok {
			return nil, false
		}
		i = jsonscan.Space(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = jsonscan.Space(b, i+1)
		vend := jsonscan.Value(b, i)
		if vend < 0 {
			return nil, false
		}
		out = append(out, member{key: key, val: b[i:vend:vend]})
		i = jsonscan.Space(b, vend)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = jsonscan.Space(b, i+1)
		case '}':
			return out, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// scanObject is the fast path of decodeBody: in one pass, it checks that b is a JSON object that
// json.Valid accepts and in which jsoncheck.Check finds nothing to refuse, and appends its members to
// dst as splitObject would. It answers false whenever it is not sure (an exponent or a long number,
// a \u escape of a NUL or a surrogate, bytes that are not UTF-8, nesting deeper than scanMaxDepth, or
// anything that is not JSON): the caller then takes the slower path, which says what is wrong.
func scanObject(dst object, b []byte) (object, bool) {
	i := jsonscan.Space(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = jsonscan.Space(b, i+1)
	if i < len(b) && b[i] == '}' {
		if jsonscan.Space(b, i+1) != len(b) {
			return nil, false
		}
		return object{}, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		kend := scanString(b, i)
		if kend < 0 {
			return nil, false
		}
		key, ok := memberKey(b[i:kend])
		if !ok {
			return nil, false
		}
		i = jsonscan.Space(b, kend)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = jsonscan.Space(b, i+1)
		vend := scanValue(b, i, 1)
		if vend < 0 {
			return nil, false
		}
		dst = append(dst, member{key: key, val: b[i:vend:vend]})
		i = jsonscan.Space(b, vend)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = jsonscan.Space(b, i+1)
		case '}':
			if jsonscan.Space(b, i+1) != len(b) {
				return nil, false
			}
			return dst, true
		default:
			return nil, false
		}
	}
}

// scanMaxDepth bounds the nesting scanObject follows; deeper documents take the slow path.
const scanMaxDepth = 64

// scanValue returns the index just after the JSON value starting at b[i], or -1 when it is not sure
// the value is valid and storable (see scanObject).
func scanValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return scanString(b, i)
	case c == '{' || c == '[':
		if depth >= scanMaxDepth {
			return -1
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = jsonscan.Space(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return -1
				}
				if i = scanString(b, i); i < 0 {
					return -1
				}
				i = jsonscan.Space(b, i)
				if i >= len(b) || b[i] != ':' {
					return -1
				}
				i = jsonscan.Space(b, i+1)
			}
			if i = scanValue(b, i, depth+1); i < 0 {
				return -1
			}
			i = jsonscan.Space(b, i)
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case ',':
				i = jsonscan.Space(b, i+1)
			case closer:
				return i + 1
			default:
				return -1
			}
		}
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	}
	return -1
}

func scanLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// scanNumber reads a JSON number without an exponent and of at most 15 characters (one
// jsoncheck accepts without parsing it); others answer -1.
func scanNumber(b []byte, i int) int {
	j := i
	if b[j] == '-' {
		j++
	}
	switch {
	case j >= len(b):
		return -1
	case b[j] == '0':
		j++
	case b[j] >= '1' && b[j] <= '9':
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	default:
		return -1
	}
	if j < len(b) && b[j] == '.' {
		j++
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == k {
			return -1
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') || j-i > 15 {
		return -1
	}
	return j
}

// scanString returns the index just after the JSON string starting at b[i] (a '"'), or -1 when the
// string is not valid JSON, or holds what jsoncheck refuses, or a surrogate (even a paired one).
func scanString(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		c := b[j]
		switch {
		case c == '"':
			return j + 1
		case c == '\\':
			if j+1 >= len(b) {
				return -1
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				r, ok := jsoncheck.Hex4(b, j+2)
				if !ok || r == 0 || r >= 0xD800 && r <= 0xDFFF {
					return -1
				}
				j += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && size <= 1 {
				return -1
			}
			j += size
		}
	}
	return -1
}

// memberKey returns the text of a member's key (a valid JSON string): the keys requests use are
// returned as constants, so that reading them allocates nothing.
func memberKey(raw []byte) (string, bool) {
	if len(raw) < 2 {
		return "", false
	}
	switch string(raw[1 : len(raw)-1]) {
	case "type":
		return "type", true
	case "args":
		return "args", true
	case "meta":
		return "meta", true
	case "options":
		return "options", true
	case "queue":
		return "queue", true
	case "queues":
		return "queues", true
	case "id":
		return "id", true
	case "job_id":
		return "job_id", true
	case "worker_id":
		return "worker_id", true
	case "claim_token":
		return "claim_token", true
	case "attempt":
		return "attempt", true
	case "result":
		return "result", true
	case "count":
		return "count", true
	case "priority":
		return "priority", true
	case "specversion":
		return "specversion", true
	case "jobs":
		return "jobs", true
	case "visibility_timeout_ms":
		return "visibility_timeout_ms", true
	}
	return rawString(raw)
}
