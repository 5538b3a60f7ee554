package server

import "encoding/json"

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
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	out := make(object, 0, 8)
	if i < len(b) && b[i] == '}' {
		return object{}, true
	}
	for i < len(b) {
		if b[i] != '"' {
			return nil, false
		}
		end := skipString(b, i)
		if end < 0 {
			return nil, false
		}
		key, ok := rawString(b[i:end])
		if !ok {
			return nil, false
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		vend := skipValue(b, i)
		if vend < 0 {
			return nil, false
		}
		out = append(out, member{key: key, val: b[i:vend:vend]})
		i = skipSpace(b, vend)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return out, true
		default:
			return nil, false
		}
	}
	return nil, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just after the string starting at b[i] (a '"'), or -1.
func skipString(b []byte, i int) int {
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

// skipValue returns the index just after the value starting at b[i], or -1. The document is valid
// JSON, so only strings and nesting need care.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := skipString(b, j)
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
