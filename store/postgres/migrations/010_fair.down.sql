DROP FUNCTION IF EXISTS claim_fair_pick(text, text[], integer);
DROP TABLE IF EXISTS tenant_cursors;
DROP INDEX IF EXISTS jobs_tenant_claim_idx;
