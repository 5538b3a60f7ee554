DROP TRIGGER IF EXISTS jobs_workflow_advance ON jobs;
DROP FUNCTION IF EXISTS workflow_advance();
DROP FUNCTION IF EXISTS claim_limited(text, text[], integer, bigint, text);
DROP FUNCTION IF EXISTS unique_key_taken(uuid, text, uuid[], text[], text);
DROP TABLE IF EXISTS workflows;
DROP TABLE IF EXISTS rate_limits;
DROP INDEX IF EXISTS jobs_children_idx;
DROP INDEX IF EXISTS jobs_workflow_idx;
DROP INDEX IF EXISTS jobs_rate_active_idx;
DROP INDEX IF EXISTS jobs_rate_claim_idx;
DROP INDEX IF EXISTS jobs_unique_idx;
ALTER TABLE jobs
    DROP COLUMN IF EXISTS parent_results,
    DROP COLUMN IF EXISTS run_on,
    DROP COLUMN IF EXISTS unique_until,
    DROP COLUMN IF EXISTS unique_states;
