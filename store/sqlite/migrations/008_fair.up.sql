-- Fair scheduling across tenants (ojs-fair-scheduling.md): the claimable jobs with a tenant and
-- without a rate key, per queue and tenant in claim order. Jobs without a tenant are not in it, so a
-- deployment without tenants pays nothing for it but the claim's guard (one seek of an empty index).
CREATE INDEX pronto_jobs_tenant ON pronto_jobs (queue, tenant, priority DESC, scheduled_at, id)
    WHERE tenant IS NOT NULL AND rate_key IS NULL AND held IS NULL
        AND state IN ('available', 'scheduled', 'retryable');

-- Each queue's place in its rotation over tenants: the participant served last (a tenant, or NULL for
-- the jobs without a tenant).
CREATE TABLE pronto_tenant_cursors (
    queue  TEXT PRIMARY KEY,
    tenant TEXT
) WITHOUT ROWID;
