DROP INDEX pronto_jobs_discarded_idx;
