-- A rate-limited claim writes its jobs' claim tokens in the update that claims them: the claim's
-- tag and the random half from random(), as claim_limited_held wrote them (migration 028), which now
-- returns claim_limited_untokened's rows as they come (the claimed jobs, then those held back)
-- instead of updating the claimed jobs a second time. That second update wrote each claimed job's
-- row again: about a fifth of a claim of 100 jobs of one key (1.2 of 5.5 ms). The function keeps
-- its name, which no longer says what it does, so that older binaries find what they call.
-- older binaries: compatible, the functions' signatures and what they return are unchanged
-- (claim_limited, which no binary of these migrations calls, still writes tokens of its own).
DO $migration$
DECLARE
    f   regprocedure := '{schema}.claim_limited_untokened(text, text[], integer, bigint, text)'::regprocedure;
    def text;
    out text;
BEGIN
    def := pg_get_functiondef(f);
    out := replace(def, $t$    SET state = 'active', attempt = j.attempt + 1, started_at = now(),$t$, $t$    SET state = 'active', attempt = j.attempt + 1, started_at = now(),
        claim_token = coalesce((nullif(current_setting('pronto.claim_tag', true), '')
            || lpad(to_hex((floor(random() * 4294967296)::bigint << 32) | floor(random() * 4294967296)::bigint),
                16, '0'))::uuid, gen_random_uuid()),$t$);
    IF out = def THEN
        RAISE EXCEPTION 'migration 033: % holds no part to replace', f;
    END IF;
    EXECUTE out;
END
$migration$;

CREATE OR REPLACE FUNCTION {schema}.claim_limited_held(p_queue text, p_kinds text[], p_limit integer,
                                                       p_lease_us bigint, p_worker text)
RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY SELECT * FROM {schema}.claim_limited_untokened(p_queue, p_kinds, p_limit, p_lease_us, p_worker);
END
$$;
