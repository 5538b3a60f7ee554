package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// testSchemaRegistry: schemas are created, read back byte for byte, listed oldest first, refused
// twice under one URI, and deleted.
func testSchemaRegistry(t *testing.T, s store.Store) {
	ss, ok := s.(store.SchemaStore)
	if !ok {
		t.Fatalf("storetest: %T does not implement store.SchemaStore", s)
	}
	c := ctx(t)
	base := time.Now().UTC().Truncate(time.Millisecond)
	u1, u2 := "urn:"+uniq("schema"), "urn:"+uniq("schema")
	first := &store.JobSchema{URI: u1, Kind: "email.send", Version: `1`,
		Schema: json.RawMessage(`{"type":"array","prefixItems":[{"type":"string"}]}`), CreatedAt: base}
	second := &store.JobSchema{URI: u2, Kind: "email.send", Version: `"2.0.0"`,
		Schema: json.RawMessage(`{"type": "array"}`), CreatedAt: base.Add(time.Second)}
	require.NoError(t, ss.SchemaCreate(c, second))
	require.NoError(t, ss.SchemaCreate(c, first))
	require.ErrorIs(t, ss.SchemaCreate(c, first), store.ErrDuplicate)

	got, err := ss.SchemaGet(c, u2)
	require.NoError(t, err)
	require.Equal(t, second.Kind, got.Kind)
	require.Equal(t, second.Version, got.Version)
	require.Equal(t, string(second.Schema), string(got.Schema), "the document is kept byte for byte")
	require.WithinDuration(t, second.CreatedAt, got.CreatedAt, precision)

	list, err := ss.SchemaList(c)
	require.NoError(t, err)
	var mine []string
	for _, js := range list {
		if js.URI == u1 || js.URI == u2 {
			mine = append(mine, js.URI)
		}
	}
	require.Equal(t, []string{u1, u2}, mine, "oldest first")

	gone, err := ss.SchemaDelete(c, u1)
	require.NoError(t, err)
	require.Equal(t, u1, gone.URI)
	_, err = ss.SchemaGet(c, u1)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = ss.SchemaDelete(c, u1)
	require.ErrorIs(t, err, store.ErrNotFound)
}
