package pronto_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/stretchr/testify/require"
)

// TestCheckMetaSize: a meta is measured as compact JSON against the limit (DefaultMaxMetaBytes when
// none is given), and one over it is a *MetaTooLargeError that is also an ErrInvalidArgs.
func TestCheckMetaSize(t *testing.T) {
	at := `{"b":"` + strings.Repeat("x", pronto.DefaultMaxMetaBytes-len(`{"b":""}`)) + `"}`
	if err := pronto.CheckMetaSize([]byte(at), 0); err != nil {
		t.Errorf("a meta of exactly the default limit: %v", err)
	}
	if err := pronto.CheckMetaSize([]byte("{ \n"+at[1:]), 0); err != nil {
		t.Errorf("the same meta with white space added: %v", err)
	}
	err := pronto.CheckMetaSize([]byte(`{"b":"abcdef"}`), 10)
	var tl *pronto.MetaTooLargeError
	if !errors.As(err, &tl) || tl.Size != 14 || tl.Limit != 10 {
		t.Fatalf("a 14-byte meta against a limit of 10: %v, want a MetaTooLargeError{14, 10}", err)
	}
	if !errors.Is(err, pronto.ErrInvalidArgs) {
		t.Errorf("%v is not an ErrInvalidArgs", err)
	}
}

// TestValidMetaKey: meta keys are 1 to 128 of [a-zA-Z0-9_.-] (ojs-security.md §8.3).
func TestValidMetaKey(t *testing.T) {
	for _, k := range []string{"trace_id", "X-Request.Id", "ojs.replay_count", "_x", strings.Repeat("k", 128)} {
		if !pronto.ValidMetaKey(k) {
			t.Errorf("ValidMetaKey(%q) = false, want true", k)
		}
	}
	for _, k := range []string{"", strings.Repeat("k", 129), "a:b", "a/b", "a b", "X-Evil\r\nSet-Cookie", "é"} {
		if pronto.ValidMetaKey(k) {
			t.Errorf("ValidMetaKey(%q) = true, want false", k)
		}
	}
}

// TestInsertRefusesMetaOverLimit: the Go API holds meta to Config.MaxMetaBytes (64 KiB by default,
// the OJS limit) on every store, stores nothing it refuses, and takes a raised limit.
func TestInsertRefusesMetaOverLimit(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		big := map[string]any{"note": strings.Repeat("x", pronto.DefaultMaxMetaBytes)}
		c, err := pronto.NewClient(ts, &pronto.Config{})
		require.NoError(t, err)
		_, err = c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{Meta: big})
		var tl *pronto.MetaTooLargeError
		require.ErrorAs(t, err, &tl, "a meta over the default limit")
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		require.Equal(t, pronto.DefaultMaxMetaBytes, tl.Limit)
		list, err := c.JobList(ctx, &pronto.JobListParams{})
		require.NoError(t, err)
		require.Empty(t, list.Jobs, "a refused insert stores nothing")

		raised, err := pronto.NewClient(ts, &pronto.Config{MaxMetaBytes: 2 * pronto.DefaultMaxMetaBytes})
		require.NoError(t, err)
		row, err := raised.Insert(ctx, echoArgs{}, &pronto.InsertOpts{Meta: big})
		require.NoError(t, err, "the same meta under a raised limit")
		require.Contains(t, string(row.Meta), `"note":"xxx`)
	})
}
