-- Durable cron schedules. The elected leader fires each due occurrence and advances next_run_at with
-- a guarded update (same registration id, same next_run_at), so no occurrence fires twice.
CREATE TABLE cron (
    name           text        PRIMARY KEY,
    id             text        NOT NULL,
    expression     text        NOT NULL,
    timezone       text        NOT NULL DEFAULT '',
    overlap_policy text        NOT NULL DEFAULT '',
    template       text        NOT NULL DEFAULT '', -- JSON, kept byte for byte
    description    text        NOT NULL DEFAULT '',
    enabled        boolean     NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL,
    next_run_at    timestamptz NOT NULL,
    last_run_at    timestamptz,
    run_count      bigint      NOT NULL DEFAULT 0,
    last_job_id    text
);

CREATE INDEX cron_due_idx ON cron (next_run_at) WHERE enabled;
