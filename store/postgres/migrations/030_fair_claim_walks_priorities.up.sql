-- claim_fair_pick walks priorities where it looked for due jobs with one scan in claim order: the
-- step-0 probe, the look for a job without a tenant among the first 64, that turn's jobs, and each
-- tenant's turn walk the queue's (or the tenant's) priorities from the highest, taking each one's
-- due jobs from the front of its range (the plain claim's walk, store/postgres/queries.go,
-- claimHead). Within one priority the index holds the jobs due now before those due later, so each
-- range scan stops at the first job not yet due; the single scan passed over the entries of every
-- job due later whenever it found fewer jobs than it wanted (a tenant with 100,000 retries waiting:
-- 2,300 buffers and 43 ms a fair claim). The walk over tenants (the next participant, and whether
-- another tenant than step 0's has a job due) takes the next tenant with a claimable job (one seek
-- of jobs_tenant_claim_idx) and asks whether it has one due (its first entry, else a walk of its
-- priorities) before taking it, so a tenant whose jobs are all due later costs a few seeks, not a
-- pass over its entries. After 8 such tenants in a row the walk goes back to one ordered scan from
-- there: many tenants with a few jobs due later each cost no more than before.
-- The jobs a claim takes, and their order, are unchanged.
-- older binaries: compatible, claim_fair_pick's signature and what it returns are unchanged; the
-- two functions added are its own

-- fair_take locks up to p_limit of tenant p_tenant's claimable jobs due now in queue p_queue (kinds
-- p_kinds, NULL for any; none of p_not) and returns them in claim order, walking the tenant's
-- priorities in jobs_tenant_claim_idx. The outer LIMIT pulls from the walk lazily: a priority's
-- range is scanned only when the ones above it ran out.
CREATE FUNCTION {schema}.fair_take(p_queue text, p_tenant text, p_kinds text[], p_not uuid[], p_limit integer)
RETURNS uuid[]
LANGUAGE plpgsql AS $$
DECLARE
    got uuid[];
BEGIN
    WITH RECURSIVE prios AS (
        (SELECT j.priority FROM {schema}.jobs j
        WHERE j.queue = p_queue AND j.tenant = p_tenant AND j.rate_key IS NULL
            AND j.state IN ('available', 'scheduled', 'retryable')
        ORDER BY j.priority DESC LIMIT 1)
        UNION ALL
        SELECT (SELECT j.priority FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant = p_tenant AND j.rate_key IS NULL
                AND j.state IN ('available', 'scheduled', 'retryable') AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
        FROM prios p WHERE p.priority IS NOT NULL
    ), taken AS (
        SELECT c.id, c.priority, c.scheduled_at FROM prios p CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.scheduled_at FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant = p_tenant AND j.rate_key IS NULL
                AND j.priority = p.priority
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.scheduled_at <= now()
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                AND j.id <> ALL (p_not)
            ORDER BY j.scheduled_at, j.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED) c
        WHERE p.priority IS NOT NULL
        LIMIT p_limit
    )
    SELECT array_agg(t.id ORDER BY t.priority DESC, t.scheduled_at, t.id) INTO got FROM taken t;
    RETURN coalesce(got, '{}');
END
$$;

-- fair_next_tenant returns the first tenant after p_after (and before p_before, unless NULL) in
-- queue p_queue with a claimable job due now (kinds p_kinds, NULL for any), or NULL, and that
-- job's id when it is the tenant's first in claim order (the common case: a caller locks it by its
-- id, not by a walk). It locks nothing. Each tenant costs one seek of jobs_tenant_claim_idx, and, when its first job is not due
-- or not of p_kinds, a walk of its priorities for one; after 8 tenants without a job due it makes
-- one ordered scan from there, as claim_fair_pick did before this migration, so that many tenants
-- with a few jobs due later each cost no more than before.
CREATE FUNCTION {schema}.fair_next_tenant(p_queue text, p_kinds text[], p_after text, p_before text,
    OUT next_tenant text, OUT first_id uuid)
