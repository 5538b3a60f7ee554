-- Held jobs: the due jobs of a rate key left without room leave the claim index, as the SQLite
-- store does (its held column). The limited claim's look for jobs without a limit walks
-- jobs_claim_idx in claim order, and passed over every due job of a key at its limit at each claim:
-- a key at MaxActive 50 with 40,000 due jobs cost each claim of its queue 1,931 buffers and 24 ms,
-- so such a queue drained at a fifth of the other stores' rate. Now the claim that leaves a key
-- without room marks the key's due jobs in the range that look passed over (up to 10,000 a claim)
-- held, and jobs_claim_idx leaves held jobs out, so the next claims do not pass over them again.
-- The limited keys' own look reads jobs_rate_claim_idx, which keeps held jobs: a held job runs when
-- its key has room, in the same order as before. Holding changes nothing else: only a key with a
-- limit has held jobs, and its jobs are never the free look's. A key whose limit is deleted (or made
-- unbounded) has its held jobs returned to the claim index by the next limited claim of their queue,
-- before it looks (one probe of jobs_held_idx per held key). A claim takes a held job back to
-- held NULL.
-- older binaries: incompatible, their plain claim, hand-off insert and per-priority counts name no
-- held column, so they cannot use jobs_claim_idx any more
ALTER TABLE {schema}.jobs ADD COLUMN held boolean;

DROP INDEX {schema}.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON {schema}.jobs (queue, priority DESC, scheduled_at, id)
    WITH (deduplicate_items = off)
    WHERE state IN ('available', 'scheduled', 'retryable') AND held IS NULL;

-- The held jobs by queue and key: the limited claim's probe for keys no longer limited, and the
-- held part of a queue's counts.
CREATE INDEX jobs_held_idx ON {schema}.jobs (queue, rate_key) WHERE held;

