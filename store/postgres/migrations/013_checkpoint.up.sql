-- Job checkpoints (ojs-progress.md 6.4): the state a job's next attempt resumes from, saved with a
-- progress report and kept across runs (a new run's first report does not clear it).
ALTER TABLE progress ADD COLUMN checkpoint jsonb;
