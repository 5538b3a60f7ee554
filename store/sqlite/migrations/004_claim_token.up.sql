-- claim_token: a random value each claim writes on the job it makes active. Outcomes and heartbeats
-- name it, so a run that lost its lease can never decide the job once it was claimed again, even by
-- the same worker under the same attempt number. Meaningful only while the job is active.
ALTER TABLE pronto_jobs ADD COLUMN claim_token TEXT;
