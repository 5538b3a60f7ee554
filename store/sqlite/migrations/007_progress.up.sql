-- Job progress (ojs-progress.md): what the worker of a job's latest run reported. One row per job,
-- replaced by the next run's first report; it goes with its job.
CREATE TABLE pronto_progress (
    job_id         TEXT    NOT NULL PRIMARY KEY REFERENCES pronto_jobs (id) ON DELETE CASCADE,
    run_started_at INTEGER NOT NULL,
    value          REAL,
    data           TEXT,
    updated_at     INTEGER NOT NULL
);
