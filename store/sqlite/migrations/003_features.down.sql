DROP TRIGGER IF EXISTS pronto_job_deps_cleanup;
DROP TABLE IF EXISTS pronto_job_deps;
DROP TABLE IF EXISTS pronto_workflows;
DROP TABLE IF EXISTS pronto_rate_limits;
DROP INDEX IF EXISTS pronto_jobs_workflow;
DROP INDEX IF EXISTS pronto_jobs_rate;
DROP INDEX IF EXISTS pronto_jobs_rate_queue;
DROP INDEX IF EXISTS pronto_jobs_unique;
DROP INDEX IF EXISTS pronto_jobs_held;
DROP INDEX IF EXISTS pronto_jobs_claim;
CREATE INDEX pronto_jobs_claim ON pronto_jobs (queue, priority DESC, scheduled_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');
ALTER TABLE pronto_jobs DROP COLUMN held;
ALTER TABLE pronto_jobs DROP COLUMN parent_results;
ALTER TABLE pronto_jobs DROP COLUMN run_on;
ALTER TABLE pronto_jobs DROP COLUMN unique_until;
ALTER TABLE pronto_jobs DROP COLUMN unique_states;
