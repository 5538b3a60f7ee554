DROP FUNCTION IF EXISTS claim_fair_pick(text, text[], integer);
DROP INDEX IF EXISTS jobs_tenant_state_idx;
ALTER TABLE tenant_cursors DROP COLUMN IF EXISTS used;
DROP TABLE IF EXISTS tenants;

-- The claim of migration 010 (round-robin, one job per turn).
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
