-- Puts back the due-time test on the row's state in claim_fair_pick and claim_limited_untokened
-- (every j.scheduled_at <= now() in them is one that migration 029 wrote).
DO $migration$
DECLARE
    f   regprocedure;
    def text;
BEGIN
    FOREACH f IN ARRAY ARRAY['{schema}.claim_fair_pick(text, text[], integer)'::regprocedure,
        '{schema}.claim_limited_untokened(text, text[], integer, bigint, text)'::regprocedure] LOOP
        def := pg_get_functiondef(f);
        EXECUTE replace(def, $t$j.scheduled_at <= now()$t$,
            $t$(CASE WHEN j.state = 'available' THEN true ELSE j.scheduled_at <= now() END)$t$);
    END LOOP;
END
$migration$;
