ALTER TABLE pronto_jobs DROP COLUMN claim_token;
