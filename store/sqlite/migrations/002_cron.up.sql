-- Durable cron schedules. The elected leader fires each due occurrence and advances next_run_at with
-- a guarded update (same registration id, same next_run_at), so no occurrence fires twice.
CREATE TABLE pronto_cron (
    name           TEXT    NOT NULL PRIMARY KEY,
    id             TEXT    NOT NULL,
    expression     TEXT    NOT NULL,
    timezone       TEXT    NOT NULL DEFAULT '',
    overlap_policy TEXT    NOT NULL DEFAULT '',
    template       TEXT    NOT NULL,
    description    TEXT    NOT NULL DEFAULT '',
    enabled        INTEGER NOT NULL DEFAULT 1,
    created_at     INTEGER NOT NULL,
    next_run_at    INTEGER NOT NULL,
    last_run_at    INTEGER,
    run_count      INTEGER NOT NULL DEFAULT 0,
    last_job_id    TEXT
) STRICT;

CREATE INDEX pronto_cron_due ON pronto_cron (next_run_at) WHERE enabled = 1;
