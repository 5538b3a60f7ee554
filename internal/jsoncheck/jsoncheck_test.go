package jsoncheck

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		doc, name string
		path      string // "" with reason "": accepted
		reason    string
	}{
		{`["a","b",{"c":[1,2.5,-3e10,true,null]}]`, "args", "", ""},
		{`{"emoji":"\ud83d\ude00","é":"ü","esc":"\n\t\"\\\/\u00e9"}`, "meta", "", ""},
		{`[0, -0, 0.0, 0e10, 1e308, -1.7976931348623157e308, 5e-324, 123456789012345678]`, "args", "", ""},
		{`[]`, "args", "", ""},
		{`{}`, "", "", ""},
		{`["a\u0000b"]`, "args", "args[0]", reasonNUL},
		{`["ok",{"x":["y","\u0000"]}]`, "args", "args[1].x[1]", reasonNUL},
		{`{"a":1,"b\u0000":2}`, "meta", `meta (key "b` + NULReplacement + `")`, reasonNUL},
		{`{"trace":{"id":"\u0000"}}`, "meta", "meta.trace.id", reasonNUL},
		{"[\"a\x00b\"]", "args", "args[0]", reasonNUL},
		{"[\"\xff\"]", "args", "args[0]", reasonUTF8},
		{"{\"k\":\"ok\xc3\"}", "", "k", reasonUTF8},
		{"[\"\xed\xa0\x80\"]", "args", "args[0]", reasonUTF8}, // a surrogate encoded as UTF-8
		{`["\ud800"]`, "args", "args[0]", reasonSurrogate},
		{`["\udc00"]`, "args", "args[0]", reasonSurrogate},
		{`["\ud800\u0041"]`, "args", "args[0]", reasonSurrogate},
		{`["\ud800x"]`, "args", "args[0]", reasonSurrogate},
		{`["x\ud800"]`, "args", "args[0]", reasonSurrogate},
		{`[1e1000000]`, "args", "args[0]", reasonNumber},
		{`[1, 2, -1e400]`, "args", "args[2]", reasonNumber},
		{`{"n":1e-400}`, "meta", "meta.n", reasonNumber},
		{`[0.` + strings.Repeat("1", 1001) + `]`, "args", "args[0]", reasonNumber},
		{`[1` + strings.Repeat("0", 400) + `]`, "args", "args[0]", reasonNumber},
		// Zero takes any exponent as a double, but PostgreSQL's numeric holds 16383 digits after the
		// decimal point at most.
		{`[0e-16383, 0e20000, 0.5e-300, 1.5e-300]`, "args", "", ""},
		{`[0e-16384]`, "args", "args[0]", reasonNumber},
		{`{"v":0e-20000}`, "result", "result.v", reasonNumber},
		{`[-0.0e-16383]`, "args", "args[0]", reasonNumber},
		{`[0.5e-16383]`, "args", "args[0]", reasonNumber},
		{`[0e-99999999999999999999]`, "args", "args[0]", reasonNumber},
		{`"a\u0000"`, "result", "result", reasonNUL},
		{`1e1000000`, "result", "result", reasonNumber},
		{strings.Repeat("[", MaxDepth+1), "args", "", reasonDepth},
	}
	for _, c := range cases {
		err := Check([]byte(c.doc), c.name)
		if c.reason == "" {
			if err != nil {
				t.Errorf("Check(%q): %v, want nil", c.doc, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrUnstorable) {
			t.Errorf("Check(%q) = %v, want an *Error", c.doc, err)
			continue
		}
		if e.Reason != c.reason || (c.path != "" && e.Path != c.path) {
			t.Errorf("Check(%q) = path %q reason %q, want %q %q", c.doc, e.Path, e.Reason, c.path, c.reason)
		}
	}
}

// TestCheckTotal: garbage never panics.
func TestCheckTotal(t *testing.T) {
	for _, doc := range []string{`"`, `"\`, `"\u12`, `"\ud800\u`, `]]]}}`, `{"a"`, "\x00", `["a",`, `-`, `e`, `{"a":"b",}`, "\"\\ud800\\"} {
		_ = Check([]byte(doc), "x")
	}
}

func TestCheckString(t *testing.T) {
	if err := CheckString("ok é", "worker_id"); err != nil {
		t.Fatal(err)
	}
	if err := CheckString("a\x00", "worker_id"); err == nil || err.Error() != "worker_id: "+reasonNUL {
		t.Fatalf("got %v", err)
	}
	if err := CheckString("a\xff", "tags[1]"); err == nil || !strings.HasPrefix(err.Error(), "tags[1]: ") {
		t.Fatalf("got %v", err)
	}
	if err := CheckStrings([]string{"a", "b\x00"}, "tags"); err == nil || !strings.HasPrefix(err.Error(), "tags[1]: ") {
		t.Fatalf("got %v", err)
	}
}

func TestSanitize(t *testing.T) {
	cases := map[string]string{
		"plain":         "plain",
		"a\x00b":        "a" + NULReplacement + "b",
		"a\xffb":        "a\ufffdb",
		"\xed\xa0\x80":  "\ufffd\ufffd\ufffd",
		"ok é \x00\xc3": "ok é " + NULReplacement + "\ufffd",
		"":              "",
	}
	for in, want := range cases {
		got := Sanitize(in)
		if got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
		if CheckString(got, "") != nil || !utf8.ValidString(got) {
			t.Errorf("Sanitize(%q) = %q is not storable", in, got)
		}
	}
}

func TestSanitizeJSON(t *testing.T) {
	cases := map[string]string{
		`{"code":"x","message":"m"}`:           `{"code":"x","message":"m"}`,
		`{"message":"a\u0000b","n":1e1000000}`: `{"message":"a` + NULReplacement + `b","n":"1e1000000"}`,
		`{"k\u0000":["\ud800"]}`:               `{"k` + NULReplacement + `":["` + "\ufffd" + `"]}`,
		"{\"m\":\"\xff<>\"}":                   "{\"m\":\"\ufffd<>\"}",
	}
	for in, want := range cases {
		got := SanitizeJSON(json.RawMessage(in))
		if string(got) != want {
			t.Errorf("SanitizeJSON(%q) = %s, want %s", in, got, want)
		}
		if Check(got, "") != nil || !json.Valid(got) {
			t.Errorf("SanitizeJSON(%q) = %s is not storable", in, got)
		}
	}
}

// FuzzSanitize: whatever goes in, what comes out is storable.
func FuzzSanitize(f *testing.F) {
	for _, s := range []string{`{"a":"\u0000"}`, "\xff", `["\ud800"]`, `[1e999]`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := Sanitize(s); CheckString(got, "") != nil {
			t.Fatalf("Sanitize(%q) = %q", s, got)
		}
		if json.Valid([]byte(s)) {
			got := SanitizeJSON(json.RawMessage(s))
			if err := Check(got, ""); err != nil || !json.Valid(got) {
				t.Fatalf("SanitizeJSON(%q) = %s: %v", s, got, err)
			}
		}
	})
}

var benchDoc = []byte(`{"type":"report.generate","args":[42,"quarterly",{"include_charts":true,"title":"Q3 — résumé","n":1.5e3}],"meta":{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","tags":["a","b"]},"options":{"queue":"reports","priority":10,"timeout_ms":300000}}`)

// BenchmarkCheck compares Check with json.Valid, the pass every request body already gets.
func BenchmarkCheck(b *testing.B) {
	b.SetBytes(int64(len(benchDoc)))
	for b.Loop() {
		if Check(benchDoc, "") != nil {
			b.Fatal("refused")
		}
	}
}

func BenchmarkValid(b *testing.B) {
	b.SetBytes(int64(len(benchDoc)))
	for b.Loop() {
		if !json.Valid(benchDoc) {
			b.Fatal("invalid")
		}
	}
}
