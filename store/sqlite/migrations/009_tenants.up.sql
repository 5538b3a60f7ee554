-- Tenants (docs/fair-scheduling.md): a tenant's weight, its turns per round of a queue's rotation (a
-- tenant without a row weighs 1).
CREATE TABLE pronto_tenants (
    tenant     TEXT    NOT NULL PRIMARY KEY,
    weight     INTEGER NOT NULL CHECK (weight BETWEEN 1 AND 1000),
    updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- How many jobs the cursor's participant has taken in its current turn (a tenant of weight w takes
-- up to w).
ALTER TABLE pronto_tenant_cursors ADD COLUMN used INTEGER NOT NULL DEFAULT 0;

-- A tenant's jobs by state, across queues: its stats, and its active jobs for its limit. Only jobs
-- with a tenant enter it.
CREATE INDEX pronto_jobs_tenant_state ON pronto_jobs (tenant, state) WHERE tenant IS NOT NULL;
