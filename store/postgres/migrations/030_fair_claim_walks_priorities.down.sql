-- Puts back claim_fair_pick as migrations 026 and 029 left it (one ordered scan per probe) and drops
-- the two functions migration 030 added for it.
CREATE OR REPLACE FUNCTION {schema}.claim_fair_pick(p_queue text, p_kinds text[], p_limit integer)
RETURNS SETOF uuid
LANGUAGE plpgsql AS $$
DECLARE
    cur        text;
    cur_used   integer;
    going      boolean := false;  -- the cursor's tenant continues its turn
    resumed    boolean := false;  -- the walk has looked at the cursor's tenant (once)
    walking    boolean := true;   -- the first round, walking the participants
    last_walk  boolean := false;  -- this turn is the walk's last
    after      text;
    nxt        text;
    w          integer;
    lim        record;
    limited    boolean;
    has_rate   boolean;
    room       bigint;
    parts      text[] := '{}';    -- participants in turn order; ' ' (never a tenant) for no tenant
    weights    integer[] := '{}';
    rooms      bigint[] := '{}';  -- NULL: no limit
    rated      boolean[] := '{}'; -- its limit counts starts per window
    alive      boolean[] := '{}';
    untenanted boolean := false;
    n          integer := 0;
    i          integer := 0;
    stride     bigint := p_limit + 2;
    remaining  integer := p_limit;
    total_w    integer;
    m          integer := 1;
    off        integer;
    want       integer;
    base       integer := 0;
    got        uuid[];
    more       uuid[];
    firsts     uuid[];            -- the jobs of the walk's probe
    ptenants   text[];            -- their tenants
    probe      integer;
    gid        uuid;
    locked     uuid[];
    k          integer;
    rk         bigint;
    best_rank  bigint := -1;
    last_part  integer;
    last_used  integer;
    chosen     uuid[] := '{}';
    ranks      bigint[] := '{}';
    solo       text;              -- step 0: the tenant of the jobs its probe locked
    solo_max   text;
    solo_ids   uuid[];
    alone      boolean;           -- step 0: every job its probe locked has a tenant
    prios      integer[];
    ats        timestamptz[];
    limited_solo boolean;         -- step 0: a limit is stored for solo
    others     boolean;           -- step 0: another tenant has claimable jobs
    near_tl    boolean;           -- step 0: a job without a tenant is among the first 64
    supply     uuid[];            -- solo's first claimable jobs in claim order, locked by step 0
    sp         integer := 0;      -- how many of them the turns took
    skip_tl    boolean := false;  -- the turn of the jobs without a tenant has nothing to take
