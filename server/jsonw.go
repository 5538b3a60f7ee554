package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Responses are written by appending JSON to pooled byte slices: the job objects that dominate the
// traffic are built field by field, without reflection.

// ojsMediaType is the content type of every response.
const ojsMediaType = "application/openjobspec+json"

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 1<<20 { // do not keep huge buffers alive
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// writeRaw writes a complete JSON body with the OJS headers.
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = contentTypeValue
	if len(body) > 2048 {
		// Smaller bodies get their Content-Length from net/http, which buffers them whole.
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeBuf writes b as the body and returns it to the pool.
func writeBuf(w http.ResponseWriter, status int, b *[]byte) {
	writeRaw(w, status, *b)
	putBuf(b)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, so the output is always
// valid JSON.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// timeLayout is the OJS timestamp form: RFC 3339 in UTC, to the millisecond, trailing zeros of the
// fraction left out ("2026-02-12T10:30:00Z", "2026-02-12T10:30:00.12Z").
const timeLayout = "2006-01-02T15:04:05.999Z07:00"

// appendTime appends t as a JSON string in timeLayout. Every job a response holds has several
// timestamps, and time.Time.AppendFormat interprets its layout on every call: the common years are
// written here digit by digit instead (the test compares both on random times).
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		b = append(b, '"')
		b = t.AppendFormat(b, timeLayout)
		return append(b, '"')
	}
	hour, minute, sec := t.Clock()
	b = append(b, '"',
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+month/10), byte('0'+month%10), '-', byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':', byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+sec/10), byte('0'+sec%10))
	// ".999": the milliseconds, truncated, without trailing zeros, and no dot when they are 0.
	if ms := t.Nanosecond() / 1e6; ms != 0 {
		b = append(b, '.', byte('0'+ms/100))
		if ms%100 != 0 {
			b = append(b, byte('0'+ms/10%10))
			if ms%10 != 0 {
				b = append(b, byte('0'+ms%10))
			}
		}
	}
	return append(b, 'Z', '"')
}

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// appendKey appends ,"key": (the comma unless b ends an opening brace).
func appendKey(b []byte, key string) []byte {
	if n := len(b); n > 0 && b[n-1] != '{' && b[n-1] != '[' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

func appendStringField(b []byte, key, v string) []byte {
	return appendString(appendKey(b, key), v)
}

func appendIntField(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, key), v, 10)
}

func appendBoolField(b []byte, key string, v bool) []byte {
	return strconv.AppendBool(appendKey(b, key), v)
}

func appendTimeField(b []byte, key string, t time.Time) []byte {
	return appendTime(appendKey(b, key), t)
}

// appendRawField appends a value that is already JSON.
func appendRawField(b []byte, key string, raw []byte) []byte {
	return append(appendKey(b, key), raw...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}
