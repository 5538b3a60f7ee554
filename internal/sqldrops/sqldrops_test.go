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
