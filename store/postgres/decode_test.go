package postgres

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJobDecoderMatchesScan decodes rows of jobCols' types that no job of the store's own making
// has (NULL and empty arrays, NULL array elements, infinite and ancient timestamps, a NULL kind) and
// checks each against pgx's Scan of the same row: equal where the decoder takes the row, and
// handed back to Scan where it does not.
func TestJobDecoderMatchesScan(t *testing.T) {
	t.Parallel()
	s := setup(t)
	const row = `SELECT '0190a3c1-0000-7000-8000-000000000001'::uuid, %s::text, 'q'::text, '{"a":[1,2]}'::jsonb,
		%s::jsonb, 7, 'active'::text, 1, 3, '[]'::jsonb, NULL::jsonb, %s::text[], NULL::jsonb, 0::bigint,
		%s::timestamptz, now(), now(), NULL::timestamptz, NULL::timestamptz, now(), 'w'::text, NULL::text,
		't'::text, NULL::text, NULL::text, %s::uuid[], %s::text[], NULL::timestamptz, NULL::text,
		NULL::jsonb, gen_random_uuid()`
	cases := []struct {
		name                                        string
		kind, meta, tags, created, parents, uniques string
		direct                                      bool
	}{
		{"plain", `'k'`, `NULL`, `'{}'`, `now()`, `NULL`, `NULL`, true},
		{"arrays", `'k'`, `'"x"'`, `'{a,"b c",""}'`, `'2001-02-03 04:05:06.789012+00'`,
			`'{0190a3c1-0000-7000-8000-000000000002,0190a3c1-0000-7000-8000-000000000003}'`, `'{available}'`, true},
		{"empty arrays", `''`, `'{}'`, `'{}'`, `'1970-01-01 00:00:00+00'`, `'{}'`, `'{}'`, true},
		{"null kind", `NULL`, `'null'`, `'{x}'`, `'1999-12-31 23:59:59.999999+00'`, `NULL`, `'{}'`, true},
		{"null parent", `'k'`, `NULL`, `'{}'`, `now()`, `'{NULL,0190a3c1-0000-7000-8000-000000000002}'`, `NULL`, true},
		{"infinity", `'k'`, `NULL`, `'{}'`, `'infinity'`, `NULL`, `NULL`, false},
		{"ancient", `'k'`, `NULL`, `'{}'`, `'0100-01-01 00:00:00+00 BC'`, `NULL`, `NULL`, false},
		{"two dimensions", `'k'`, `NULL`, `'{{a},{b}}'`, `now()`, `NULL`, `NULL`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := fmt.Sprintf(row, c.kind, c.meta, c.tags, c.created, c.parents, c.uniques)
			rows, err := s.pool.Query(t.Context(), q)
			require.NoError(t, err)
			defer rows.Close()
			require.True(t, rows.Next())
			dec, ok := newJobDecoder(rows)
			require.True(t, ok)
			var decoded, scanned jobRow
			derr := dec.decode(rows.RawValues(), &decoded)
			serr := rows.Scan(scanned.dest()...)
			if !c.direct {
				require.Error(t, derr)
				return
			}
			require.NoError(t, derr)
			require.NoError(t, serr)
			require.Equal(t, scanned, decoded)
		})
	}
}
