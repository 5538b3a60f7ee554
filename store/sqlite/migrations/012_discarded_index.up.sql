-- The dead letter queue's retention (store.DiscardedPruner): discarded jobs by completion time, so
-- that pruning by age and by count (the newest N kept) reads this index instead of the table. Only
-- discarded rows enter it: completions and claims never touch it.
CREATE INDEX pronto_jobs_discarded_idx ON pronto_jobs (completed_at) WHERE state = 'discarded';