DO $migration$
DECLARE
    lim  regprocedure := '{schema}.claim_limited_untokened(text, text[], integer, bigint, text)'::regprocedure;
    fair regprocedure := '{schema}.claim_fair_pick(text, text[], integer)'::regprocedure;
    f    regprocedure;
    def  text;
    out  text;
    n    integer;
    pairs text[] := ARRAY[
        -- The claim writes held NULL on the jobs it takes.
        $t$    SET state = 'active', attempt = j.attempt + 1, started_at = now(),
$t$, $t$    SET state = 'active', attempt = j.attempt + 1, started_at = now(), held = NULL,
$t$,
        -- The keys' rooms are kept for the hold too.
        $t$            -- No candidate has a tenant: all are taken, as migration 005 took them. The keys' rooms
            -- are kept only for steps 4 and 5, which need them only when asked for the limited keys
            -- or when a key acts.
            chosen := chosen || c_ids;
            IF acting OR want_limited THEN$t$,
        $t$            -- No candidate has a tenant: all are taken, as migration 005 took them. The keys' rooms
            -- are kept for the hold (3a) and steps 4 and 5.
            chosen := chosen || c_ids;
            IF cardinality(keys) > 0 THEN$t$,
        $t$    b_id           uuid;
$t$, $t$    b_id           uuid;
    hold_keys      text[];            -- keys left without room: their due jobs are held (3a)
    free_keys      text[];            -- keys with held jobs and no limit any more (1b)
    hold_ids       uuid[];            -- the jobs 1b returns, then those 3a holds
$t$,
        -- 1b. Held jobs of keys no longer limited return to the claim index.
        $t$    rooms0 := rooms;
$t$, $t$    rooms0 := rooms;

    -- 1b. The held jobs of a key that no longer limits (its limit deleted or made unbounded since a
    --     claim held them) return to jobs_claim_idx, where the look for free jobs below finds them.
    --     Step 1 locked every limit that bounds: a limit removed later waits for this claim.
    WITH RECURSIVE hk(key) AS (
        (SELECT h.rate_key FROM {schema}.jobs h WHERE h.queue = p_queue AND h.held
         ORDER BY h.rate_key LIMIT 1)
        UNION ALL
        SELECT (SELECT h.rate_key FROM {schema}.jobs h
                WHERE h.queue = p_queue AND h.held AND h.rate_key > hk.key
                ORDER BY h.rate_key LIMIT 1)
        FROM hk WHERE hk.key IS NOT NULL
    )
    SELECT array_agg(hk.key) INTO free_keys FROM hk WHERE hk.key IS NOT NULL AND hk.key <> ALL (keys);
    IF free_keys IS NOT NULL THEN
        -- Rows another claim has locked are left to it (it is returning them too): two claims
        -- waiting on each other's rows would deadlock.
        SELECT array_agg(x.id) INTO hold_ids FROM (
            SELECT h.id FROM {schema}.jobs h
            WHERE h.queue = p_queue AND h.held AND h.rate_key = ANY (free_keys)
            FOR UPDATE SKIP LOCKED
        ) x;
        UPDATE {schema}.jobs j SET held = NULL WHERE j.id = ANY (hold_ids);
        hold_ids := NULL;
    END IF;
$t$,
        -- 3a. The hold.
        $t$    -- 3. The windows.
$t$, $t$    -- 3a. The due jobs of the keys this claim leaves without room, in the range the look for free
    --     jobs passed over (up to the last job taken when the claim is full, else to the end of
    --     the due jobs), are held: out of jobs_claim_idx, so the next claims' look does not pass
    --     over them again. The keyed look reads jobs_rate_claim_idx, which keeps them.
    hold_keys := ARRAY(SELECT r.key FROM unnest(keys, rooms) AS r(key, room) WHERE r.room <= 0);
    IF cardinality(hold_keys) > 0 THEN
        IF cardinality(chosen) >= p_limit THEN
            SELECT j.id, j.priority, j.scheduled_at INTO last_id, last_priority, last_scheduled
            FROM {schema}.jobs j WHERE j.id = ANY (chosen)
            ORDER BY j.priority, j.scheduled_at DESC, j.id DESC
            LIMIT 1;
        END IF;
        WITH RECURSIVE hprios AS (
            (SELECT j.priority FROM {schema}.jobs j
             WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable') AND j.held IS NULL
             ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable') AND j.held IS NULL
                        AND j.priority < p.priority
                    ORDER BY j.priority DESC LIMIT 1)
            FROM hprios p WHERE p.priority IS NOT NULL AND (last_id IS NULL OR p.priority > last_priority)
        )
        SELECT array_agg(h.id) INTO hold_ids FROM (
            SELECT c.id FROM hprios p CROSS JOIN LATERAL (
                SELECT j.id FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.priority = p.priority
                    AND j.state IN ('available', 'scheduled', 'retryable') AND j.held IS NULL
                    AND j.scheduled_at <= now()
                    AND j.rate_key = ANY (hold_keys)
                    AND (last_id IS NULL OR j.priority > last_priority
                        OR (j.priority = last_priority AND (j.scheduled_at, j.id) < (last_scheduled, last_id)))
                ORDER BY j.scheduled_at, j.id
                LIMIT 10000
                FOR UPDATE SKIP LOCKED
            ) c
            WHERE p.priority IS NOT NULL
            LIMIT 10000
        ) h;
        IF hold_ids IS NOT NULL THEN
            UPDATE {schema}.jobs j SET held = true WHERE j.id = ANY (hold_ids);
        END IF;
    END IF;

    -- 3. The windows.
$t$
    ];
BEGIN
    FOREACH f IN ARRAY ARRAY[lim, fair] LOOP
        def := pg_get_functiondef(f);
        -- Every walk of jobs_claim_idx names the index's new condition.
        out := replace(def, $t$j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')$t$,
                            $t$j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable') AND j.held IS NULL$t$);
        out := regexp_replace(out,
            $r$(j\.queue = p_queue AND j\.priority = (p\.priority|prios\[k\])\s+(AND \(j\.scheduled_at, j\.id\) > \(ats\[k\], solo_ids\[k\]\)\s+)?AND j\.state IN \('available', 'scheduled', 'retryable'\))$r$,
            '\1 AND j.held IS NULL', 'g');
        n := (length(out) - length(def)) / length(' AND j.held IS NULL');
        IF (f = lim AND n <> 3) OR (f = fair AND n <> 10) THEN
            RAISE EXCEPTION 'migration 034: % has % walks of the claim index, not the ones expected', f, n;
        END IF;
        IF f = lim THEN
            FOR i IN 1 .. array_length(pairs, 1) BY 2 LOOP
                IF position(pairs[i] IN out) = 0 THEN
                    RAISE EXCEPTION 'migration 034: % holds no part %', f, (i + 1) / 2;
                END IF;
                out := replace(out, pairs[i], pairs[i + 1]);
            END LOOP;
        END IF;
        EXECUTE out;
    END LOOP;
END
$migration$;
