package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

func TestSplitArray(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string // nil: refused
	}{
		{`[]`, []string{}},
		{` [ 1 ] `, []string{`1`}},
		{`[1, "a", null, {"k": [1, {"x": "]"}]}, [" \" ]"]]`, []string{`1`, `"a"`, `null`, `{"k": [1, {"x": "]"}]}`, `[" \" ]"]`}},
		{`[1,]`, nil}, {`[1 2]`, nil}, {`["a"]x`, nil}, {`["\"]`, nil}, {`{}`, nil}, {``, nil}, {`[`, nil}, {`[[1]`, nil},
	} {
		got, ok := SplitArray([]byte(c.in), nil)
		if c.want == nil {
			if ok {
				t.Errorf("SplitArray(%q) = %q, want refused", c.in, got)
			}
			continue
		}
		if !ok || fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
			t.Errorf("SplitArray(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
}

func TestScalars(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`"plain"`, "plain", true},
		{`""`, "", true},
		{`"tab\tquote\"slash\\u\u00e9"`, "tab\tquote\"slash\\u\u00e9", true},
		{`"héllo"`, "héllo", true},
		{`plain`, "", false},
		{`"`, "", false},
		{"\"a\x01b\"", "", false}, // a control character must be escaped
	} {
		got, ok := Text([]byte(c.in))
		if ok != c.ok || got != c.want {
			t.Errorf("Text(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`0`, 0, true}, {`-7`, -7, true}, {`1732848000123456`, 1732848000123456, true},
		{`999999999999999999`, 999999999999999999, true},
		{`9223372036854775807`, 9223372036854775807, true}, {`-9223372036854775808`, -9223372036854775808, true},
		{`9223372036854775808`, 0, false}, {`1e3`, 0, false}, {`1.5`, 0, false}, {`-`, 0, false}, {``, 0, false}, {`12a`, 0, false},
	} {
		got, ok := Int([]byte(c.in))
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("Int(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzSplitArray checks SplitArray against encoding/json: it never panics, and on any valid JSON
// array it finds exactly the elements encoding/json finds.
func FuzzSplitArray(f *testing.F) {
	for _, s := range []string{`[]`, `[1, "a", null, {"k": [1, {"x": "]"}]}]`, `[" \\\" ", [[]]]`, ` [ 1 ] `, `[-1.5e3, true]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := SplitArray(b, nil)
		var want []json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil { // want is nil for the literal null
			return // not a valid array: any answer will do, as long as nothing panicked
		}
		if !ok {
			t.Fatalf("valid array %q refused", b)
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
			t.Fatalf("split %q:\n got %q\nwant %q", b, got, want)
		}
		for i, v := range got {
			if !bytes.Equal(v, want[i]) {
				t.Fatalf("element %d: %q, want %q", i, v, want[i])
			}
		}
	})
}
