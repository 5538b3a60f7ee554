-- A tenant's job listing (ListParams.Tenant): a tenant's jobs by state in id order.
-- pronto_jobs_tenant_state gains id as its last column (a rowid table's index ends with the rowid,
-- which is insertion order, not id order), so one range read per state gives a page of the tenant's
-- jobs after a cursor. It serves its old uses as before; rebuilt under its own name, which the tenant
-- statements name (INDEXED BY).
DROP INDEX pronto_jobs_tenant_state;
CREATE INDEX pronto_jobs_tenant_state ON pronto_jobs (tenant, state, id) WHERE tenant IS NOT NULL;
