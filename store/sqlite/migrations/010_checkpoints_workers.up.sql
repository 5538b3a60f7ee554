-- Job checkpoints (ojs-progress.md 6.4): the state a job's next attempt resumes from, saved with a
-- progress report and kept across runs (a new run's first report does not clear it).
ALTER TABLE pronto_progress ADD COLUMN checkpoint TEXT;

-- OJS worker records (ojs-admin-api.md 9): workers fetching over HTTP, as the servers last saw them,
-- and the directive (quiet, terminate) their next heartbeat answers. queues: a JSON array.
CREATE TABLE pronto_workers (
    id            TEXT    NOT NULL PRIMARY KEY,
    queues        TEXT    NOT NULL DEFAULT '[]',
    first_seen_at INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL,
    directive     TEXT    NOT NULL DEFAULT '',
    directive_at  INTEGER
);

-- Cluster-wide settings (maintenance mode, ojs-admin-api.md 12.1): a JSON value per key.
CREATE TABLE pronto_settings (
    key        TEXT    NOT NULL PRIMARY KEY,
    value      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
);
