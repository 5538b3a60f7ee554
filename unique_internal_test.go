package pronto

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/store"
)

func TestCanonicalNumber(t *testing.T) {
	for in, want := range map[string]string{
		"1": "1", "1.0": "1", "1e0": "1", "-0": "0", "0.5": "0.5", "100": "100", "1e21": "1e+21",
		"1e-7": "1e-7", "0.000001": "0.000001", "1.5e300": "1.5e+300", "0e99999999999": "0",
		// Exact beyond what a double holds: no two values share a form.
		"12345678901234567890": "12345678901234567890", "9007199254740993": "9007199254740993",
		"9007199254740992": "9007199254740992", "-9223372036854775808": "-9223372036854775808",
		"0.1000000000000000000001": "0.1000000000000000000001", "1e-400": "1e-400",
		"123456789012345678901234": "1.23456789012345678901234e+23", "00.50e1": "5",
		"1e400": "1e400", // beyond the double range: as written, as before
	} {
		if got := canonicalNumber(json.Number(in)); string(got) != want {
			t.Errorf("canonicalNumber(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestUniqueKeyIgnoresNumberSpellingAndKeyOrder(t *testing.T) {
	u := &UniqueOpts{ByArgs: true}
	a, err := uniqueKey(u, &store.InsertParams{Kind: "k", Args: json.RawMessage(`[{"a":1,"b":{"y":2.0,"x":"s"}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := uniqueKey(u, &store.InsertParams{Kind: "k", Args: json.RawMessage(`[{"b":{"x":"s","y":2},"a":1.0}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if a != b || len(a) != 64 {
		t.Fatalf("fingerprints differ or are not SHA-256 hex: %s vs %s", a, b)
	}
	c, err := uniqueKey(u, &store.InsertParams{Kind: "other", Args: json.RawMessage(`[{"a":1,"b":{"y":2,"x":"s"}}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Fatal("the kind is part of every fingerprint")
	}
}

// floatCanonical is canonicalNumber as it was before it became exact: through float64.
func floatCanonical(n string) string {
	f, err := strconv.ParseFloat(n, 64)
	if err != nil || math.IsInf(f, 0) {
		return n
	}
	if f == 0 {
		return "0"
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	mant, exp, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
	return mant + "e" + exp[:1] + strings.TrimLeft(exp[1:], "0")
}

// TestCanonicalNumberKeepsExactFloatForms: for every number the float64 form wrote with its own value
// (integers up to 2^53, decimals with few digits, doubles in any notation), the exact form is the
// same text, so fingerprints of jobs stored before stay valid.
func TestCanonicalNumberKeepsExactFloatForms(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var ins []string
	for range 20000 {
		ins = append(ins,
			strconv.FormatInt(r.Int64N(1<<53)-(1<<52), 10),
			strconv.FormatFloat(float64(r.IntN(2000000)-1000000)/1000, 'f', -1, 64),
			strconv.FormatFloat(math.Float64frombits(r.Uint64()), 'g', -1, 64),
			strconv.FormatFloat(r.NormFloat64()*math.Pow(10, float64(r.IntN(60)-30)), 'e', r.IntN(10), 64),
			strconv.FormatInt(r.Int64N(1000), 10)+".0",
		)
	}
	compared := 0
	for _, in := range ins {
		if strings.Contains(in, "NaN") || strings.Contains(in, "Inf") {
			continue
		}
		old := floatCanonical(in)
		want, _ := new(big.Rat).SetString(in)
		got, _ := new(big.Rat).SetString(old)
		if want == nil || got == nil || want.Cmp(got) != 0 {
			continue // the float64 form was not this number's value
		}
		if c := string(canonicalNumber(json.Number(in))); c != old {
			t.Fatalf("canonicalNumber(%s) = %s, the float64 form was %s", in, c, old)
		}
		compared++
	}
	if compared < len(ins)*9/10 {
		t.Fatalf("only %d of %d numbers had an exact float64 form: the sample tests little", compared, len(ins))
	}
}

// TestUniqueKeyPinned pins fingerprints as pronto computed them when numbers went through float64:
// jobs stored then must still meet the jobs inserted now.
func TestUniqueKeyPinned(t *testing.T) {
	for _, c := range []struct{ args, key string }{
		{`[0]`, "5eca83ab6f8dcd7ba13ae08bed5037b16ecfe0d446c62f8ecc1c451c059bd73b"},
		{`[-0]`, "5eca83ab6f8dcd7ba13ae08bed5037b16ecfe0d446c62f8ecc1c451c059bd73b"},
		{`[1]`, "9d9f9ae20db5fba42388e6ed4edac86212b73e9195f9c227f8d17a39bcfaf362"},
		{`[1.0]`, "9d9f9ae20db5fba42388e6ed4edac86212b73e9195f9c227f8d17a39bcfaf362"},
		{`[-1]`, "e15eeceda10e0556da15576977d7633368f1eb1be3f3ec7dee31aaa92f717890"},
		{`[42]`, "5c3e2b3f7fbfed8271da45d63bc520dd48a02d68ff1c1513b65c1217adc421cb"},
		{`[-42]`, "066414861a9ab2d49f373dc1a4a788830e414b8067d1e8f3e4b48da59433a33a"},
		{`[1.5]`, "fc82210a6c2612fc25ce9c883e9179b6b726d541c19f169852647e28217846bb"},
		{`[0.1]`, "a030a18929b6a75044d4eede7271b6e04dcb9f5ceea503f864b480a8b6a3e4cd"},
		{`[-0.25]`, "650cb0abd01415d564b8184d2e0040c8a878c3c1636f85fc4604d732df78f906"},
		{`[1e3]`, "40d13972cafaca161f92a3e6c0ce2fd3ce8b3bd4fab6162fdb5c109d21539a5c"},
		{`[1E3]`, "40d13972cafaca161f92a3e6c0ce2fd3ce8b3bd4fab6162fdb5c109d21539a5c"},
		{`[0.000001]`, "3a5157f5e1d3d7cea1678fc08bcfe38eb1e044ffd7f6f3d0aa4ef6ab86e373c7"},
		{`[1e-7]`, "d30e1e7495d595f4dcce44359fe2d5a22ffdbdbe8a3adbc161394e713beaa413"},
		{`[1e21]`, "9339aa2efcf294e0c1dd047227044c15e5455b2a56eec2e8b11350c02c1fc80f"},
		{`[1.5e300]`, "12c93c1fc039221f8b8508d824242d2147aa3decc260aee0ef3144feb61a8e17"},
		{`[9007199254740992]`, "9f61a3719e45fdd2eabfc2d41d19adb5b2582c26038e529fc70ef6762561321d"},
		{`[123456789012]`, "9cab73e7444ad78eb3bbff96511dd426e657bf6ba134edbef1ceffa4306b9981"},
		{`[{"id":7,"ratio":2.50,"tags":["a","b"],"n":null,"ok":true}]`, "3860ad685cee8f55fc4df0aecb116886e7326be69bc32db6dca043d0f7a41e6d"},
		{`{"user":{"id":12,"score":-3.75}}`, "30fc0f4ffde1bd639f5df1659859ad9e881ee5f2cd41d84f81a7d0779f073186"},
	} {
		got, err := uniqueKey(&UniqueOpts{ByArgs: true}, &store.InsertParams{Kind: "pin.kind", Args: json.RawMessage(c.args)})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.key {
			t.Errorf("args %s: fingerprint %s, pinned %s", c.args, got, c.key)
		}
	}
	got, err := uniqueKey(&UniqueOpts{ByQueue: true, MetaKeys: []string{"m"}},
		&store.InsertParams{Kind: "pin.kind", Queue: "q", Meta: json.RawMessage(`{"m":2.0,"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := "9b66e5e68bab543e9f7f8e18cbb83f70775bc6ee451e3b7c86f81d06f3e47634"; got != want {
		t.Errorf("meta fingerprint %s, pinned %s", got, want)
	}
}

// TestUniqueKeyTellsLargeIntegersApart: int64 ids beyond 2^53, which one double would hold, are
// different args and so different fingerprints.
func TestUniqueKeyTellsLargeIntegersApart(t *testing.T) {
	u := &UniqueOpts{ByArgs: true}
	a, err := uniqueKey(u, &store.InsertParams{Kind: "k", Args: json.RawMessage(`[{"id":9007199254740993}]`)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := uniqueKey(u, &store.InsertParams{Kind: "k", Args: json.RawMessage(`[{"id":9007199254740992}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("9007199254740993 and 9007199254740992 share a fingerprint")
	}
}

// TestBatchUniqueCause: a store's conflict whose holder is a job of the batch itself names the later
// job with that key, found by fingerprint; a conflict with a job outside the batch stays as it is.
func TestBatchUniqueCause(t *testing.T) {
	ps := []*store.InsertParams{{ID: "a", UniqueKey: "k1"}, {ID: "b", UniqueKey: "k2"}, {ID: "c", UniqueKey: "k1"}}
	var bce *BatchUniqueConflictError
	err := batchUniqueCause(ps, &store.UniqueConflictError{Key: "k1", ExistingID: "a"})
	if !errors.As(err, &bce) || bce.Index != 2 || bce.HolderIndex != 0 || bce.Key != "k1" {
		t.Fatalf("in-batch conflict: %v, want job 2 against job 0", err)
	}
	if !errors.Is(err, ErrUniqueConflict) {
		t.Fatalf("%v is not an ErrUniqueConflict", err)
	}
	outside := &store.UniqueConflictError{Key: "k1", ExistingID: "z"}
	if err := batchUniqueCause(ps, outside); err != error(outside) {
		t.Fatalf("a stored holder: %v, want the store's error", err)
	}
}
