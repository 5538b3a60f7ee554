-- Back to migration 024: claim_limited_untokened as migration 024 made it (step 4 in every claim
-- of a rate-limited queue, whether or not pronto.want_limited asks for it).
CREATE OR REPLACE FUNCTION {schema}.claim_limited_untokened(p_queue text, p_kinds text[], p_limit integer,
                                                            p_lease_us bigint, p_worker text)
RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql AS $$
DECLARE
    lim            record;
    room           bigint;
    keys           text[] := '{}';
    rooms          bigint[] := '{}';
    rooms0         bigint[];          -- rooms as step 1 found them
    acting         boolean := false;
    chosen         uuid[] := '{}';
    last_id        uuid;
    last_priority  integer;
    last_scheduled timestamptz;
    want           integer;
    c_ids          uuid[];            -- a pass's candidates in claim order
    c_tenants      text[];            -- their tenants
    c_keys         text[];            -- their rate keys
    tseen          text[] := '{}';    -- the tenants whose limit was looked up
    tnames         text[] := '{}';    -- those with a limit, and its room
    trooms         bigint[] := '{}';
    trated         boolean := false;  -- one of them counts starts per window
    full_t         text[] := '{}';    -- tenants at their limit: left out of the next passes
    new_t          text[];
    tn             text;
    ti             integer;
    kr             integer;
    passed         boolean;
    passes         integer := 0;
