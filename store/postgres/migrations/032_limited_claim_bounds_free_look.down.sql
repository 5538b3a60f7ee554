-- Puts back claim_limited_untokened's look for jobs without a limit as migration 031 left it: in
-- one statement with the limited keys' jobs, unbounded.
DO $migration$
DECLARE
    f     regprocedure := '{schema}.claim_limited_untokened(text, text[], integer, bigint, text)'::regprocedure;
    def   text;
    out   text;
    pairs text[] := ARRAY[
        $t$        -- The limited keys' jobs first, each key's up to its room. When they fill the claim, the
        -- look for jobs without a limit below stops at the last of them in claim order (b_*): a job
        -- after it could not be taken. Without the bound that look passed over every due job of the
        -- limited keys at each claim.
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.scheduled_at, c.id),
            array_agg(c.priority ORDER BY c.priority DESC, c.scheduled_at, c.id),
            array_agg(c.scheduled_at ORDER BY c.priority DESC, c.scheduled_at, c.id),
            array_agg(c.tenant ORDER BY c.priority DESC, c.scheduled_at, c.id),
            array_agg(c.rate_key ORDER BY c.priority DESC, c.scheduled_at, c.id)
        INTO k_ids, k_priorities, k_scheduled, k_tenants, k_keys
        FROM (
            SELECT c.* FROM unnest(keys, rooms) AS r(key, room)
            CROSS JOIN LATERAL (
                WITH RECURSIVE kprios AS (
                    (SELECT j.priority FROM {schema}.jobs j
                     WHERE j.queue = p_queue AND j.rate_key = r.key
                         AND j.state IN ('available', 'scheduled', 'retryable')
                     ORDER BY j.priority DESC LIMIT 1)
                    UNION ALL
                    SELECT (SELECT j.priority FROM {schema}.jobs j
                            WHERE j.queue = p_queue AND j.rate_key = r.key
                                AND j.state IN ('available', 'scheduled', 'retryable')
                                AND j.priority < kp.priority
                            ORDER BY j.priority DESC LIMIT 1)
                    FROM kprios kp WHERE kp.priority IS NOT NULL
                )
                SELECT t.* FROM kprios kp CROSS JOIN LATERAL (
                    SELECT j.id, j.priority, j.scheduled_at, j.tenant, j.rate_key FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.rate_key = r.key AND j.priority = kp.priority
                        AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.scheduled_at <= now()
                        AND (j.expires_at IS NULL OR j.expires_at > now())
                        AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                        AND j.id <> ALL (chosen)
                        AND (j.tenant IS NULL OR j.tenant <> ALL (full_t))
                    ORDER BY j.scheduled_at, j.id
                    LIMIT least(r.room, want)
                    FOR UPDATE SKIP LOCKED
                ) t
                WHERE kp.priority IS NOT NULL
                LIMIT least(r.room, want)
            ) c
            WHERE r.room > 0
        ) c;
        IF cardinality(k_ids) >= want THEN
            b_priority := k_priorities[want];
            b_scheduled := k_scheduled[want];
            b_id := k_ids[want];
        ELSE
            b_priority := -2147483648;
            b_scheduled := 'infinity';
            b_id := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
        END IF;
        WITH RECURSIVE prios AS (
            (SELECT j.priority FROM {schema}.jobs j
             WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
             ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.priority < p.priority
                    ORDER BY j.priority DESC LIMIT 1)
            FROM prios p WHERE p.priority IS NOT NULL AND p.priority > b_priority
        ), free AS (
            SELECT c.* FROM prios p CROSS JOIN LATERAL (
                SELECT j.id, j.priority, j.scheduled_at, j.tenant, j.rate_key FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.priority = p.priority
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    -- Not limited: no key, or a key without a limit (checked again here, so a job
                    -- with a limited key that arrived after step 1 waits for the next claim).
                    AND (j.rate_key IS NULL OR (j.rate_key <> ALL (keys) AND NOT EXISTS (
                        SELECT 1 FROM {schema}.rate_limits l
                        WHERE l.key = j.rate_key AND (l.max_active > 0 OR (l.rate > 0 AND l.period_us > 0)))))
                    AND j.id <> ALL (chosen)
                    AND (j.tenant IS NULL OR j.tenant <> ALL (full_t))
                    AND (j.scheduled_at, j.id) <= (
                        CASE WHEN p.priority = b_priority THEN b_scheduled ELSE 'infinity' END,
                        CASE WHEN p.priority = b_priority THEN b_id ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff' END)
                ORDER BY j.scheduled_at, j.id
                LIMIT want
                FOR UPDATE SKIP LOCKED
            ) c
            WHERE p.priority IS NOT NULL
            LIMIT want
        ), keyed AS (
            SELECT * FROM unnest(k_ids, k_priorities, k_scheduled, k_tenants, k_keys)
                AS k(id, priority, scheduled_at, tenant, rate_key)
        ), candidates AS (
            SELECT * FROM free UNION ALL SELECT * FROM keyed
        )$t$,
        $t$        WITH RECURSIVE prios AS (
            (SELECT j.priority FROM {schema}.jobs j
             WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
             ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.priority < p.priority
                    ORDER BY j.priority DESC LIMIT 1)
            FROM prios p WHERE p.priority IS NOT NULL
        ), free AS (
            SELECT c.* FROM prios p CROSS JOIN LATERAL (
                SELECT j.id, j.priority, j.scheduled_at, j.tenant, j.rate_key FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.priority = p.priority
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    -- Not limited: no key, or a key without a limit (checked again here, so a job
                    -- with a limited key that arrived after step 1 waits for the next claim).
                    AND (j.rate_key IS NULL OR (j.rate_key <> ALL (keys) AND NOT EXISTS (
                        SELECT 1 FROM {schema}.rate_limits l
                        WHERE l.key = j.rate_key AND (l.max_active > 0 OR (l.rate > 0 AND l.period_us > 0)))))
                    AND j.id <> ALL (chosen)
                    AND (j.tenant IS NULL OR j.tenant <> ALL (full_t))
                ORDER BY j.scheduled_at, j.id
                LIMIT want
                FOR UPDATE SKIP LOCKED
            ) c
            WHERE p.priority IS NOT NULL
            LIMIT want
        ), keyed AS (
            SELECT c.* FROM unnest(keys, rooms) AS r(key, room)
            CROSS JOIN LATERAL (
                WITH RECURSIVE kprios AS (
                    (SELECT j.priority FROM {schema}.jobs j
                     WHERE j.queue = p_queue AND j.rate_key = r.key
                         AND j.state IN ('available', 'scheduled', 'retryable')
                     ORDER BY j.priority DESC LIMIT 1)
                    UNION ALL
                    SELECT (SELECT j.priority FROM {schema}.jobs j
                            WHERE j.queue = p_queue AND j.rate_key = r.key
                                AND j.state IN ('available', 'scheduled', 'retryable')
                                AND j.priority < kp.priority
                            ORDER BY j.priority DESC LIMIT 1)
                    FROM kprios kp WHERE kp.priority IS NOT NULL
                )
                SELECT t.* FROM kprios kp CROSS JOIN LATERAL (
                    SELECT j.id, j.priority, j.scheduled_at, j.tenant, j.rate_key FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.rate_key = r.key AND j.priority = kp.priority
                        AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.scheduled_at <= now()
                        AND (j.expires_at IS NULL OR j.expires_at > now())
                        AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                        AND j.id <> ALL (chosen)
                        AND (j.tenant IS NULL OR j.tenant <> ALL (full_t))
                    ORDER BY j.scheduled_at, j.id
                    LIMIT least(r.room, want)
                    FOR UPDATE SKIP LOCKED
                ) t
                WHERE kp.priority IS NOT NULL
                LIMIT least(r.room, want)
            ) c
            WHERE r.room > 0
        ), candidates AS (
            SELECT * FROM free UNION ALL SELECT * FROM keyed
        )$t$,
        $t$    passes         integer := 0;
    k_ids          uuid[];            -- a pass's candidates of the limited keys, in claim order
    k_priorities   integer[];
    k_scheduled    timestamptz[];
    k_tenants      text[];
    k_keys         text[];
    b_priority     integer;           -- the last of them when they fill the claim, else past the end
    b_scheduled    timestamptz;
    b_id           uuid;
BEGIN$t$,
        $t$    passes         integer := 0;
BEGIN$t$];
BEGIN
    def := pg_get_functiondef(f);
    FOR i IN 1 .. cardinality(pairs) / 2 LOOP
        out := replace(def, pairs[2 * i - 1], pairs[2 * i]);
        IF out = def THEN
            RAISE EXCEPTION 'migration 032 down: % holds no part to replace, number %', f, i;
        END IF;
        def := out;
    END LOOP;
    EXECUTE def;
END
$migration$;
