-- Job checkpoints (ojs-progress.md 6.4): the state a job's next attempt resumes from, saved with a
-- progress report and kept across runs (a new run's first report does not clear it).
ALTER TABLE progress ADD COLUMN checkpoint jsonb;

-- OJS worker records (ojs-admin-api.md 9): workers fetching over HTTP, as the servers last saw them,
-- and the directive (quiet, terminate) their next heartbeat answers.
CREATE TABLE workers (
    id            text        PRIMARY KEY,
    queues        text[]      NOT NULL DEFAULT '{}',
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    directive     text        NOT NULL DEFAULT '',
    directive_at  timestamptz
);

-- Cluster-wide settings (maintenance mode, ojs-admin-api.md 12.1): a JSON value per key.
CREATE TABLE settings (
    key        text        PRIMARY KEY,
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL
);
