-- Unique jobs, rate and concurrency limits, and workflows (see store/features.go for the contract).
-- Runs with search_path set to the store's schema. Function bodies name the schema as {schema} and
-- the notification channel as {channel}: Migrate substitutes both, so the functions never depend on
-- the search_path of the session that calls them.

ALTER TABLE jobs
    -- The states in which unique_key is held (always set when unique_key is); NULL otherwise.
    -- Keys stored before this migration have no states, so they hold nothing.
    ADD COLUMN unique_states  text[],
    -- The key's hold ends at unique_until whatever the state; the insert that finds a lapsed holder
    -- clears its unique_key.
    ADD COLUMN unique_until   timestamptz,
    -- Set on a workflow's callbacks: the outcome of the parents that releases the job.
    ADD COLUMN run_on         text
        CONSTRAINT jobs_run_on_check CHECK (run_on IN ('success', 'failure', 'complete')),
    -- The parents' results in parent_ids order, written when a workflow releases the job.
    ADD COLUMN parent_results jsonb;

-- Unique jobs: no two jobs hold one key at once. A job holds its key while it is in one of its
-- unique states; inserts resolve conflicts through INSERT ... ON CONFLICT on this index.
CREATE UNIQUE INDEX jobs_unique_idx ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state = ANY (unique_states);

-- Rate limits: the claimable jobs that carry a rate key, in claim order per queue and key. It is
-- empty in a deployment without rate keys, so the claim's probe of it costs one page.
CREATE INDEX jobs_rate_claim_idx ON jobs (queue, rate_key, priority DESC, scheduled_at, id)
    WITH (deduplicate_items = off)
    WHERE rate_key IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');

-- Rate limits: the active jobs of each key, counted by limited claims.
CREATE INDEX jobs_rate_active_idx ON jobs (rate_key)
    WHERE rate_key IS NOT NULL AND state = 'active';

-- Workflows: a workflow's jobs in id order (counts, listings, cancellation).
CREATE INDEX jobs_workflow_idx ON jobs (workflow_id, id)
    WHERE workflow_id IS NOT NULL;

-- Workflows: the pending jobs waiting for a given parent. Written directly (no pending list), so a
-- lookup right after a large workflow is inserted does not scan a long list.
CREATE INDEX jobs_children_idx ON jobs USING gin (parent_ids)
    WITH (fastupdate = off)
    WHERE state = 'pending' AND parent_ids IS NOT NULL;

