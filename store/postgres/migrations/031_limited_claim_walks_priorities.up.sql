-- claim_limited_untokened walks priorities where it looked for due jobs with one scan in claim
-- order, as the plain claim (store/postgres/queries.go, claimHead) and claim_fair_pick (migration
-- 030) do: the jobs without a limit (free), each limited key's jobs (keyed), the look for a key's
-- due job left waiting (step 4) and the jobs an exhausted key drops or reschedules (step 5) walk
-- the queue's (or the key's) priorities from the highest and take each one's due jobs from the front
-- of its range, which stops at the first job not yet due. The single scans could not stop there and
-- passed over the entries of every job due later whenever they found fewer jobs than they wanted: a
-- key with 100,000 retries waiting cost every limited claim of its queue a pass over them.
-- The jobs a claim takes, and their order, are unchanged. Step 5 now locks the jobs it may hold back
-- key by key (up to 1000 of each exhausted key whose limit acts) before taking the first 1000 of
-- them in claim order; the others stay where they are and are held back by the next claim.
-- older binaries: compatible, the function's signature and what it returns are unchanged
--
-- The function is rewritten from its definition as migration 029 left it, three parts of it replaced;
-- the migration fails if it does not find one of them.
DO $migration$
DECLARE
    f     regprocedure := '{schema}.claim_limited_untokened(text, text[], integer, bigint, text)'::regprocedure;
    def   text;
    out   text;
    pairs text[] := ARRAY[
        $t$        WITH free AS (
            SELECT j.id, j.priority, j.scheduled_at, j.tenant, j.rate_key FROM {schema}.jobs j
            WHERE j.queue = p_queue
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.scheduled_at <= now()
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                -- Not limited: no key, or a key without a limit (checked again here, so a job with a
                -- limited key that arrived after step 1 waits for the next claim).
                AND (j.rate_key IS NULL OR (j.rate_key <> ALL (keys) AND NOT EXISTS (
                    SELECT 1 FROM {schema}.rate_limits l
                    WHERE l.key = j.rate_key AND (l.max_active > 0 OR (l.rate > 0 AND l.period_us > 0)))))
                AND j.id <> ALL (chosen)
                AND (j.tenant IS NULL OR j.tenant <> ALL (full_t))
            ORDER BY j.priority DESC, j.scheduled_at, j.id
            LIMIT want
            FOR UPDATE SKIP LOCKED
        ), keyed AS (
            SELECT c.* FROM unnest(keys, rooms) AS r(key, room)
            CROSS JOIN LATERAL (
                SELECT j.id, j.priority, j.scheduled_at, j.tenant, j.rate_key FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.rate_key = r.key
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    AND j.id <> ALL (chosen)
                    AND (j.tenant IS NULL OR j.tenant <> ALL (full_t))
                ORDER BY j.priority DESC, j.scheduled_at, j.id
                LIMIT least(r.room, want)
                FOR UPDATE SKIP LOCKED
            ) c
            WHERE r.room > 0
        ), candidates AS ($t$,
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
        ), candidates AS ($t$,
        $t$            WHERE (r.room <= 0 OR r.room < r.room0) AND EXISTS (
                SELECT 1 FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.rate_key = r.key
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    AND j.id <> ALL (chosen))$t$,
        $t$            WHERE (r.room <= 0 OR r.room < r.room0) AND EXISTS (
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
                SELECT 1 FROM kprios kp
                WHERE kp.priority IS NOT NULL AND EXISTS (
                    SELECT 1 FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.rate_key = r.key AND j.priority = kp.priority
                        AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.scheduled_at <= now()
                        AND (j.expires_at IS NULL OR j.expires_at > now())
                        AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                        AND j.id <> ALL (chosen)))$t$,
        $t$    WITH skipped AS (
        SELECT j.id, l.on_limit,
            CASE WHEN l.on_limit = 'drop' THEN 'discarded' ELSE 'scheduled' END AS target,
            CASE WHEN l.rate > 0 AND l.period_us > 0 AND l.window_count >= l.rate
                    AND l.window_start + l.period_us * interval '1 microsecond' > now()
                THEN l.window_start + l.period_us * interval '1 microsecond'
                ELSE now() + interval '1 second' END AS retry_at
        FROM {schema}.jobs j
        JOIN {schema}.rate_limits l ON l.key = j.rate_key
        WHERE j.queue = p_queue AND j.rate_key = ANY (keys) AND l.on_limit <> 'wait'
            -- Only a key with no room left passed its jobs over for want of room.
            AND rooms[array_position(keys, j.rate_key)] <= 0
            AND j.state IN ('available', 'scheduled', 'retryable')
            AND j.scheduled_at <= now()
            AND (j.expires_at IS NULL OR j.expires_at > now())
            AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            AND j.id <> ALL (chosen)
            -- A job passed over for its tenant's limit waits (a tenant's limit always waits), and
            -- so does one whose rate key is its own tenant's limit key.
            AND (j.tenant IS NULL OR (j.tenant <> ALL (full_t) AND j.rate_key <> 'tenant:' || j.tenant))
            AND (last_id IS NULL OR j.priority > last_priority
                OR (j.priority = last_priority AND (j.scheduled_at, j.id) < (last_scheduled, last_id)))
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        LIMIT 1000
        FOR UPDATE OF j SKIP LOCKED$t$,
        $t$    WITH skipped AS (
        SELECT c.id, l.on_limit,
            CASE WHEN l.on_limit = 'drop' THEN 'discarded' ELSE 'scheduled' END AS target,
            CASE WHEN l.rate > 0 AND l.period_us > 0 AND l.window_count >= l.rate
                    AND l.window_start + l.period_us * interval '1 microsecond' > now()
                THEN l.window_start + l.period_us * interval '1 microsecond'
                ELSE now() + interval '1 second' END AS retry_at
        -- Only a key with no room left passed its jobs over for want of room.
        FROM unnest(keys, rooms) AS r(key, room)
        JOIN {schema}.rate_limits l ON l.key = r.key AND l.on_limit <> 'wait'
        CROSS JOIN LATERAL (
            WITH RECURSIVE kprios AS (
                (SELECT j.priority FROM {schema}.jobs j
                 WHERE j.queue = p_queue AND j.rate_key = r.key
                     AND j.state IN ('available', 'scheduled', 'retryable')
                     AND (last_id IS NULL OR j.priority >= last_priority)
                 ORDER BY j.priority DESC LIMIT 1)
                UNION ALL
                SELECT (SELECT j.priority FROM {schema}.jobs j
                        WHERE j.queue = p_queue AND j.rate_key = r.key
                            AND j.state IN ('available', 'scheduled', 'retryable')
                            AND j.priority < kp.priority
                            AND (last_id IS NULL OR j.priority >= last_priority)
                        ORDER BY j.priority DESC LIMIT 1)
                FROM kprios kp WHERE kp.priority IS NOT NULL
            )
            SELECT t.* FROM kprios kp CROSS JOIN LATERAL (
                SELECT j.id, j.priority, j.scheduled_at FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.rate_key = r.key AND j.priority = kp.priority
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    AND j.id <> ALL (chosen)
                    -- A job passed over for its tenant's limit waits (a tenant's limit always
                    -- waits), and so does one whose rate key is its own tenant's limit key.
                    AND (j.tenant IS NULL OR (j.tenant <> ALL (full_t) AND j.rate_key <> 'tenant:' || j.tenant))
                    AND (last_id IS NULL OR j.priority > last_priority
                        OR (j.priority = last_priority AND (j.scheduled_at, j.id) < (last_scheduled, last_id)))
                ORDER BY j.scheduled_at, j.id
                LIMIT 1000
                FOR UPDATE OF j SKIP LOCKED
            ) t
            WHERE kp.priority IS NOT NULL
            LIMIT 1000
        ) c
        WHERE r.room <= 0
        ORDER BY c.priority DESC, c.scheduled_at, c.id
        LIMIT 1000$t$];
BEGIN
    def := pg_get_functiondef(f);
    FOR i IN 1 .. cardinality(pairs) / 2 LOOP
        out := replace(def, pairs[2 * i - 1], pairs[2 * i]);
        IF out = def THEN
            RAISE EXCEPTION 'migration 031: % holds no part to replace, number %', f, i;
        END IF;
        def := out;
    END LOOP;
    EXECUTE def;
END
$migration$;

-- Its statements run on generic plans from the first call. Left to choose, the plan cache planned
-- them anew at every call (their generic plans' estimated cost, with arrays and limits unknown,
-- stayed above the custom plans'), which cost a claim of 50 jobs about a third of its time
-- (BenchmarkLimitedClaim, medians of 500 claims: migration 029's claim 5.5 ms on generic plans
-- against 7.8 on custom ones, this one 5.7 against 8.5). With it this claim costs what migration
-- 029's did without it (7.4 against 7.2 ms in one run). The generic plans are the same index walks
-- (TestLimitedClaimBesideAKeyBacklog checks their reads).
ALTER FUNCTION {schema}.claim_limited_untokened(text, text[], integer, bigint, text)
    SET plan_cache_mode = force_generic_plan;
