-- Back to migration 009's index: a tenant's jobs by state, without id order.
DROP INDEX pronto_jobs_tenant_state;
CREATE INDEX pronto_jobs_tenant_state ON pronto_jobs (tenant, state) WHERE tenant IS NOT NULL;
