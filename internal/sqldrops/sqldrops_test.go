package sqldrops

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	got := Parse(`
-- comment: DROP TABLE nope;
DROP TRIGGER IF EXISTS t ON jobs;
DROP TABLE IF EXISTS workflows;
drop table "Rate_Limits", x.other;
DROP INDEX IF EXISTS jobs_unique_idx;
ALTER TABLE jobs
    DROP COLUMN IF EXISTS parent_results,
    DROP COLUMN run_on,
    DROP CONSTRAINT jobs_ck,
    ADD COLUMN kept int;
ALTER TABLE pronto_jobs DROP held;
ALTER TABLE other DROP COLUMN gone_with_table;
CREATE INDEX i ON jobs (id);
`)
	require.Equal(t, []Drop{
		{Table: "workflows"},
		{Table: "rate_limits"},
		{Table: "other"},
		{Table: "jobs", Column: "parent_results"},
		{Table: "jobs", Column: "run_on"},
		{Table: "pronto_jobs", Column: "held"},
	}, got)
	require.Empty(t, Parse("DROP INDEX a; DROP FUNCTION f(); CREATE TABLE t (a int)"))
}

func TestRemoved(t *testing.T) {
	before, after := Columns{}, Columns{}
	for _, tc := range [][2]string{{"jobs", "id"}, {"jobs", "held"}, {"gone", "a"}} {
		before.Add(tc[0], tc[1])
	}
	after.Add("jobs", "id")
	require.ElementsMatch(t, []Drop{{Table: "gone"}, {Table: "jobs", Column: "held"}}, Removed(before, after))
	require.Empty(t, Removed(after, after))
}

func TestPlan(t *testing.T) {
	downs := []string{
		"DROP TABLE jobs; DROP TABLE leader;",
		"ALTER TABLE jobs DROP COLUMN tags; DROP TABLE limits;",
		"ALTER TABLE jobs DROP COLUMN missing_from_catalog;",
		"ALTER TABLE jobs DROP COLUMN held;",
	}
	cols := Columns{}
	for _, c := range [][2]string{{"jobs", "id"}, {"jobs", "tags"}, {"jobs", "held"}, {"limits", "n"}, {"leader", "id"}} {
		cols.Add(c[0], c[1])
	}
	all := []bool{true, true, true, true}
	require.Equal(t, []Loss{{3, Drop{"jobs", "held"}}}, Plan(downs, all, 1, cols, "leader"),
		"one step reverts the newest migration only")
	require.Equal(t, []Loss{{3, Drop{"jobs", "held"}}, {1, Drop{"jobs", "tags"}}, {1, Drop{Table: "limits"}}},
		Plan(downs, all, 3, cols, "leader"), "a column absent from the catalog is not listed")
	require.Equal(t, []Loss{{1, Drop{Table: "limits"}}, {0, Drop{Table: "jobs"}}},
		Plan(downs, []bool{true, true, false, false}, 9, cols, "leader"),
		"unapplied migrations are passed over; columns of a dropped table count with it; the skipped table is not data")
	require.Equal(t, []Loss{{1, Drop{"jobs", "tags"}}, {1, Drop{Table: "limits"}}},
		Plan(downs, all, 3, cols, "leader", "jobs.held"), "a skipped column is not data; its table's other columns are")
	require.Equal(t, []Loss{{0, Drop{Table: "jobs"}}}, Plan(downs, all, 9, cols, "leader", "jobs.held", "limits"),
		"a skipped column's table dropped whole is still data")
}
