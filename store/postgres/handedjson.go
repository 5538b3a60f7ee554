package postgres

import (
	"encoding/json"
	"strconv"
)

// A small reader for the one JSON shape the hand-off's notifications carry (handedPayload): a
// flat array whose elements are strings, integers, null, or JSON values stored in jsonb and text[]
// columns. encoding/json decoded it through reflection, one Unmarshal per column: about a seventh
// of a worker process's CPU at 300 jobs/s (docs/benchmarks.md). This reader walks the payload
// once and slices it; the JSON values are handed on as PostgreSQL wrote them, as a claim's rows
// are. It checks the structure (balanced brackets, terminated strings, no trailing bytes), so a
// malformed notification is an error, never a panic.

// splitJSONArray returns the raw elements of the JSON array b, appended to dst. The elements alias
// b.
func splitJSONArray(b []byte, dst [][]byte) ([][]byte, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, errHanded
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		if skipSpace(b, i+1) != len(b) {
			return nil, errHanded
		}
		return dst, nil
	}
	for {
		end, ok := skipJSONValue(b, i)
		if !ok {
			return nil, errHanded
		}
		dst = append(dst, b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, errHanded
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			if skipSpace(b, i+1) != len(b) {
				return nil, errHanded
			}
			return dst, nil
		default:
			return nil, errHanded
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipJSONValue returns the end of the JSON value that starts at b[i]. Nested values are checked
// for balance only; their contents are PostgreSQL's own output, decoded later by whoever reads them.
func skipJSONValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipJSONString(b, i)
	case c == '[' || c == '{':
		var stack [64]byte // open brackets; deeper nesting is refused
		depth := 0
		for i < len(b) {
			switch c := b[i]; c {
			case '"':
				end, ok := skipJSONString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '[', '{':
				if depth == len(stack) {
					return 0, false
				}
				stack[depth] = c
				depth++
			case ']', '}':
				if depth == 0 || stack[depth-1] != c-2 { // '[' + 2 == ']', '{' + 2 == '}'
					return 0, false
				}
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	default:
		// A number or a literal: the run of characters either may hold.
		start := i
		for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] >= 'a' && b[i] <= 'z' || b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'E') {
			i++
		}
		return i, i > start
	}
}

// skipJSONString returns the end of the JSON string that starts at b[i] (a quote).
func skipJSONString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// jsonString decodes the JSON string v; one without escapes is sliced, not decoded.
func jsonString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	for _, c := range inner {
		if c == '\\' || c < 0x20 {
			var s string
			return s, json.Unmarshal(v, &s) == nil
		}
	}
	return string(inner), true
}

// jsonInt decodes the JSON integer v.
func jsonInt(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 20 {
		return 0, false
	}
	neg := v[0] == '-'
	digits := v
	if neg {
		digits = v[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		// Empty, or long enough to overflow the loop below: the slow, exact path.
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
	if neg {
		n = -n
	}
	return n, true
}