LANGUAGE plpgsql AS $$
DECLARE
    t     text;
    tid   uuid;
    ok    boolean;
    seeks integer := 0;
BEGIN
    LOOP
        IF seeks >= 8 AND p_before IS NULL THEN
            SELECT j.tenant INTO t FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.tenant > p_after
                AND j.scheduled_at <= now()
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
            LIMIT 1;
            next_tenant := t;
            RETURN;
        ELSIF seeks >= 8 THEN
            SELECT j.tenant INTO t FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.tenant > p_after AND j.tenant < p_before
                AND j.scheduled_at <= now()
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
            LIMIT 1;
            next_tenant := t;
            RETURN;
        END IF;
        -- The next tenant and whether its first job is one to take. p_before bounds the seek (and
        -- the scan above) in the index: a filter would pass over p_before's range, whose front
        -- holds the entries of the jobs claimed since the last vacuum.
        IF p_before IS NULL THEN
            SELECT j.tenant, j.id, j.scheduled_at <= now() AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            INTO t, tid, ok FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.tenant > p_after
            ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
            LIMIT 1;
        ELSE
            SELECT j.tenant, j.id, j.scheduled_at <= now() AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            INTO t, tid, ok FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.tenant > p_after AND j.tenant < p_before
            ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
            LIMIT 1;
        END IF;
        IF t IS NULL THEN
            RETURN;
        END IF;
        IF ok THEN
            next_tenant := t;
            first_id := tid;
            RETURN;
        END IF;
        WITH RECURSIVE prios AS (
            (SELECT j.priority FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant = t AND j.rate_key IS NULL
                AND j.state IN ('available', 'scheduled', 'retryable')
            ORDER BY j.priority DESC LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.tenant = t AND j.rate_key IS NULL
                    AND j.state IN ('available', 'scheduled', 'retryable') AND j.priority < p.priority
                ORDER BY j.priority DESC LIMIT 1)
            FROM prios p WHERE p.priority IS NOT NULL
        )
        SELECT EXISTS (SELECT 1 FROM prios p CROSS JOIN LATERAL (
            SELECT 1 FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.tenant = t AND j.rate_key IS NULL
                AND j.priority = p.priority
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.scheduled_at <= now()
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            ORDER BY j.scheduled_at, j.id
            LIMIT 1) c
            WHERE p.priority IS NOT NULL)
        INTO ok;
        IF ok THEN
            next_tenant := t;
            RETURN;
        END IF;
        p_after := t;
        seeks := seeks + 1;
    END LOOP;
END
$$;

