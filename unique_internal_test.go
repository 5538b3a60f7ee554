package pronto

import (
	"encoding/json"
	"testing"

	"github.com/pronto-jobs/pronto/store"
)

func TestCanonicalNumber(t *testing.T) {
	for in, want := range map[string]string{
		"1": "1", "1.0": "1", "1e0": "1", "-0": "0", "0.5": "0.5", "100": "100", "1e21": "1e+21",
		"1e-7": "1e-7", "0.000001": "0.000001", "12345678901234567890": "12345678901234567000",
		"1.5e300": "1.5e+300",
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
