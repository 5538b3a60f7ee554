-- Back to migration 011's index: a tenant's jobs by state, without id order.
DROP INDEX {schema}.jobs_tenant_state_idx;
CREATE INDEX jobs_tenant_state_idx ON {schema}.jobs (tenant, state) WHERE tenant IS NOT NULL;
