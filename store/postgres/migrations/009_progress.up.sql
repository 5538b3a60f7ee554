-- Job progress (ojs-progress.md): what the worker of a job's latest run reported. One row per job,
-- replaced by the next run's first report; it goes with its job. Kept apart from jobs so that the
-- frequent progress writes never rewrite (or lock against claims) the job rows themselves.
CREATE TABLE progress (
    job_id         uuid             PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    run_started_at timestamptz      NOT NULL,
    value          double precision,
    data           jsonb,
    updated_at     timestamptz      NOT NULL
);
