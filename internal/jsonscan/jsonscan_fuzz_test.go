package jsonscan

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// FuzzScalars checks Value, Text and Int against encoding/json: on any input and any start they
// never panic and stay within the input; on a valid document Value finds where it ends, Text
// decodes a string as encoding/json does, and Int reads exactly the integers within int64.
func FuzzScalars(f *testing.F) {
	for _, s := range []string{`"plain"`, `"tab\tq\"\\u\u00e9"`, "\"\xff\"", `"\ud800"`, `0`, `-0`, `-9223372036854775808`,
		`9223372036854775807`, `9223372036854775808`, `1e3`, `1.0`, ` [1, {"a": "]"}] `, `{"k":"}"}`, `true`, ` null `} {
		f.Add([]byte(s), uint16(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, at uint16) {
		i := int(at) % (len(b) + 1)
		if end := Value(b, i); end != -1 && (end <= i || end > len(b)) {
			t.Fatalf("Value(%q, %d) = %d", b, i, end)
		}
		if end := String(b, i); end != -1 && (end <= i || end > len(b)) {
			t.Fatalf("String(%q, %d) = %d", b, i, end)
		}
		text, textOK := Text(b)
		n, intOK := Int(b)
		if !json.Valid(b) {
			return
		}
		start := Space(b, 0)
		trimmed := bytes.TrimRight(b, " \t\r\n")
		if end := Value(b, start); end != len(trimmed) {
			t.Fatalf("Value(%q, %d) = %d, want %d", b, start, end, len(trimmed))
		}
		var s string
		wantText := json.Unmarshal(b, &s) == nil && b[0] == '"' && len(trimmed) == len(b)
		if textOK != wantText || textOK && text != s {
			t.Fatalf("Text(%q) = %q, %v; encoding/json: %q, %v", b, text, textOK, s, wantText)
		}
		want, err := strconv.ParseInt(string(b), 10, 64)
		if intOK != (err == nil) || intOK && n != want {
			t.Fatalf("Int(%q) = %d, %v; strconv: %d, %v", b, n, intOK, want, err)
		}
	})
}