-- Stored rate and concurrency limits, with the current rate window of each.
CREATE TABLE rate_limits (
    key          text        PRIMARY KEY,
    max_active   integer     NOT NULL DEFAULT 0 CONSTRAINT rate_limits_max_active_check CHECK (max_active >= 0),
    rate         integer     NOT NULL DEFAULT 0 CONSTRAINT rate_limits_rate_check CHECK (rate >= 0),
    period_us    bigint      NOT NULL DEFAULT 0 CONSTRAINT rate_limits_period_check CHECK (period_us >= 0),
    on_limit     text        NOT NULL DEFAULT 'wait'
        CONSTRAINT rate_limits_on_limit_check CHECK (on_limit IN ('wait', 'reschedule', 'drop')),
    window_start timestamptz,
    window_count bigint      NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Workflows. Their state is derived from their members' states; only the cancellation is stored.
CREATE TABLE workflows (
    id           text        PRIMARY KEY,
    name         text        NOT NULL DEFAULT '',
    type         text        NOT NULL DEFAULT '',
    meta         jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    cancelled_at timestamptz
);

-- workflow_advance decides the pending children of a workflow job that just reached a terminal
-- state, in the transaction of that transition, whatever made it (Finish, CancelJob, Rescue,
-- DiscardExpired, a unique replace, a dropped limited job, CancelWorkflow). A child is released
-- (available now, with its parents' results, its queue announced on commit) or cancelled as
-- store/features.go says, or left waiting.
--
-- Cancelled children decide their own children in turn. The cascade runs as a loop here, one
-- generation per pass, not through the trigger firing again for each cancelled child: that would
-- nest one trigger call per generation and a long chain would exhaust max_stack_depth. The nested
-- calls fired by this function's own updates see pronto.workflow_advancing and return at once.
--
-- Children are locked in id order before their parents' states are read, each read in a statement
-- of its own: when two parents of a child finish at once, the second transaction to lock the child
-- sees the first one's committed outcome, so the child is released exactly once.
CREATE FUNCTION {schema}.workflow_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    finished  uuid[] := ARRAY[NEW.id];
    cancelled uuid[];
    child     record;
    parents   record;
BEGIN
    IF current_setting('pronto.workflow_advancing', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('pronto.workflow_advancing', 'on', true);
    WHILE cardinality(finished) > 0 LOOP
        cancelled := '{}';
        FOR child IN
            SELECT id, queue, run_on, parent_ids FROM {schema}.jobs
            WHERE state = 'pending' AND parent_ids IS NOT NULL AND parent_ids && finished
            ORDER BY id
            FOR UPDATE
        LOOP
            -- A parent that no longer exists (deleted by hand) counts as not finished.
            SELECT coalesce(bool_and(coalesce(p.state = 'completed', false)), false) AS all_completed,
                   coalesce(bool_and(coalesce(p.state IN ('completed', 'cancelled', 'discarded'), false)), false) AS all_terminal,
                   coalesce(bool_or(coalesce(p.state IN ('cancelled', 'discarded'), false)), false) AS any_failed
            INTO parents
            FROM unnest(child.parent_ids) AS u(id)
            LEFT JOIN {schema}.jobs p ON p.id = u.id;

            IF (coalesce(child.run_on, 'success') = 'success' AND parents.any_failed)
                OR (child.run_on = 'failure' AND parents.all_completed) THEN
                UPDATE {schema}.jobs SET state = 'cancelled', completed_at = now() WHERE id = child.id;
                cancelled := cancelled || child.id;
            ELSIF (coalesce(child.run_on, 'success') = 'success' AND parents.all_completed)
                OR (child.run_on IN ('failure', 'complete') AND parents.all_terminal) THEN
                UPDATE {schema}.jobs
                SET state = 'available', scheduled_at = now(),
                    parent_results = (
                        SELECT jsonb_agg(p.result ORDER BY u.ord)
                        FROM unnest(child.parent_ids) WITH ORDINALITY AS u(id, ord)
                        LEFT JOIN {schema}.jobs p ON p.id = u.id)
                WHERE id = child.id;
                PERFORM pg_notify({channel}, '{"k":"i","q":' || to_json(child.queue)::text || ',"d":0}');
            END IF;
        END LOOP;
        finished := cancelled;
    END LOOP;
    PERFORM set_config('pronto.workflow_advancing', 'off', true);
    RETURN NULL;
END
$$;

-- Other rows pay the WHEN test and PostgreSQL's fetch of the old row version that every AFTER ROW
-- UPDATE trigger makes before it evaluates WHEN: about a microsecond per updated row (a few per cent
-- of a claim or finish batch, measured), the price of covering every path to a terminal state.
CREATE TRIGGER jobs_workflow_advance
    AFTER UPDATE ON jobs
    FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL AND NEW.state IN ('completed', 'cancelled', 'discarded')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION {schema}.workflow_advance();

-- unique_key_taken tells whether job p_id, about to enter its unique states, must give its key
-- p_key up: another job holds the key, or a job of the same statement with a smaller id enters
-- its own unique states with the key too. p_rivals are the statement's jobs and p_targets their
-- next states (NULL: p_target for all). Statements call it only for a job with a key that enters
-- its unique states from outside them (see uniqueKeyAfter in queries.go), so the common path
-- never runs it; being STABLE, it reads with the calling statement's snapshot.
CREATE FUNCTION {schema}.unique_key_taken(p_id uuid, p_key text, p_rivals uuid[], p_targets text[],
                                          p_target text)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM {schema}.jobs o
                   WHERE o.unique_key = p_key AND o.state = ANY (o.unique_states) AND o.id <> p_id)
        OR EXISTS (SELECT 1 FROM unnest(p_rivals, p_targets) AS x(id, target)
                   JOIN {schema}.jobs o ON o.id = x.id
                   WHERE o.id < p_id AND o.unique_key = p_key
                       AND (coalesce(x.target, p_target) = ANY (o.unique_states)) IS TRUE
                       AND (o.state = ANY (o.unique_states)) IS NOT TRUE);
END
$$;

-- claim_limited is Claim for a queue that has claimable jobs with a rate key (the plain claim
-- statement leaves those alone and says when there are any). It takes up to p_limit jobs in claim
-- order, skipping the jobs whose key is exhausted, and returns them active:
--
--  1. It locks, in key order, the limits of the keys that have claimable jobs in the queue, and
--     works out how many more jobs each key may start now: MaxActive minus the key's active jobs
--     (counted after the lock, so a concurrent claim's jobs are seen), and Rate minus the claims of
--     the current window. Concurrent claims of one key so take turns and never overspend it.
--  2. It takes the first p_limit of: the queue's claimable jobs that are not limited, and the first
--     jobs of each limited key up to its room, and makes them active.
--  3. It counts the claims in each key's rate window, opening a window if none is open.
--  4. It applies OnLimit to the jobs it skipped because their key had no room (every such job
--     before the last job it took, or every such job if it took fewer than p_limit; at most 1000
--     per claim): reschedule moves them to the end of the key's exhausted window, or one second on
--     when only MaxActive holds them back; drop discards them with a "rate_limited" error.
--
-- Like every transition into active, it keeps a unique key only when no other job holds it (see
-- uniqueKeyAfter in queries.go).
CREATE FUNCTION {schema}.claim_limited(p_queue text, p_kinds text[], p_limit integer,
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
