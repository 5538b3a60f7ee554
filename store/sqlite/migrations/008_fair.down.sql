DROP TABLE IF EXISTS pronto_tenant_cursors;
DROP INDEX IF EXISTS pronto_jobs_tenant;