BEGIN
    IF p_limit <= 0 OR EXISTS (SELECT 1 FROM {schema}.queues WHERE name = p_queue AND paused) THEN
        RETURN;
    END IF;

    -- 1. The keys' limits.
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
            -- A tenant's limit key counts the tenant's active jobs (as GetRateLimit reports it): it
            -- is the tenant's limit, which bounds them all.
            IF left(lim.key, 7) = 'tenant:' THEN
                SELECT lim.max_active - count(*) INTO room FROM {schema}.jobs
                WHERE tenant = substr(lim.key, 8) AND state = 'active';
            ELSE
                SELECT lim.max_active - count(*) INTO room FROM {schema}.jobs
                WHERE rate_key = lim.key AND state = 'active';
            END IF;
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

    rooms0 := rooms;

    -- 2. The candidates, and their tenants' limits.
    LOOP
        want := p_limit - cardinality(chosen);
        EXIT WHEN want <= 0 OR passes >= 8;
        passes := passes + 1;
        WITH free AS (
            SELECT j.id, j.priority, j.scheduled_at, j.tenant, j.rate_key FROM {schema}.jobs j
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
                    AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    AND j.id <> ALL (chosen)
                    AND (j.tenant IS NULL OR j.tenant <> ALL (full_t))
                ORDER BY j.priority DESC, j.scheduled_at, j.id
                LIMIT least(r.room, want)
                FOR UPDATE SKIP LOCKED
            ) c
            WHERE r.room > 0
        ), candidates AS (
            SELECT * FROM free UNION ALL SELECT * FROM keyed
        )
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.scheduled_at, c.id),
            array_agg(c.tenant ORDER BY c.priority DESC, c.scheduled_at, c.id),
            array_agg(c.rate_key ORDER BY c.priority DESC, c.scheduled_at, c.id)
        INTO c_ids, c_tenants, c_keys
        FROM (SELECT * FROM candidates ORDER BY priority DESC, scheduled_at, id LIMIT want) c;
        EXIT WHEN c_ids IS NULL;
        IF cardinality(array_remove(c_tenants, NULL)) = 0 THEN
            -- No candidate has a tenant: all are taken, as migration 005 took them. The keys' rooms
            -- are kept only for step 4, which needs them only when a key acts.
            chosen := chosen || c_ids;
            IF acting THEN
                rooms := ARRAY(SELECT r.room - (SELECT count(*) FROM unnest(c_keys) AS ck(k) WHERE ck.k = r.key)
                               FROM unnest(keys, rooms) WITH ORDINALITY AS r(key, room, o) ORDER BY r.o);
            END IF;
            EXIT;
        END IF;

        -- The limits of the candidates' tenants not looked up yet, locked in key order.
        new_t := ARRAY(SELECT DISTINCT u.t FROM unnest(c_tenants) AS u(t)
                       WHERE u.t IS NOT NULL AND u.t <> ALL (tseen));
        IF cardinality(new_t) > 0 THEN
            tseen := tseen || new_t;
            FOR lim IN
                SELECT l.* FROM {schema}.rate_limits l
                WHERE l.key = ANY (ARRAY(SELECT 'tenant:' || u.t FROM unnest(new_t) AS u(t)))
                    AND (l.max_active > 0 OR (l.rate > 0 AND l.period_us > 0))
                ORDER BY l.key
                FOR UPDATE OF l
            LOOP
                tn := substr(lim.key, 8);
                room := NULL;
                IF lim.max_active > 0 THEN
                    SELECT lim.max_active - count(*) INTO room FROM {schema}.jobs
                    WHERE tenant = tn AND state = 'active';
                END IF;
                IF lim.rate > 0 AND lim.period_us > 0 THEN
                    trated := true;
                    room := least(room, lim.rate - CASE
                        WHEN lim.window_start + lim.period_us * interval '1 microsecond' > now() THEN lim.window_count
                        ELSE 0 END);
                END IF;
                tnames := tnames || tn;
                trooms := trooms || greatest(room, 0);
            END LOOP;
        END IF;

        -- Take the candidates in claim order while their tenant has room.
        passed := false;
        FOR i IN 1 .. cardinality(c_ids) LOOP
            tn := c_tenants[i];
            ti := NULL;
            -- A job whose rate key is its own tenant's limit key is checked as its tenant's job too:
            -- it is the same limit.
            IF tn IS NOT NULL THEN
                ti := array_position(tnames, tn);
            END IF;
            IF ti IS NOT NULL AND trooms[ti] <= 0 THEN
                passed := true;
                IF tn <> ALL (full_t) THEN
                    full_t := full_t || tn;
                END IF;
                CONTINUE;
            END IF;
            IF ti IS NOT NULL THEN
                trooms[ti] := trooms[ti] - 1;
            END IF;
            kr := array_position(keys, c_keys[i]);
            IF kr IS NOT NULL THEN
                rooms[kr] := rooms[kr] - 1;
            END IF;
            chosen := chosen || c_ids[i];
        END LOOP;
        EXIT WHEN NOT passed;
        -- The tenants whose room this pass used up are left out of the next too.
        full_t := full_t || ARRAY(SELECT u.t FROM unnest(tnames, trooms) AS u(t, r)
                                  WHERE u.r <= 0 AND u.t <> ALL (full_t));
    END LOOP;

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

    -- 3. The windows.
    UPDATE {schema}.rate_limits l
    SET window_start = CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now()
            THEN l.window_start ELSE now() END,
        window_count = CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now()
            THEN l.window_count + c.n ELSE c.n END
    FROM (SELECT j.rate_key, count(*) AS n FROM {schema}.jobs j
          WHERE j.id = ANY (chosen) AND j.rate_key = ANY (keys)
          GROUP BY j.rate_key) c
    WHERE l.key = c.rate_key AND l.rate > 0 AND l.period_us > 0;
    IF trated THEN
        UPDATE {schema}.rate_limits l
        SET window_start = CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now()
                THEN l.window_start ELSE now() END,
            window_count = CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now()
                THEN l.window_count + c.n ELSE c.n END
        FROM (SELECT 'tenant:' || j.tenant AS key, count(*) AS n FROM {schema}.jobs j
              WHERE j.id = ANY (chosen) AND j.tenant = ANY (tnames)
                  AND j.rate_key IS DISTINCT FROM 'tenant:' || j.tenant
              GROUP BY j.tenant) c
        WHERE l.key = c.key AND l.rate > 0 AND l.period_us > 0;
    END IF;

    IF cardinality(keys) = 0 THEN
        RETURN;
    END IF;

    -- 4. The keys the claim leaves without room while a due job of theirs of the claim's kinds
    --    waits: their room spent (step 1's, less the jobs taken of them); and those of the jobs it
    --    took that have room left and such a job waiting (spent false). Read before step 5 holds
    --    jobs back: a job it drops or reschedules could not start for want of room too.
    PERFORM set_config('pronto.rate_limited', coalesce((
        WITH taken AS (
            SELECT j.rate_key, count(*) AS n FROM {schema}.jobs j
            WHERE j.id = ANY (chosen) AND j.rate_key = ANY (keys)
            GROUP BY j.rate_key
        ), met AS (
            SELECT r.key, r.room - coalesce(taken.n, 0) <= 0 AS spent
            FROM unnest(keys, rooms0) AS r(key, room)
            LEFT JOIN taken ON taken.rate_key = r.key
            WHERE r.room - coalesce(taken.n, 0) <= 0 OR taken.n > 0
        )
        SELECT json_agg(json_build_array(l.key, l.max_active, l.rate, l.period_us,
                CASE WHEN l.rate > 0 AND l.period_us > 0
                        AND l.window_start + l.period_us * interval '1 microsecond' > now()
                    THEN l.window_count ELSE 0 END,
                CASE WHEN l.max_active <= 0 OR NOT met.spent THEN 0
                    WHEN left(l.key, 7) = 'tenant:' THEN (SELECT count(*) FROM {schema}.jobs a
                        WHERE a.tenant = substr(l.key, 8) AND a.state = 'active')
                    ELSE (SELECT count(*) FROM {schema}.jobs a WHERE a.rate_key = l.key AND a.state = 'active')
                END, met.spent) ORDER BY l.key)::text
        FROM met JOIN {schema}.rate_limits l ON l.key = met.key
        WHERE EXISTS (
            SELECT 1 FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.rate_key = l.key
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                AND j.id <> ALL (chosen))
    ), ''), true);

    -- 5. OnLimit of the exhausted keys.
    IF NOT acting THEN
        RETURN;
    END IF;
    IF cardinality(chosen) >= p_limit THEN
        -- The last job taken in claim order (passes after the first append out of order).
        SELECT j.id, j.priority, j.scheduled_at INTO last_id, last_priority, last_scheduled
        FROM {schema}.jobs j WHERE j.id = ANY (chosen)
        ORDER BY j.priority, j.scheduled_at DESC, j.id DESC
        LIMIT 1;
    END IF;
    -- The jobs held back are returned after the claimed ones (state discarded or scheduled; the
    -- claimed ones are active), for claim_limited_held to report them.
    RETURN QUERY
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
            -- Only a key with no room left passed its jobs over for want of room.
            AND rooms[array_position(keys, j.rate_key)] <= 0
            AND j.state IN ('available', 'scheduled', 'retryable')
            AND (CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)
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
    WHERE j.id = s.id
    RETURNING j.*;
END
$$;
