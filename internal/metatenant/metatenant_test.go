package metatenant

import (
	"encoding/json"
	"testing"
)

func TestMismatch(t *testing.T) {
	for _, c := range []struct {
		meta, tenant string
		want         bool
	}{
		{`{"tenant_id":"acme"}`, "acme", false},
		{`{"tenant_\u0069d":"beta"}`, "acme", true}, // an escaped key is the same key
		{`{"tenant_id":null}`, "", false},
		{`{"tenant_id":null}`, "acme", true},
		{`{"tenant_id":7}`, "acme", true},
		{`{"other":1}`, "acme", false},
		{`[1]`, "acme", false}, // not an object: not this rule's
		{``, "acme", false},
	} {
		var meta json.RawMessage
		if c.meta != "" {
			meta = json.RawMessage(c.meta)
		}
		if raw, got := Mismatch(meta, c.tenant); got != c.want || got && len(raw) == 0 {
			t.Errorf("Mismatch(%s, %q) = %s, %v; want %v", c.meta, c.tenant, raw, got, c.want)
		}
	}
}
