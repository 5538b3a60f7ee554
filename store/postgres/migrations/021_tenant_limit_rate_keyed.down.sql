-- Back to migration 020: claim_limited_untokened as migration 005 made it (under the name
-- claim_limited; migration 006 renamed it), which leaves tenant limits to the fair claim.
CREATE OR REPLACE FUNCTION {schema}.claim_limited_untokened(p_queue text, p_kinds text[], p_limit integer,
                                                            p_lease_us bigint, p_worker text)
RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql AS $$
DECLARE
    lim            record;
    room           bigint;
    keys           text[] := '{}';
    rooms          bigint[] := '{}';
    acting         boolean := false;
    chosen         uuid[];
    last_id        uuid;
    last_priority  integer;
    last_scheduled timestamptz;
BEGIN
    IF p_limit <= 0 OR EXISTS (SELECT 1 FROM {schema}.queues WHERE name = p_queue AND paused) THEN
        RETURN;
    END IF;

    FOR lim IN
        WITH RECURSIVE k(key) AS (
            (SELECT j.rate_key FROM {schema}.jobs j
             WHERE j.queue = p_queue AND j.rate_key IS NOT NULL
                 AND j.state IN ('available', 'scheduled', 'retryable')
             ORDER BY j.rate_key LIMIT 1)
            UNION ALL
            SELECT (SELECT j.rate_key FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.rate_key IS NOT NULL AND j.rate_key > k.key
                        AND j.state IN ('available', 'scheduled', 'retryable')
                    ORDER BY j.rate_key LIMIT 1)
            FROM k WHERE k.key IS NOT NULL
        )
        SELECT l.* FROM {schema}.rate_limits l
        WHERE l.key IN (SELECT k.key FROM k) AND (l.max_active > 0 OR (l.rate > 0 AND l.period_us > 0))
        ORDER BY l.key
        FOR UPDATE OF l
    LOOP
        room := NULL;
        IF lim.max_active > 0 THEN
            SELECT lim.max_active - count(*) INTO room FROM {schema}.jobs
            WHERE rate_key = lim.key AND state = 'active';
        END IF;
        IF lim.rate > 0 AND lim.period_us > 0 THEN
            room := least(room, lim.rate - CASE
                WHEN lim.window_start + lim.period_us * interval '1 microsecond' > now() THEN lim.window_count
                ELSE 0 END);
        END IF;
        keys := keys || lim.key;
        rooms := rooms || greatest(room, 0);
        acting := acting OR lim.on_limit <> 'wait';
    END LOOP;

    WITH free AS (
        SELECT j.id, j.priority, j.scheduled_at FROM {schema}.jobs j
        WHERE j.queue = p_queue
            AND j.state IN ('available', 'scheduled', 'retryable')
            AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
            AND (j.expires_at IS NULL OR j.expires_at > now())
            AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            -- Not limited: no key, or a key without a limit (checked again here, so a job with a
            -- limited key that arrived after step 1 waits for the next claim).
            AND (j.rate_key IS NULL OR (j.rate_key <> ALL (keys) AND NOT EXISTS (
                SELECT 1 FROM {schema}.rate_limits l
                WHERE l.key = j.rate_key AND (l.max_active > 0 OR (l.rate > 0 AND l.period_us > 0)))))
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), keyed AS (
        SELECT c.* FROM unnest(keys, rooms) AS r(key, room)
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.scheduled_at FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.rate_key = r.key
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            ORDER BY j.priority DESC, j.scheduled_at, j.id
            LIMIT least(r.room, p_limit)
            FOR UPDATE SKIP LOCKED
        ) c
        WHERE r.room > 0
    ), candidates AS (
        SELECT * FROM free UNION ALL SELECT * FROM keyed
    )
    SELECT array_agg(c.id ORDER BY c.priority DESC, c.scheduled_at, c.id) INTO chosen
    FROM (SELECT * FROM candidates ORDER BY priority DESC, scheduled_at, id LIMIT p_limit) c;
    chosen := coalesce(chosen, '{}');

    RETURN QUERY
    UPDATE {schema}.jobs j
    SET state = 'active', attempt = j.attempt + 1, started_at = now(),
        lease_expires_at = now() + p_lease_us * interval '1 microsecond', worker_id = p_worker,
        unique_key = CASE
            WHEN j.unique_key IS NOT NULL AND ('active' = ANY (j.unique_states)) IS TRUE
                AND (j.state = ANY (j.unique_states)) IS NOT TRUE
                AND {schema}.unique_key_taken(j.id, j.unique_key, chosen, NULL, 'active')
            THEN NULL ELSE j.unique_key END
    WHERE j.id = ANY (chosen)
    RETURNING j.*;

    UPDATE {schema}.rate_limits l
    SET window_start = CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now()
            THEN l.window_start ELSE now() END,
        window_count = CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now()
            THEN l.window_count + c.n ELSE c.n END
    FROM (SELECT j.rate_key, count(*) AS n FROM {schema}.jobs j
          WHERE j.id = ANY (chosen) AND j.rate_key = ANY (keys)
          GROUP BY j.rate_key) c
    WHERE l.key = c.rate_key AND l.rate > 0 AND l.period_us > 0;

    IF NOT acting THEN
        RETURN;
    END IF;
    IF cardinality(chosen) >= p_limit THEN
        SELECT j.id, j.priority, j.scheduled_at INTO last_id, last_priority, last_scheduled
        FROM {schema}.jobs j WHERE j.id = chosen[p_limit];
    END IF;
    WITH skipped AS (
        SELECT j.id, l.on_limit,
            CASE WHEN l.on_limit = 'drop' THEN 'discarded' ELSE 'scheduled' END AS target,
            CASE WHEN l.rate > 0 AND l.period_us > 0 AND l.window_count >= l.rate
                    AND l.window_start + l.period_us * interval '1 microsecond' > now()
                THEN l.window_start + l.period_us * interval '1 microsecond'
                ELSE now() + interval '1 second' END AS retry_at
        FROM {schema}.jobs j
        JOIN {schema}.rate_limits l ON l.key = j.rate_key
        WHERE j.queue = p_queue AND j.rate_key = ANY (keys) AND l.on_limit <> 'wait'
            AND j.state IN ('available', 'scheduled', 'retryable')
            AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
            AND (j.expires_at IS NULL OR j.expires_at > now())
            AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            AND j.id <> ALL (chosen)
            AND (last_id IS NULL OR j.priority > last_priority
                OR (j.priority = last_priority AND (j.scheduled_at, j.id) < (last_scheduled, last_id)))
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        LIMIT 1000
        FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE {schema}.jobs j
    SET state = s.target,
        scheduled_at = CASE WHEN s.target = 'scheduled' THEN s.retry_at ELSE j.scheduled_at END,
        completed_at = CASE WHEN s.target = 'discarded' THEN now() END,
        errors = CASE WHEN s.target = 'discarded' THEN j.errors || jsonb_build_array(jsonb_build_object(
                'attempt', j.attempt, 'at', now(), 'type', 'rate_limited',
                'message', 'dropped: the rate limit ' || j.rate_key || ' had no room'))
            ELSE j.errors END,
        unique_key = CASE
            WHEN j.unique_key IS NOT NULL AND (s.target = ANY (j.unique_states)) IS TRUE
                AND (j.state = ANY (j.unique_states)) IS NOT TRUE
                AND {schema}.unique_key_taken(j.id, j.unique_key,
                    ARRAY(SELECT s2.id FROM skipped s2 ORDER BY s2.id),
                    ARRAY(SELECT s2.target FROM skipped s2 ORDER BY s2.id), NULL)
            THEN NULL ELSE j.unique_key END
    FROM skipped s
    WHERE j.id = s.id;
END
$$;
