-- The jobs table: one row per job, the OJS job model plus pronto's bookkeeping.
-- Runs with search_path set to the store's schema.
CREATE TABLE jobs (
    id               uuid        PRIMARY KEY,
    kind             text        NOT NULL,
    queue            text        NOT NULL,
    priority         integer     NOT NULL DEFAULT 0,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 1,
    timeout_ms       bigint      NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    scheduled_at     timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    expires_at       timestamptz,
    lease_expires_at timestamptz,
    state            text        NOT NULL DEFAULT 'available'
        CONSTRAINT jobs_state_check CHECK (state IN ('scheduled', 'available', 'pending', 'active',
                                                     'completed', 'retryable', 'cancelled', 'discarded')),
    args             jsonb       NOT NULL DEFAULT '[]',
    meta             jsonb,
    errors           jsonb       NOT NULL DEFAULT '[]',
    result           jsonb,
    tags             text[]      NOT NULL DEFAULT '{}',
    retry_policy     jsonb,
    worker_id        text,
    -- Roadmap: stored and returned, not yet interpreted by every feature.
    unique_key       text,
    tenant           text,
    rate_key         text,
    workflow_id      text,
    parent_ids       uuid[]
) WITH (
    -- Room on each page for the next version of a row, so the two updates of a job's life (claim,
    -- finish) mostly stay on its page.
    fillfactor = 85,
    -- Every job leaves two dead versions behind. Vacuum and analyze after 5% of the table changed
    -- rather than 20%, so dead entries do not pile up at the head of the claim index and the
    -- planner's statistics follow a backlog that comes and goes.
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);

-- Claims: the claimable rows of a queue in claim order. Partial, so active and finished jobs (the
-- bulk of the table) cost it nothing. Its keys end with the id, so they are all distinct and
-- deduplication could only cost a useless pass before each page split.
CREATE INDEX jobs_claim_idx ON jobs (queue, priority DESC, scheduled_at, id)
    WITH (deduplicate_items = off)
    WHERE state IN ('available', 'scheduled', 'retryable');

-- Jobs due later, for Promote and NextDue; immediate jobs never enter it.
CREATE INDEX jobs_due_idx ON jobs (queue, scheduled_at)
    WHERE state IN ('scheduled', 'retryable');

-- Rescue of expired leases. Only active jobs hold a lease (every transition out of active clears
-- it). The predicate is deliberately not state = 'active': with it, the planner is tempted to resolve
-- Finish's "state = 'active'" through this index (a scan of every active job) instead of looking the
-- batch's ids up in the primary key.
CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;

-- Retention cleanup of terminal jobs.
CREATE INDEX jobs_finalized_idx ON jobs (state, completed_at)
    WHERE state IN ('completed', 'cancelled', 'discarded');

-- Expiry of jobs not yet started; only jobs with a deadline enter it.
CREATE INDEX jobs_expires_idx ON jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('scheduled', 'available', 'pending', 'retryable');
