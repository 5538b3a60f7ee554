-- A tenant's job listing (ListParams.Tenant, GET /ojs/v1/admin/tenants/{id}/jobs): a tenant's jobs
-- by state in id order. jobs_tenant_state_idx gains id as its last key column, so one range read
-- per state gives a page of the tenant's jobs after a cursor without reading its other jobs (nor
-- anything of other tenants). It serves its old uses as before (a tenant's jobs per state, its active
-- jobs for its limit), and adds no entry: only each entry's id. Rebuilt under its own name, which
-- the fair claim's comments refer to.
DROP INDEX {schema}.jobs_tenant_state_idx;
CREATE INDEX jobs_tenant_state_idx ON {schema}.jobs (tenant, state, id) WHERE tenant IS NOT NULL;
