package jsoncheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// FuzzCheck compares Check with a reference built on encoding/json's tokenizer: on every valid
// document Check refuses exactly when some string (key or value) or number is unstorable as the
// package documents it, and its error names the document and matches ErrUnstorable. On any input
// it never panics.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"a":"\u0000"}`, "\"\xff\"", `["\ud800"]`, `["\ud83d\ude00"]`, `["\ud83d\u0041"]`, `["\udc00\ud800"]`,
		`[1e999]`, `[1e-400]`, `[0e-20000]`, `[0e99999999999999999999]`, `{}`, `{"k\u0000":1}`,
		`{"a":{"b":[1,{"c":"\ud800"}]}}`, `[-0.0e-16383]`, `"\\u0000"`, `"\\\u0000"`, `[1.5e3, true, null, false]`,
		`{"\ud800x":"y"}`, `["\uDBFF\uDFFF"]`, `["\uD800\\uDC00"]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := Check(raw, "doc")
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrUnstorable) || !strings.HasPrefix(e.Path, "doc") || e.Reason == "" {
				t.Fatalf("Check(%q) = %#v", raw, err)
			}
		}
		if !json.Valid(raw) {
			return
		}
		want, why := referenceStorable(t, raw)
		if (err == nil) != want {
			t.Fatalf("Check(%q) = %v; the reference says storable=%v (%s)", raw, err, want, why)
		}
	})
}

// referenceStorable walks raw (valid JSON) with encoding/json's tokenizer, takes each token's raw
// text from the decoder's offsets, and judges it on its own.
func referenceStorable(t *testing.T, raw []byte) (bool, string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err == io.EOF {
			return true, ""
		}
		if err != nil {
			t.Fatalf("tokenizing valid JSON %q: %v", raw, err)
		}
		text := bytes.TrimLeft(raw[start:dec.InputOffset()], " \t\r\n,:")
		switch v := tok.(type) {
		case string:
			if strings.IndexByte(v, 0) >= 0 {
				return false, "NUL in " + string(text)
			}
			if !utf8.Valid(text) {
				return false, "not UTF-8"
			}
			if loneSurrogate(string(text)) {
				return false, "lone surrogate in " + string(text)
			}
		case json.Number:
			if !referenceNumberOK(string(v)) {
				return false, "number " + string(v)
			}
		}
	}
}

// loneSurrogate reports whether the raw JSON string s has a \u escape of a surrogate that is not a
// high one followed at once by an escaped low one.
func loneSurrogate(s string) bool {
	for i := 1; i < len(s)-1; i++ {
		if s[i] != '\\' {
			continue
		}
		if s[i+1] != 'u' {
			i++ // the escaped character
			continue
		}
		r := hexRune(s[i+2 : i+6])
		if !utf16.IsSurrogate(r) {
			i += 5
			continue
		}
		if i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' && utf16.DecodeRune(r, hexRune(s[i+8:i+12])) != utf8.RuneError {
			i += 11
			continue
		}
		return true
	}
	return false
}

func hexRune(h string) rune {
	n, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return -1
	}
	return rune(n)
}

// referenceNumberOK restates the package's number rule with exact arithmetic: at most MaxNumberLen
// characters, an exponent within int, a finite double that is zero only when written as zero, and
// at most 16383 digits after the decimal point as written with its exponent.
func referenceNumberOK(num string) bool {
	if len(num) > MaxNumberLen {
		return false
	}
	mant, exp := num, "0"
	if k := strings.IndexAny(num, "eE"); k >= 0 {
		mant, exp = num[:k], num[k+1:]
	}
	e, ok := new(big.Int).SetString(strings.TrimPrefix(exp, "+"), 10)
	if !ok || !e.IsInt64() || e.Int64() > math.MaxInt || e.Int64() < math.MinInt {
		return false
	}
	frac := 0
	if d := strings.IndexByte(mant, '.'); d >= 0 {
		frac = len(mant) - d - 1
	}
	if new(big.Int).Sub(big.NewInt(int64(frac)), e).Cmp(big.NewInt(16383)) > 0 {
		return false
	}
	x, _, err := big.ParseFloat(num, 10, 200, big.ToNearestEven)
	if err != nil {
		return false
	}
	f, _ := x.Float64()
	if math.IsInf(f, 0) {
		return false
	}
	return f != 0 || x.Sign() == 0
}
