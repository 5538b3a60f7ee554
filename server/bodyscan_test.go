package server

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pronto-jobs/pronto/internal/jsoncheck"
)

// scanSeeds add to fuzzSeeds the shapes scanObject must get right: every kind of value, escapes,
// numbers at the edge of its fast path, white space, and near misses of valid JSON.
var scanSeeds = []string{
	` { "a" : [ 1 , -0.5 , 0 , -12.25 , true , false , null , "x\"\\\/\b\f\n\r\t\u00e9\u20ac" ] , "b" : { } , "c" : [ ] } `,
	`{"n":123456789012345}`, `{"n":1234567890123456}`, `{"n":-12345678901234}`, `{"n":1e5}`, `{"n":1E-5}`,
	`{"n":01}`, `{"n":-}`, `{"n":1.}`, `{"n":.5}`, `{"n":+1}`, `{"n":1.5e}`, `{"n":0x10}`,
	`{"s":"\ud83d\ude00"}`, `{"s":"\u0000"}`, `{"s":"\u00"}`, `{"s":"\x"}`, "{\"s\":\"a\tb\"}", "{\"s\":\"\xed\xa0\x80\"}",
	"{\"s\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", "{\"s\":\"\xc3\"}", "{\"s\":\"\xef\xbf\xbd\"}",
	`{"a":1,}`, `{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[1 2]}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1}}`, `{"a":1} x`,
	`{"a":tru}`, `{"a":nul}`, `{"a":falsey}`, `{"a":"x`, `{"a":{"b":[{"c":{}}]}}`, `{}`, ` {} `, `{} {}`,
	`{"a":1,"a":2}`, `{"ty\u0070e":"a.b","args":[]}`, `{"":1}`, "{\"a\":1}\n", "\xef\xbb\xbf{}",
	`{"d":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
}

// checkScan fails when scanObject accepts b although json.Valid or jsoncheck.Check would not, or
// splits it otherwise than splitObject, or refuses a simple document it should take.
func checkScan(t *testing.T, b []byte) {
	o, ok := scanObject(nil, b)
	if !ok {
		return
	}
	if !json.Valid(b) {
		t.Fatalf("scanObject accepts %q, which is not valid JSON", b)
	}
	if err := jsoncheck.Check(b, ""); err != nil {
		t.Fatalf("scanObject accepts %q, which jsoncheck refuses: %v", b, err)
	}
	want, wok := splitObject(b)
	if !wok {
		t.Fatalf("scanObject accepts %q, which splitObject does not split", b)
	}
	if len(o) != len(want) || (len(o) > 0 && !reflect.DeepEqual(o, want)) {
		t.Fatalf("scanObject(%q) = %q, splitObject gives %q", b, o, want)
	}
}

func TestScanObject(t *testing.T) {
	for _, s := range append(append([]string{}, fuzzSeeds...), scanSeeds...) {
		checkScan(t, []byte(s))
	}
	// What the fast path is for: the request bodies clients send.
	for _, s := range []string{fuzzSeeds[0], fuzzSeeds[1], scanSeeds[0], `{"n":123456789012345}`,
		`{"s":"\u00e9"}`, `{"ty\u0070e":"a.b","args":[]}`, ` {} `} {
		if _, ok := scanObject(nil, []byte(s)); !ok {
			t.Errorf("scanObject refuses %s", s)
		}
	}
	// Refused by the fast path, so that the slow path names the problem.
	for _, s := range []string{`{"n":1e5}`, `{"n":1234567890123456}`, `{"s":"\u0000"}`, `{"s":"\ud83d\ude00"}`,
		"{\"s\":\"\xc3\"}", `{"a":1,}`, `{} {}`, `[]`, `{"a":1} x`} {
		if _, ok := scanObject(nil, []byte(s)); ok {
			t.Errorf("scanObject accepts %s", s)
		}
	}
}

func FuzzScanObject(f *testing.F) {
	for _, s := range append(append([]string{}, fuzzSeeds...), scanSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkScan(t, b) })
}
