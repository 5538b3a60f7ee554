-- Unique jobs, rate and concurrency limits, and workflows (store/features.go).

-- unique_states lists the states in which unique_key is held, as ',available,active,' so that the
-- unique index below can test membership with instr(), a deterministic built-in. NULL without a key.
ALTER TABLE pronto_jobs ADD COLUMN unique_states TEXT;
-- unique_until ends the key's hold (unix microseconds); NULL: no period. The index cannot test it
-- (its predicate may not read the clock): the insert that finds a holder whose period has passed
-- clears the holder's unique_key first.
ALTER TABLE pronto_jobs ADD COLUMN unique_until INTEGER;
-- run_on: 'success', 'failure' or 'complete' on a workflow callback, NULL on members and other jobs.
ALTER TABLE pronto_jobs ADD COLUMN run_on TEXT;
-- parent_results: JSON array of the parents' results, written when a workflow job is released.
ALTER TABLE pronto_jobs ADD COLUMN parent_results TEXT;
-- held is 1 on a claimable job that a claim found held back by its exhausted rate limit (on_limit
-- wait), and NULL otherwise. It is invisible outside the store: it moves the job from the claim index
-- to pronto_jobs_held, so later claims do not walk past it again; they take it from there, in claim
-- order, once its key has room.
ALTER TABLE pronto_jobs ADD COLUMN held INTEGER;

-- The claim index leaves held jobs out (see held above).
DROP INDEX pronto_jobs_claim;
CREATE INDEX pronto_jobs_claim ON pronto_jobs (queue, priority DESC, scheduled_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable') AND held IS NULL;

-- Held jobs per queue and key, in claim order.
CREATE INDEX pronto_jobs_held ON pronto_jobs (queue, rate_key, priority DESC, scheduled_at, id)
    WHERE held IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');

-- At most one job holds a key while it is in one of its unique states. Rows without a key fail the
-- predicate at its first term, so jobs that are not unique pay nothing more for it than that test.
CREATE UNIQUE INDEX pronto_jobs_unique ON pronto_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND instr(unique_states, ',' || state || ',') > 0;

-- Rate limits: a key's active jobs (MaxActive), its waiting jobs per queue (NextDue, wake-ups, limit
-- info), and holding its jobs (see held). Only rows with a rate key are in it.
CREATE INDEX pronto_jobs_rate ON pronto_jobs (rate_key, state, queue, scheduled_at)
    WHERE rate_key IS NOT NULL;

-- The distinct rate keys of a queue's claimable jobs, and whether it has any (the claim's guard: one
-- seek, whatever the number of stored limits).
CREATE INDEX pronto_jobs_rate_queue ON pronto_jobs (queue, rate_key)
    WHERE rate_key IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');

-- Workflows: a workflow's jobs (GetWorkflow, CancelWorkflow, ListJobs). Only workflow jobs are in it,
-- and neither its key nor its condition changes after insert.
CREATE INDEX pronto_jobs_workflow ON pronto_jobs (workflow_id)
    WHERE workflow_id IS NOT NULL;

CREATE TABLE pronto_rate_limits (
    key          TEXT    NOT NULL PRIMARY KEY,
    max_active   INTEGER NOT NULL DEFAULT 0,
    rate         INTEGER NOT NULL DEFAULT 0,
    period_us    INTEGER NOT NULL DEFAULT 0,
    -- As given: '' means wait.
    on_limit     TEXT    NOT NULL DEFAULT '' CHECK (on_limit IN ('', 'wait', 'reschedule', 'drop')),
    -- The current rate window: when it opened and how many jobs it started. NULL: none opened yet.
    window_start INTEGER,
    window_count INTEGER NOT NULL DEFAULT 0,
    updated_at   INTEGER NOT NULL
) STRICT;

CREATE TABLE pronto_workflows (
    id           TEXT    NOT NULL PRIMARY KEY,
    name         TEXT    NOT NULL DEFAULT '',
    type         TEXT    NOT NULL DEFAULT '',
    meta         TEXT,
    created_at   INTEGER NOT NULL,
    cancelled_at INTEGER
) STRICT;

-- The edges of workflow graphs, parent to child, so that a job reaching a terminal state finds its
-- children through the primary key. A job's own parent_ids keeps the order of its parents.
CREATE TABLE pronto_job_deps (
    parent_id TEXT NOT NULL,
    child_id  TEXT NOT NULL,
    PRIMARY KEY (parent_id, child_id)
) STRICT, WITHOUT ROWID;

-- A deleted workflow job can decide no child any more: its edges go with it. (Cleanup keeps a parent
-- while a child still waits for it; DeleteJob of a parent leaves its children waiting, as the
-- contract says.)
CREATE TRIGGER pronto_job_deps_cleanup AFTER DELETE ON pronto_jobs
    WHEN old.workflow_id IS NOT NULL
BEGIN
    DELETE FROM pronto_job_deps WHERE parent_id = old.id;
END;