BEGIN
    IF p_limit <= 0 OR EXISTS (SELECT 1 FROM {schema}.queues WHERE name = p_queue AND paused) THEN
        RETURN;
    END IF;

    -- 0. One participant alone. The probe is the plain claim's (jobs_claim_idx, claim order, the
    -- only pass over the front of the queue's index range, where the entries of the jobs claimed
    -- since the last vacuum lie); the checks that follow are seeks that pass over none of them.
    -- The aggregates read the locked rows in claim order, as the subquery returns them.
    SELECT array_agg(x.id), min(x.tenant), max(x.tenant), bool_and(x.tenant IS NOT NULL),
        array_agg(x.priority), array_agg(x.scheduled_at)
    INTO solo_ids, solo, solo_max, alone, prios, ats
    FROM (
        SELECT j.id, j.tenant, j.priority, j.scheduled_at FROM {schema}.jobs j
        WHERE j.queue = p_queue
            AND j.state IN ('available', 'scheduled', 'retryable')
            AND j.scheduled_at <= now()
            AND (j.expires_at IS NULL OR j.expires_at > now())
            AND j.rate_key IS NULL
            AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ) x;
    k := coalesce(cardinality(solo_ids), 0);
    IF k > 0 AND alone AND solo = solo_max THEN
        -- No other tenant has a claimable job (a seek on each side of solo's range of
        -- jobs_tenant_claim_idx), solo has no stored limit, and no job without a tenant follows
        -- within the first 64 in claim order (a seek past the last job locked).
        SELECT EXISTS (SELECT 1 FROM {schema}.rate_limits l WHERE l.key = 'tenant:' || solo),
            EXISTS (SELECT 1 FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.tenant < solo
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds)))
            OR EXISTS (SELECT 1 FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.tenant > solo
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))),
            (k < 64 AND EXISTS (SELECT 1 FROM (
                    (SELECT j.tenant FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.priority = prios[k]
                        AND (j.scheduled_at, j.id) > (ats[k], solo_ids[k])
                        AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.scheduled_at <= now()
                        AND (j.expires_at IS NULL OR j.expires_at > now())
                        AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    ORDER BY j.priority DESC, j.scheduled_at, j.id
                    LIMIT 64 - k)
                    UNION ALL
                    (SELECT j.tenant FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.priority < prios[k]
                        AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.scheduled_at <= now()
                        AND (j.expires_at IS NULL OR j.expires_at > now())
                        AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    ORDER BY j.priority DESC, j.scheduled_at, j.id
                    LIMIT 64 - k)
                    LIMIT 64 - k
                ) f WHERE f.tenant IS NULL)),
            coalesce((SELECT t.weight FROM {schema}.tenants t WHERE t.tenant = solo), 1),
            c.tenant, c.used
        INTO limited_solo, others, near_tl, w, cur, cur_used
        FROM (SELECT 1) o LEFT JOIN {schema}.tenant_cursors c ON c.queue = p_queue;
        IF NOT limited_solo AND NOT others AND NOT near_tl THEN
            RETURN QUERY SELECT u.id FROM unnest(solo_ids) AS u(id);
            -- solo's turns run on from the cursor's count when the cursor is solo's and its turn
            -- is not over, else from a new turn.
            last_used := (CASE WHEN cur = solo AND cur_used < w THEN cur_used ELSE 0 END + k - 1) % w + 1;
            IF cur IS DISTINCT FROM solo OR cur_used IS DISTINCT FROM last_used THEN
                INSERT INTO {schema}.tenant_cursors (queue, tenant, used) VALUES (p_queue, solo, last_used)
                ON CONFLICT (queue) DO UPDATE SET tenant = excluded.tenant, used = excluded.used;
            END IF;
            RETURN;
        END IF;
    END IF;
    -- Not alone: the rows the probe locked stay this claim's to take or leave (SKIP LOCKED passes
    -- over no row its own transaction locked), and the rotation decides. When they are all one
    -- tenant's, they are that tenant's supply: its first claimable jobs in claim order, all a claim
    -- of p_limit jobs can take from it (when the probe came back short, the tenant has no others
    -- that are not locked by concurrent claims).
    IF k > 0 AND alone AND solo = solo_max THEN
        supply := solo_ids;
        skip_tl := NOT near_tl;
    END IF;

    -- The cursor row is locked for the claim, so concurrent claims of one queue take turns.
    SELECT c.tenant, c.used, coalesce(t.weight, 1) INTO cur, cur_used, w
    FROM {schema}.tenant_cursors c LEFT JOIN {schema}.tenants t ON t.tenant = c.tenant
    WHERE c.queue = p_queue FOR UPDATE OF c;
    IF NOT FOUND THEN
        INSERT INTO {schema}.tenant_cursors (queue) VALUES (p_queue) ON CONFLICT (queue) DO NOTHING;
        SELECT c.tenant, c.used, 1 INTO cur, cur_used, w FROM {schema}.tenant_cursors c WHERE c.queue = p_queue FOR UPDATE;
    END IF;
    after := coalesce(cur, '');
    going := cur IS NOT NULL AND cur_used < w;

    LOOP
        EXIT WHEN remaining <= 0;
        off := 0;
        firsts := NULL;
        IF walking THEN
            -- 1. The next participant, with its weight and whether a limit is stored for it: the
            -- cursor's own tenant when its turn goes on (looked at once: at its limit it is passed
            -- over, and the walk goes on after it), else the first tenant after the last one with a
            -- claimable job, else the jobs without a tenant.
            IF going AND NOT resumed THEN
                resumed := true;
                SELECT cur, coalesce((SELECT t.weight FROM {schema}.tenants t WHERE t.tenant = cur), 1),
                    EXISTS (SELECT 1 FROM {schema}.rate_limits l WHERE l.key = 'tenant:' || cur)
                INTO nxt, w, limited;
                off := cur_used;
            ELSE
                -- The probe takes (locks) the tenant's first job too: the tenant's turn then needs
                -- no second pass over the front of its range, where the index entries of the jobs
                -- claimed since the last vacuum lie.
                -- When no one else is left in play, the probe takes up to all the claim still
                -- wants (the rows of the first tenant it meets are kept; those of later tenants it
                -- locked stay claimable, this claim holding the queue's cursor).
                probe := CASE WHEN untenanted AND cur IS NOT NULL AND NOT (true = ANY (alive)) THEN remaining ELSE 1 END;
                -- The probe locks the jobs alone; the tenant of the first one is the next participant,
                -- and its weight and whether a limit is stored for it are looked up once, not per job.
                IF supply IS NOT NULL AND after < solo THEN
                    -- The walk is before solo's range: the probe stops short of it (a bound of
                    -- the index scan, not a filter, which would read the whole range), and solo's
                    -- supply stands for its first jobs.
                    SELECT array_agg(j.tenant ORDER BY j.o), array_agg(j.id ORDER BY j.o)
                    INTO ptenants, firsts FROM (
                        SELECT j.tenant, j.id, row_number() OVER () AS o FROM (
                            SELECT j.tenant, j.id FROM {schema}.jobs j
                            WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                                AND j.state IN ('available', 'scheduled', 'retryable')
                                -- ORDER BY with priority: the order of jobs_tenant_claim_idx, which
                                -- jobs_tenant_state_idx cannot give, so the probe seeks past after in it.
                                AND j.tenant > after AND j.tenant < solo
                                AND j.scheduled_at <= now()
                                AND (j.expires_at IS NULL OR j.expires_at > now())
                                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                            ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
                            LIMIT probe
                            FOR UPDATE SKIP LOCKED
                        ) j
                    ) j;
                ELSE
                    SELECT array_agg(j.tenant ORDER BY j.o), array_agg(j.id ORDER BY j.o)
                    INTO ptenants, firsts FROM (
                        SELECT j.tenant, j.id, row_number() OVER () AS o FROM (
                            SELECT j.tenant, j.id FROM {schema}.jobs j
                            WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                                AND j.state IN ('available', 'scheduled', 'retryable')
                                -- ORDER BY with priority: the order of jobs_tenant_claim_idx, which
                                -- jobs_tenant_state_idx cannot give, so the probe seeks past after in it.
                                AND j.tenant > after
                                AND j.scheduled_at <= now()
                                AND (j.expires_at IS NULL OR j.expires_at > now())
                                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                            ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
                            LIMIT probe
                            FOR UPDATE SKIP LOCKED
                        ) j
                    ) j;
                END IF;
                nxt := ptenants[1];
                IF nxt IS NULL AND supply IS NOT NULL AND after < solo THEN
                    nxt := solo;  -- its turn takes from the supply
                    firsts := NULL;
                    SELECT coalesce((SELECT t.weight FROM {schema}.tenants t WHERE t.tenant = nxt), 1),
                        limited_solo
                    INTO w, limited;
                ELSIF nxt IS NULL THEN
                    firsts := NULL;
                ELSE
                    -- The probe's rows come in tenant order: the first tenant's are a prefix.
                    k := 1;
                    WHILE k < cardinality(ptenants) AND ptenants[k + 1] = nxt LOOP
                        k := k + 1;
                    END LOOP;
                    firsts := firsts[1:k];
                    SELECT coalesce((SELECT t.weight FROM {schema}.tenants t WHERE t.tenant = nxt), 1),
                        EXISTS (SELECT 1 FROM {schema}.rate_limits l WHERE l.key = 'tenant:' || nxt)
                    INTO w, limited;
                END IF;
                IF nxt IS NULL AND NOT untenanted THEN
                    nxt := ' ';  -- the jobs without a tenant: their turn closes the round
                    w := 1;
                    limited := false;
                    untenanted := true;
                    after := '';
                ELSIF nxt IS NULL
                    OR (untenanted AND cur IS NOT NULL AND (nxt > cur OR (nxt = cur AND going))) THEN
                    nxt := NULL;     -- the walk is round
                END IF;
            END IF;
            IF nxt IS NULL THEN
                -- 2. The further rounds.
                walking := false;
                base := 1;
                i := n + 1;
                m := 0;
                CONTINUE;
            END IF;
            IF nxt <> ' ' THEN
                after := nxt;
            END IF;
            room := NULL;
            has_rate := false;
            IF limited THEN
                SELECT l.* INTO lim FROM {schema}.rate_limits l
                WHERE l.key = 'tenant:' || nxt AND (l.max_active > 0 OR (l.rate > 0 AND l.period_us > 0))
                FOR UPDATE;
                IF FOUND THEN
                    IF lim.max_active > 0 THEN
                        SELECT lim.max_active - count(*) INTO room FROM {schema}.jobs
                        WHERE tenant = nxt AND state = 'active';
                    END IF;
                    IF lim.rate > 0 AND lim.period_us > 0 THEN
                        has_rate := true;
                        room := least(room, lim.rate - CASE
                            WHEN lim.window_start + lim.period_us * interval '1 microsecond' > now() THEN lim.window_count
                            ELSE 0 END);
                    END IF;
                END IF;
            END IF;
            -- The walk comes round after this turn: the jobs without a tenant were served last and
            -- this is their turn, or the cursor's tenant starts a new turn.
            last_walk := (nxt = ' ' AND cur IS NULL) OR (nxt <> ' ' AND untenanted AND nxt = cur);
            IF room IS NOT NULL AND room <= 0 THEN
                IF last_walk THEN
                    walking := false;
                    base := 1;
                    i := n + 1;
                    m := 0;
                END IF;
                CONTINUE;
            END IF;
            n := n + 1;
            parts := parts || nxt;
            weights := weights || w;
            rooms := rooms || room;
            rated := rated || has_rate;
            i := n;
            want := w - off;
            IF last_walk AND NOT (true = ANY (alive)) THEN
                -- The walk's last turn, and no one else is left in play: the further rounds would
                -- all be this participant's, so it takes them now.
                want := remaining;
            END IF;
            alive := alive || true;
        ELSE
            i := i + 1;
            IF i > n THEN
                base := base + m;
                SELECT coalesce(sum(x.w), 0) INTO total_w FROM unnest(weights, alive) AS x(w, a) WHERE x.a;
                EXIT WHEN total_w = 0;
                m := greatest(1, remaining / total_w);
                i := 1;
            END IF;
            CONTINUE WHEN NOT alive[i];
            want := m * weights[i];
        END IF;

        -- A turn: participant i takes up to want jobs.
        want := least(want, remaining);
        IF rooms[i] IS NOT NULL THEN
            want := least(want, rooms[i]);
        END IF;
        got := '{}';
        IF firsts IS NOT NULL THEN
            got := firsts[1:want];  -- taken by the walk's probe
        END IF;
        IF supply IS NOT NULL AND parts[i] = solo THEN
            got := supply[sp + 1 : sp + want];
            sp := sp + cardinality(got);
        ELSIF want - cardinality(got) <= 0 OR (skip_tl AND parts[i] = ' ') THEN
            NULL;
        ELSIF parts[i] = ' ' THEN
            SELECT array_agg(s.id ORDER BY s.priority DESC, s.scheduled_at, s.id) INTO more FROM (
                SELECT j.id, j.tenant, j.rate_key, j.priority, j.scheduled_at FROM {schema}.jobs j
                WHERE j.queue = p_queue
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    AND j.id <> ALL (chosen || got)
                ORDER BY j.priority DESC, j.scheduled_at, j.id
                LIMIT 64
            ) s
            WHERE s.tenant IS NULL AND s.rate_key IS NULL;
            locked := '{}';
            FOREACH gid IN ARRAY coalesce(more[1:want - cardinality(got)], '{}') LOOP
                -- The job is locked only while still claimable: the list above was read in a
                -- snapshot, and a concurrent claim may have taken the job since (migration 015
                -- locked it whatever its state, and so could hand out a job already claimed).
                PERFORM 1 FROM {schema}.jobs j
                WHERE j.id = gid AND j.tenant IS NULL AND j.rate_key IS NULL
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                FOR UPDATE SKIP LOCKED;
                IF FOUND THEN
                    locked := locked || gid;
                END IF;
            END LOOP;
            got := got || locked;
        ELSE
            SELECT array_agg(s.id ORDER BY s.priority DESC, s.scheduled_at, s.id) INTO more FROM (
                SELECT j.id, j.priority, j.scheduled_at FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.tenant = parts[i] AND j.rate_key IS NULL
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at <= now()
                    AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                    AND j.id <> ALL (chosen || got)
                ORDER BY j.priority DESC, j.scheduled_at, j.id
                LIMIT want - cardinality(got)
                FOR UPDATE SKIP LOCKED
            ) s;
            got := got || coalesce(more, '{}');
        END IF;
        k := cardinality(got);
        IF k > 0 THEN
            chosen := chosen || got;
            ranks := ranks || ARRAY(SELECT (base + (o - 1 + off) / weights[i])::bigint * stride + i
                                    FROM generate_series(1, k) AS o);
            rk := (base + (k - 1 + off) / weights[i])::bigint * stride + i;
            IF rk > best_rank THEN
                best_rank := rk;
                last_part := i;
                last_used := (k - 1 + off) % weights[i] + 1;
            END IF;
            remaining := remaining - k;
            IF rooms[i] IS NOT NULL THEN
                rooms[i] := rooms[i] - k;
            END IF;
            IF rated[i] THEN
                UPDATE {schema}.rate_limits l
                SET window_start = CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now()
                        THEN l.window_start ELSE now() END,
                    window_count = CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now()
                        THEN l.window_count + k ELSE k END
                WHERE l.key = 'tenant:' || parts[i];
            END IF;
        END IF;
        IF k < want OR rooms[i] <= 0 THEN
            alive[i] := false;
        END IF;
        IF walking AND last_walk THEN
            -- 2. The further rounds start after this turn.
            walking := false;
            base := 1;
            i := n + 1;
            m := 0;
        END IF;
    END LOOP;

    -- 3. The cursor.
    IF last_part IS NOT NULL THEN
        UPDATE {schema}.tenant_cursors
        SET tenant = nullif(parts[last_part], ' '), used = last_used
        WHERE queue = p_queue AND (tenant IS DISTINCT FROM nullif(parts[last_part], ' ') OR used <> last_used);
    END IF;
    RETURN QUERY SELECT u.id FROM unnest(chosen, ranks) AS u(id, r) ORDER BY u.r;
END
$$;

DROP FUNCTION {schema}.fair_take(text, text, text[], uuid[], integer);
DROP FUNCTION {schema}.fair_next_tenant(text, text[], text, text, OUT text, OUT uuid);
