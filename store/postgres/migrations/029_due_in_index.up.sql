-- The fair and rate-limited claims test a job's due time in the index, as the plain claim does since
-- this release (store/postgres/queries.go, sqlClaim): scheduled_at <= now() for every state, in
-- place of a CASE on the row's state, which made each probe of claim_fair_pick and
-- claim_limited_untokened read the row of every job due later that its index range held (a tenant
-- or a rate key with many retries waiting). An available job's scheduled_at is never later than the
-- statement that made it available, so the jobs they take are the same.
-- older binaries: compatible, the functions' signatures and what they return are unchanged
--
-- The two functions are rewritten from their definitions as migrations 025 and 026 left them, with
-- that one test replaced (14 places); the migration fails if it finds none in either.
DO $migration$
DECLARE
    f   regprocedure;
    def text;
    out text;
BEGIN
    FOREACH f IN ARRAY ARRAY['{schema}.claim_fair_pick(text, text[], integer)'::regprocedure,
        '{schema}.claim_limited_untokened(text, text[], integer, bigint, text)'::regprocedure] LOOP
        def := pg_get_functiondef(f);
        out := replace(def, $t$(CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)$t$,
            $t$j.scheduled_at <= now()$t$);
        IF out = def THEN
            RAISE EXCEPTION 'migration 029: % holds no due-time test to replace', f;
        END IF;
        EXECUTE out;
    END LOOP;
END
$migration$;
