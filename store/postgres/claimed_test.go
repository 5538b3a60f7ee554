package postgres

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// claimOne claims the one claimable job of queue q and checks that it is, field by field, the job
// GetJob reads right after: the claim decodes its rows from the wire (jobDecoder), GetJob scans
// them through pgx.
func claimOne(t *testing.T, s *Store, q string) *store.Job {
	t.Helper()
	jobs, err := s.Claim(t.Context(), store.ClaimParams{Queue: q, Limit: 10, WorkerID: "w-1", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	got, err := s.GetJob(t.Context(), jobs[0].ID)
	require.NoError(t, err)
	require.Equal(t, got, jobs[0])
	return jobs[0]
}

// claimOneAfter inserts p and claims it (see claimOne).
func claimOneAfter(t *testing.T, s *Store, q string, p *store.InsertParams) *store.Job {
	t.Helper()
	_, err := s.Insert(t.Context(), []*store.InsertParams{p})
	require.NoError(t, err)
	return claimOne(t, s, q)
}

// TestClaimedJobIsStoredJob: a claimed job carries every field as stored, for a plain job and for
// jobs with every optional field set: meta, tags, retry policy, expiry, unique key, states and
// period, an error history from an earlier attempt, and a workflow child's parents, parent results
// and run condition.
func TestClaimedJobIsStoredJob(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()

	plain := claimOneAfter(t, s, "plain", &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "plain",
		Args: json.RawMessage(`{"x":1}`), State: store.StateAvailable, MaxAttempts: 3})
	require.Nil(t, plain.Meta)
	require.Empty(t, plain.Tags)

	full := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "full", Args: json.RawMessage(`[1,"two"]`),
		Meta: json.RawMessage(`{"trace":"a\"b\\c","n":2}`), Priority: 3, State: store.StateAvailable,
		MaxAttempts: 2, RetryPolicy: json.RawMessage(`{"max_attempts":2}`), Timeout: 1500 * time.Millisecond,
		Tags: []string{"red", "blue, green", ""}, ExpiresAt: time.Now().Add(time.Hour),
		UniqueKey: "u-1", UniqueStates: []store.State{store.StateAvailable, store.StateActive, store.StateRetryable},
		UniqueUntil: time.Now().Add(time.Hour), Tenant: "", RateKey: ""}
	first := claimOneAfter(t, s, "full", full)
	require.JSONEq(t, string(full.Meta), string(first.Meta))
	require.Equal(t, full.Tags, first.Tags)
	require.Equal(t, "u-1", first.UniqueKey)
	require.Equal(t, 1500*time.Millisecond, first.Timeout)

	// A failed attempt leaves an error history; retried at once, the next claim carries it.
	res, err := s.Finish(ctx, []store.Completion{{ID: first.ID, Attempt: 1, Token: first.ClaimToken, State: store.StateRetryable,
		ScheduledAt: time.Now().Add(-time.Millisecond), Error: &store.AttemptError{Attempt: 1, Type: "boom", Message: "it \"failed\""}}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	second := claimOne(t, s, "full")
	require.Equal(t, 2, second.Attempt)
	require.Len(t, second.Errors, 1)
	require.Equal(t, "boom", second.Errors[0].Type)

	// A workflow child, released by its parent's completion, carries its parents and their results.
	wf := uuidv7.New()
	parent := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "wf", Args: json.RawMessage(`[]`),
		State: store.StateAvailable, MaxAttempts: 1, WorkflowID: wf}
	child := &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "wf", Args: json.RawMessage(`[]`),
		State: store.StatePending, MaxAttempts: 1, ParentIDs: []string{parent.ID}, RunOn: store.RunOnSuccess, WorkflowID: wf}
	_, _, err = s.InsertWorkflow(ctx, store.WorkflowParams{ID: wf, Type: "chain", Jobs: []*store.InsertParams{parent, child}})
	require.NoError(t, err)
	p := claimOne(t, s, "wf")
	require.Equal(t, parent.ID, p.ID)
	res, err = s.Finish(ctx, []store.Completion{{ID: p.ID, Attempt: 1, Token: p.ClaimToken, State: store.StateCompleted,
		Result: json.RawMessage(`{"ok":true}`)}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	c := claimOne(t, s, "wf")
	require.Equal(t, child.ID, c.ID)
	require.Equal(t, []string{parent.ID}, c.ParentIDs)
	require.NotEmpty(t, c.ParentResults)
	require.NotEmpty(t, c.WorkflowID)
	require.Equal(t, store.RunOnSuccess, c.RunOn)
}

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