-- claim_fair_pick as migrations 026 and 029 left it, its probes as above.
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
    probe_after text;             -- where the walk's probe looks on from
    due_first  boolean;           -- the first job of the tenant it found is one to take
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

    -- 0. One participant alone. The probe is the plain claim's (jobs_claim_idx, claim order, a
    -- walk of the queue's priorities, the only pass over the front of each one's index range,
    -- where the entries of the jobs claimed since the last vacuum lie); the checks that follow are
    -- seeks that pass over none of them.
    WITH RECURSIVE qprios AS (
        (SELECT j.priority FROM {schema}.jobs j
        WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
        ORDER BY j.priority DESC LIMIT 1)
        UNION ALL
        SELECT (SELECT j.priority FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
        FROM qprios p WHERE p.priority IS NOT NULL
    ), x AS (
        SELECT c.* FROM qprios p CROSS JOIN LATERAL (
            SELECT j.id, j.tenant, j.priority, j.scheduled_at FROM {schema}.jobs j
            WHERE j.queue = p_queue AND j.priority = p.priority
                AND j.state IN ('available', 'scheduled', 'retryable')
                AND j.scheduled_at <= now()
                AND (j.expires_at IS NULL OR j.expires_at > now())
                AND j.rate_key IS NULL
                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
            ORDER BY j.scheduled_at, j.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED) c
        WHERE p.priority IS NOT NULL
        LIMIT p_limit
    )
    -- The aggregates read the locked rows in claim order, as the walk returns them.
    SELECT array_agg(x.id), min(x.tenant), max(x.tenant), bool_and(x.tenant IS NOT NULL),
        array_agg(x.priority), array_agg(x.scheduled_at)
    INTO solo_ids, solo, solo_max, alone, prios, ats
    FROM x;
    k := coalesce(cardinality(solo_ids), 0);
    IF k > 0 AND alone AND solo = solo_max THEN
        -- No other tenant has a claimable job due (a seek on each side of solo's range of
        -- jobs_tenant_claim_idx; fair_next_tenant when the first job found is not one to take),
        -- solo has no stored limit, and no job without a tenant follows
        -- within the first 64 in claim order (a seek past the last job locked, then a walk of the
        -- lower priorities).
        SELECT EXISTS (SELECT 1 FROM {schema}.rate_limits l WHERE l.key = 'tenant:' || solo),
            EXISTS (SELECT 1 FROM (
                SELECT j.scheduled_at <= now() AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds)) AS ok
                FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.tenant < solo
                ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
                LIMIT 1) f
                WHERE f.ok OR ({schema}.fair_next_tenant(p_queue, p_kinds, '', solo)).next_tenant IS NOT NULL)
            OR EXISTS (SELECT 1 FROM (
                SELECT j.scheduled_at <= now() AND (j.expires_at IS NULL OR j.expires_at > now())
                    AND (p_kinds IS NULL OR j.kind = ANY (p_kinds)) AS ok
                FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                    AND j.state IN ('available', 'scheduled', 'retryable')
                    AND j.tenant > solo
                ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
                LIMIT 1) f
                WHERE f.ok OR ({schema}.fair_next_tenant(p_queue, p_kinds, solo, NULL)).next_tenant IS NOT NULL),
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
                    (WITH RECURSIVE lprios AS (
                        (SELECT j.priority FROM {schema}.jobs j
                        WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
                            AND j.priority < prios[k]
                        ORDER BY j.priority DESC LIMIT 1)
                        UNION ALL
                        SELECT (SELECT j.priority FROM {schema}.jobs j
                            WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
                                AND j.priority < p.priority
                            ORDER BY j.priority DESC LIMIT 1)
                        FROM lprios p WHERE p.priority IS NOT NULL
                    )
                    SELECT c.tenant FROM lprios p CROSS JOIN LATERAL (
                        SELECT j.tenant FROM {schema}.jobs j
                        WHERE j.queue = p_queue AND j.priority = p.priority
                            AND j.state IN ('available', 'scheduled', 'retryable')
                            AND j.scheduled_at <= now()
                            AND (j.expires_at IS NULL OR j.expires_at > now())
                            AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                        ORDER BY j.scheduled_at, j.id
                        LIMIT 64 - k) c
                    WHERE p.priority IS NOT NULL
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
                -- wants of that tenant.
                probe := CASE WHEN untenanted AND cur IS NOT NULL AND NOT (true = ANY (alive)) THEN remaining ELSE 1 END;
                -- The next tenant with a job due (before solo's range when solo's supply stands for
                -- its first jobs), whose first jobs the probe locks; a tenant whose due jobs
                -- concurrent claims hold is passed over. Its weight and whether a limit is stored
                -- for it are looked up once, not per job.
                probe_after := after;
                LOOP
                    -- The next tenant's first job (a seek), and fair_next_tenant when that one is
                    -- not one to take.
                    IF supply IS NOT NULL AND after < solo THEN
                        SELECT j.tenant, j.id, j.scheduled_at <= now() AND (j.expires_at IS NULL OR j.expires_at > now())
                                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                        INTO nxt, gid, due_first FROM {schema}.jobs j
                        WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                            AND j.state IN ('available', 'scheduled', 'retryable')
                            -- ORDER BY with priority: the order of jobs_tenant_claim_idx, which
                            -- jobs_tenant_state_idx cannot give, so the probe seeks past after in it.
                            AND j.tenant > probe_after AND j.tenant < solo
                        ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
                        LIMIT 1;
                    ELSE
                        SELECT j.tenant, j.id, j.scheduled_at <= now() AND (j.expires_at IS NULL OR j.expires_at > now())
                                AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                        INTO nxt, gid, due_first FROM {schema}.jobs j
                        WHERE j.queue = p_queue AND j.tenant IS NOT NULL AND j.rate_key IS NULL
                            AND j.state IN ('available', 'scheduled', 'retryable')
                            AND j.tenant > probe_after
                        ORDER BY j.tenant, j.priority DESC, j.scheduled_at, j.id
                        LIMIT 1;
                    END IF;
                    EXIT WHEN nxt IS NULL;
                    IF NOT due_first THEN
                        SELECT f.next_tenant, f.first_id INTO nxt, gid
                        FROM {schema}.fair_next_tenant(p_queue, p_kinds, probe_after,
                            CASE WHEN supply IS NOT NULL AND after < solo THEN solo END) f;
                        EXIT WHEN nxt IS NULL;
                    END IF;
                    firsts := '{}';
                    IF probe = 1 AND gid IS NOT NULL THEN
                        -- Its first job in claim order, by id (the conditions are tested again on
                        -- the row as locked).
                        SELECT array_agg(j.id) INTO firsts FROM (
                            SELECT j.id FROM {schema}.jobs j
                            WHERE j.id = gid AND j.tenant = nxt AND j.rate_key IS NULL
                                AND j.state IN ('available', 'scheduled', 'retryable')
                                AND j.scheduled_at <= now()
                                AND (j.expires_at IS NULL OR j.expires_at > now())
                            FOR UPDATE SKIP LOCKED) j;
                    END IF;
                    IF coalesce(cardinality(firsts), 0) = 0 THEN
                        firsts := {schema}.fair_take(p_queue, nxt, p_kinds, chosen, probe);
                    END IF;
                    EXIT WHEN cardinality(firsts) > 0;
                    probe_after := nxt;
                END LOOP;
                IF nxt IS NULL AND supply IS NOT NULL AND after < solo THEN
                    nxt := solo;  -- its turn takes from the supply
                    firsts := NULL;
                    SELECT coalesce((SELECT t.weight FROM {schema}.tenants t WHERE t.tenant = nxt), 1),
                        limited_solo
                    INTO w, limited;
                ELSIF nxt IS NULL THEN
                    firsts := NULL;
                ELSE
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
            -- The first 64 jobs due in claim order, walking the queue's priorities.
            WITH RECURSIVE qprios AS (
                (SELECT j.priority FROM {schema}.jobs j
                WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
                ORDER BY j.priority DESC LIMIT 1)
                UNION ALL
                SELECT (SELECT j.priority FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.priority < p.priority
                    ORDER BY j.priority DESC LIMIT 1)
                FROM qprios p WHERE p.priority IS NOT NULL
            ), s AS (
                SELECT c.* FROM qprios p CROSS JOIN LATERAL (
                    SELECT j.id, j.tenant, j.rate_key, j.priority, j.scheduled_at FROM {schema}.jobs j
                    WHERE j.queue = p_queue AND j.priority = p.priority
                        AND j.state IN ('available', 'scheduled', 'retryable')
                        AND j.scheduled_at <= now()
                        AND (j.expires_at IS NULL OR j.expires_at > now())
                        AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                        AND j.id <> ALL (chosen || got)
                    ORDER BY j.scheduled_at, j.id
                    LIMIT 64) c
                WHERE p.priority IS NOT NULL
                LIMIT 64
            )
            SELECT array_agg(s.id ORDER BY s.priority DESC, s.scheduled_at, s.id) INTO more FROM s
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
            got := got || {schema}.fair_take(p_queue, parts[i], p_kinds, chosen || got, want - cardinality(got));
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
