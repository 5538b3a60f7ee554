-- Back to migration 032: claim_limited_held writes the claimed jobs' tokens in an update of its own.
DO $migration$
DECLARE
    f   regprocedure := '{schema}.claim_limited_untokened(text, text[], integer, bigint, text)'::regprocedure;
    def text;
    out text;
BEGIN
    def := pg_get_functiondef(f);
    out := replace(def, $t$    SET state = 'active', attempt = j.attempt + 1, started_at = now(),
        claim_token = coalesce((nullif(current_setting('pronto.claim_tag', true), '')
            || lpad(to_hex((floor(random() * 4294967296)::bigint << 32) | floor(random() * 4294967296)::bigint),
                16, '0'))::uuid, gen_random_uuid()),$t$, $t$    SET state = 'active', attempt = j.attempt + 1, started_at = now(),$t$);
    IF out = def THEN
        RAISE EXCEPTION 'migration 033 down: % holds no part to replace', f;
    END IF;
    EXECUTE out;
END
$migration$;

CREATE OR REPLACE FUNCTION {schema}.claim_limited_held(p_queue text, p_kinds text[], p_limit integer,
                                                       p_lease_us bigint, p_worker text)
RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql AS $$
DECLARE
    chosen uuid[];
    held   uuid[];
BEGIN
    SELECT array_agg(c.id) FILTER (WHERE c.state = 'active'),
        array_agg(c.id) FILTER (WHERE c.state <> 'active')
    INTO chosen, held
    FROM {schema}.claim_limited_untokened(p_queue, p_kinds, p_limit, p_lease_us, p_worker) c;
    RETURN QUERY
    UPDATE {schema}.jobs j
    SET claim_token = coalesce((nullif(current_setting('pronto.claim_tag', true), '')
        || lpad(to_hex((floor(random() * 4294967296)::bigint << 32) | floor(random() * 4294967296)::bigint),
            16, '0'))::uuid, gen_random_uuid())
    WHERE j.id = ANY (coalesce(chosen, '{}'))
    RETURNING j.*;
    IF held IS NOT NULL THEN
        RETURN QUERY SELECT j.* FROM {schema}.jobs j WHERE j.id = ANY (held);
    END IF;
END
$$;
