-- pronto's SQLite schema. Times are INTEGER unix microseconds (UTC); JSON values are TEXT.
CREATE TABLE pronto_jobs (
    id               TEXT    NOT NULL PRIMARY KEY,
    kind             TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    args             TEXT    NOT NULL DEFAULT '[]',
    meta             TEXT,
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL CHECK (state IN ('scheduled', 'available', 'pending', 'active',
                                                       'completed', 'retryable', 'cancelled', 'discarded')),
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 0,
    errors           TEXT,    -- JSON array of AttemptError, NULL when empty
    result           TEXT,
    tags             TEXT,    -- JSON array of strings, NULL when empty
    retry_policy     TEXT,
    timeout_ms       INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    scheduled_at     INTEGER NOT NULL,
    started_at       INTEGER,
    completed_at     INTEGER,
    expires_at       INTEGER,
    lease_expires_at INTEGER,
    worker_id        TEXT,
    unique_key       TEXT,
    tenant           TEXT,
    rate_key         TEXT,
    workflow_id      TEXT,
    parent_ids       TEXT     -- JSON array of job ids, NULL when none
) STRICT;

-- Indexes are few on purpose: every index whose key or condition mentions state costs each claim and
-- each completion. Cleanup has none: it walks the table in rowid (insertion) order on a reader.

-- Claims: the claimable jobs of a queue in claim order.
CREATE INDEX pronto_jobs_claim ON pronto_jobs (queue, priority DESC, scheduled_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');

-- Rescue: active jobs by lease expiry.
CREATE INDEX pronto_jobs_lease ON pronto_jobs (lease_expires_at)
    WHERE state = 'active';

-- Promote and NextDue: jobs waiting for their due time.
CREATE INDEX pronto_jobs_due ON pronto_jobs (queue, scheduled_at)
    WHERE state IN ('scheduled', 'retryable');

-- DiscardExpired: jobs not yet started that carry an expiry.
CREATE INDEX pronto_jobs_expiry ON pronto_jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('available', 'scheduled', 'retryable', 'pending');

CREATE TABLE pronto_queues (
    name       TEXT    NOT NULL PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL
) STRICT;

CREATE TABLE pronto_leaders (
    name       TEXT    NOT NULL PRIMARY KEY,
    leader_id  TEXT    NOT NULL,
    elected_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
