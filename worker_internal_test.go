package pronto

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

type decodeProbe struct {
	N int    `json:"n"`
	S string `json:"s"`
}

// decodeArgs decodes "[value]" straight into the args (its fast path) with the same outcome as
// through a one-element slice, and says what is wrong with anything else.
func TestDecodeArgs(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want decodeProbe
		err  string
	}{
		{raw: `[{"n":1,"s":"a"}]`, want: decodeProbe{N: 1, S: "a"}},
		{raw: ` [ {"n":2} ] `, want: decodeProbe{N: 2}},
		{raw: `[null]`},
		{raw: `[]`, err: "got 0 elements"},
		{raw: `[{"n":1},{"n":2}]`, err: "got 2 elements"},
		{raw: `[{"s":"x","n":"not a number"}]`, err: "args are not a JSON array of one"},
		{raw: `{"n":1}`, err: "args are not a JSON array of one"},
		{raw: `[{"n":1}`, err: "args are not a JSON array of one"},
	} {
		var got decodeProbe
		err := decodeArgs(json.RawMessage(tc.raw), &got)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.raw)
			continue
		}
		require.NoError(t, err, tc.raw)
		require.Equal(t, tc.want, got, tc.raw)
	}
}
