DROP INDEX IF EXISTS pronto_jobs_tenant_state;
ALTER TABLE pronto_tenant_cursors DROP COLUMN used;
DROP TABLE IF EXISTS pronto_tenants;
