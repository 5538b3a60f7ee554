-- Fair scheduling across tenants (ojs-fair-scheduling.md). The claimable jobs with a tenant and
-- without a rate key, in claim order per queue and tenant. Empty in a deployment without tenants, so
-- the claim's probe of it costs one page, and inserts of jobs without a tenant never touch it.
CREATE INDEX jobs_tenant_claim_idx ON {schema}.jobs (queue, tenant, priority DESC, scheduled_at, id)
    WITH (deduplicate_items = off)
    WHERE tenant IS NOT NULL AND rate_key IS NULL AND state IN ('available', 'scheduled', 'retryable');

-- Each queue's place in its rotation over tenants: the participant served last (a tenant, or NULL
-- for the jobs without a tenant). A fair claim locks its queue's row, so concurrent claims of one
-- queue take turns in the rotation rather than both serving the same tenant.
CREATE TABLE {schema}.tenant_cursors (
    queue  text PRIMARY KEY,
    tenant text
);

-- claim_fair_pick picks, and locks, up to p_limit claimable jobs of queue p_queue (kinds p_kinds,
-- NULL for any) in turns: each tenant with claimable jobs in tenant order starting after the
-- queue's cursor, then the jobs without a tenant, then round again; each turn takes the tenant's
-- first job in claim order (priority, due time, id). It stops at p_limit jobs or after a whole
-- round that found nothing, and moves the cursor to the participant served last. Each step is an
-- index probe (jobs_tenant_claim_idx for the next tenant and its best job), so a claim costs in
-- proportion to the jobs it takes, not to the number of tenants. Jobs with a rate key are left to
-- claim_limited. The jobs without a tenant are looked for among the first 64 claimable jobs of
-- the queue in plain claim order only: finding them beyond that would mean reading every tenant's
-- backlog (no index holds them apart without costing every insert of a queue without tenants).
CREATE FUNCTION {schema}.claim_fair_pick(p_queue text, p_kinds text[], p_limit integer)
RETURNS SETOF uuid
LANGUAGE plpgsql AS $$
DECLARE
    chosen   uuid[] := '{}';
    cur      text;
    nxt      text;
    jid      uuid;
    found_in boolean := false; -- something was taken since the last turn of the jobs without a tenant
    idle     integer := 0;      -- rounds in a row that took nothing
BEGIN
    IF p_limit <= 0 OR EXISTS (SELECT 1 FROM {schema}.queues WHERE name = p_queue AND paused) THEN
        RETURN;
    END IF;
    INSERT INTO {schema}.tenant_cursors AS c (queue) VALUES (p_queue)
    ON CONFLICT (queue) DO UPDATE SET queue = c.queue
    RETURNING c.tenant INTO cur;

    WHILE cardinality(chosen) < p_limit AND idle < 2 LOOP
        SELECT j.tenant INTO nxt FROM {schema}.jobs j
        WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
            AND j.state IN ('available', 'scheduled', 'retryable')
            AND j.tenant > coalesce(cur, '')
            AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
            AND (j.expires_at IS NULL OR j.expires_at > now())
            AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            AND j.id <> ALL (chosen)
        ORDER BY j.tenant LIMIT 1;
        IF nxt IS NOT NULL THEN
            cur := nxt;
            SELECT j.id INTO jid FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant = nxt AND j.rate_key IS NULL
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                AND j.id <> ALL (chosen)
            ORDER BY j.priority DESC, j.scheduled_at, j.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
        ELSE
            -- The turn of the jobs without a tenant, which closes the round.
            cur := NULL;
            SELECT s.id INTO jid FROM (
                SELECT j.id, j.tenant, j.rate_key, j.priority, j.scheduled_at FROM {schema}.jobs j
                WHERE j.queue = p_queue
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    AND j.id <> ALL (chosen)
                ORDER BY j.priority DESC, j.scheduled_at, j.id
                LIMIT 64
            ) s
            WHERE s.tenant IS NULL AND s.rate_key IS NULL
            ORDER BY s.priority DESC, s.scheduled_at, s.id
            LIMIT 1;
            IF jid IS NOT NULL THEN
                PERFORM 1 FROM {schema}.jobs j WHERE j.id = jid FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    jid := NULL;
                END IF;
            END IF;
        END IF;
        IF jid IS NOT NULL THEN
            chosen := chosen || jid;
            found_in := true;
        END IF;
        IF nxt IS NULL THEN
            idle := CASE WHEN found_in THEN 0 ELSE idle + 1 END;
            found_in := false;
        END IF;
        jid := NULL;
    END LOOP;

    UPDATE {schema}.tenant_cursors SET tenant = cur WHERE queue = p_queue;
    RETURN QUERY SELECT unnest(chosen);
END
$$;
