package postgres

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fullDecode decodes a payload with encoding/json only, as decodePayload does for every shape the
// fast path leaves to it.
func fullDecode(t *testing.T, s string) (payload, bool) {
	var p payload
	return p, json.Unmarshal([]byte(s), &p) == nil
}

// TestInsertPayloadFastPath: the insert payloads this store writes (from Go, with a nonce, and from
// SQL, without) decode without encoding/json to what encoding/json gives, and anything else is left
// to the full decode.
func TestInsertPayloadFastPath(t *testing.T) {
	due := time.UnixMilli(time.Now().Add(time.Minute).UnixMilli())
	for _, s := range []string{
		insertPayload("default", time.Time{}),
		insertPayload("q.with-dots", due),
		`{"k":"i","q":"from-sql","d":0}`,
		`{"k":"i","q":"from-sql","d":1790000000123}`,
	} {
		n, ok := decodeInsertPayload(s)
		require.True(t, ok, s)
		p, ok := fullDecode(t, s)
		require.True(t, ok, s)
		require.Equal(t, p.Q, n.Queue, s)
		require.Equal(t, p.N, n.Nonce, s)
		if p.D == 0 {
			require.True(t, n.DueAt.IsZero(), s)
		} else {
			require.Equal(t, p.D, n.DueAt.UnixMilli(), s)
		}
		full, ok := decodePayload(s)
		require.True(t, ok)
		require.Equal(t, n, full)
	}
	for _, s := range []string{
		`{"k":"c","id":"0190"}`,
		`{"k":"i","q":"esc\"aped","d":0}`,
		`{"k":"i","q":"a","d":0,"x":1}`,
		`{"k":"i","q":"a","n":99999999999,"d":0}`,
		`{"k":"i","q":"a","d":-1}`,
		`{"k":"i","q":"a","d":}`,
		`{"k":"i","q":"a"}`,
		`{"k":"i","q":"a","d":12a}`,
		`{"q":"a","k":"i","d":0}`,
		`{"k":"i","q":"unterminated`,
		``,
	} {
		_, ok := decodeInsertPayload(s)
		require.False(t, ok, "the fast path leaves %q to the full decode", s)
	}
	// Left to the full decode, other key orders still decode.
	n, ok := decodePayload(`{"q":"a","k":"i","d":0}`)
	require.True(t, ok)
	require.Equal(t, "a", n.Queue)
}

func BenchmarkDecodeInsertPayload(b *testing.B) {
	s := insertPayload("default", time.Time{})
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, ok := decodePayload(s); !ok {
				b.Fatal(s)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			var p payload
			if err := json.Unmarshal([]byte(s), &p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
