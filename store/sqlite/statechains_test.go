package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// allStates is every state the jobs table's CHECK allows.
var allStates = []store.State{store.StateScheduled, store.StateAvailable, store.StatePending, store.StateActive,
	store.StateCompleted, store.StateRetryable, store.StateCancelled, store.StateDiscarded}

// dumpJobs returns every column of every job, in id order, as text.
func dumpJobs(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.DB().Query(`SELECT * FROM pronto_jobs ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		out = append(out, fmt.Sprint(vals...))
	}
	require.NoError(t, rows.Err())
	return out
}

// jobsTableSQL returns the stored CREATE TABLE text of pronto_jobs.
func jobsTableSQL(t *testing.T, s *Store) string {
	t.Helper()
	var text string
	require.NoError(t, s.DB().QueryRow(
		`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'pronto_jobs'`).Scan(&text))
	return text
}

// TestStateChainsMigration carries a database written by migration 013's schema, with jobs in every
// state (plain ones and ones with every optional column), through migration 014 and back: the jobs
// are unchanged both ways, the CHECK still refuses an unknown state and accepts every known one, and
// after the migration claims take the due jobs in claimable states.
func TestStateChainsMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	require.NoError(t, s.MigrateDown(ctx, 1))
	before := jobsTableSQL(t, s)
	require.Contains(t, before, "CHECK (state IN (")

	now := time.Now().UnixMicro()
	for i, st := range allStates {
		for _, full := range []bool{false, true} {
			id := fmt.Sprintf("job-%d-%t", i, full)
			_, err := s.DB().Exec(`INSERT INTO pronto_jobs (id, kind, queue, args, priority, state, attempt,
				max_attempts, created_at, scheduled_at) VALUES (?, 'k', 'q', '[1]', ?, ?, 1, 3, ?, ?)`,
				id, i, string(st), now, now-int64(i))
			require.NoError(t, err)
			if full {
				_, err := s.DB().Exec(`UPDATE pronto_jobs SET meta = '{"m":1}', errors = '[{"attempt":1}]',
					result = '{"r":1}', tags = '["t"]', retry_policy = '{}', timeout_ms = 5, started_at = ?1,
					completed_at = ?1, expires_at = ?1 + 1000000000, lease_expires_at = ?1, worker_id = 'w',
					unique_key = 'u' || id, unique_states = ',scheduled,', unique_until = ?1,
					tenant = 'ten', rate_key = 'rk', workflow_id = 'wf', parent_ids = '[]', run_on = 'success',
					parent_results = '{}', claim_token = 'tok' WHERE id = ?2`, now, id)
				require.NoError(t, err)
			}
		}
	}
	jobs := dumpJobs(t, s)
	require.Len(t, jobs, 2*len(allStates))

	// A connection of another process, open across the migration.
	other, err := sql.Open("sqlite", s.Path())
	require.NoError(t, err)
	defer other.Close()
	other.SetMaxOpenConns(1)
	const probe = `EXPLAIN UPDATE pronto_jobs SET state = 'completed' WHERE id = 'x'`
	ephemerals := func(db *sql.DB) int {
		// EXPLAIN reads no table, so it does not notice a changed schema; a query does, and the
		// connection reloads the schema before it runs.
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pronto_jobs`).Scan(&n))
		rows, err := db.Query(probe)
		require.NoError(t, err)
		defer rows.Close()
		cols, err := rows.Columns()
		require.NoError(t, err)
		n = 0
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			if fmt.Sprint(vals[1]) == "OpenEphemeral" {
				n++
			}
		}
		require.NoError(t, rows.Err())
		return n
	}
	old := ephemerals(other)

	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, jobs, dumpJobs(t, s))
	// Three lists fewer in an UPDATE's program (the CHECK, the claim index for the old and the new
	// row), on the migrating connection and on the other one alike.
	require.Equal(t, old-3, ephemerals(s.DB()))
	require.Equal(t, old-3, ephemerals(other))
	after := jobsTableSQL(t, s)
	require.NotContains(t, after, "CHECK (state IN (")
	require.Contains(t, after, "CHECK (state = 'scheduled' OR ")
	var ok string
	require.NoError(t, s.DB().QueryRow(`PRAGMA integrity_check`).Scan(&ok))
	require.Equal(t, "ok", ok)
	_, err = s.DB().Exec(`UPDATE pronto_jobs SET state = 'bogus' WHERE id = 'job-0-false'`)
	require.ErrorContains(t, err, "CHECK constraint failed")
	for _, st := range allStates {
		_, err := s.DB().Exec(`UPDATE pronto_jobs SET state = ? WHERE id = 'job-0-false'`, string(st))
		require.NoError(t, err, st)
	}
	_, err = s.DB().Exec(`UPDATE pronto_jobs SET state = 'scheduled' WHERE id = 'job-0-false'`)
	require.NoError(t, err)

	require.NoError(t, s.CheckSchema(ctx))

	require.NoError(t, s.MigrateDown(ctx, 1))
	require.Equal(t, jobs, dumpJobs(t, s))
	require.Equal(t, before, jobsTableSQL(t, s))
	require.NoError(t, s.DB().QueryRow(`PRAGMA integrity_check`).Scan(&ok))
	require.Equal(t, "ok", ok)
	_, err = s.DB().Exec(`UPDATE pronto_jobs SET state = 'bogus' WHERE id = 'job-0-false'`)
	require.ErrorContains(t, err, "CHECK constraint failed")

	// Up again: claims take the jobs in claimable states, due ones, plain and limited.
	require.NoError(t, s.Migrate(ctx))
	got, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 20, WorkerID: "w2", LeaseDuration: time.Minute})
	require.NoError(t, err)
	var claimed []string
	for _, j := range got {
		claimed = append(claimed, j.ID)
	}
	require.ElementsMatch(t, []string{"job-0-false", "job-0-true", "job-1-false", "job-1-true", "job-5-false", "job-5-true"}, claimed)
}

// TestClaimIndexPlans checks that every statement meant to walk pronto_jobs_claim still can: SQLite
// uses a partial index only for a query repeating its condition's terms, which migration 014 spelled
// differently.
func TestClaimIndexPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	plan := func(q string, args ...any) string {
		rows, err := s.DB().QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		require.NoError(t, err)
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			lines = append(lines, detail)
		}
		require.NoError(t, rows.Err())
		return strings.Join(lines, "\n")
	}
	for _, n := range []int{0, 2} {
		kinds := make([]any, n)
		for i := range kinds {
			kinds[i] = "k"
		}
		text := plan(claimQuery(n), append([]any{1, 2, "w", "q", 10}, kinds...)...)
		require.Contains(t, text, "USING INDEX pronto_jobs_claim (queue=?)", text)
		text = plan(claimCandidatesSQL(n), append([]any{1, 10, "[]", "q", nil, nil, nil, "[]"}, kinds...)...)
		require.Contains(t, text, "USING INDEX pronto_jobs_claim (queue=?)", text)
		text = plan(newFairSQL(n).untenanted, append([]any{1, "q", nil}, append(kinds, 10)...)...)
		require.Contains(t, text, "USING INDEX pronto_jobs_claim (queue=?)", text)
	}
}
