-- Back to migration 027: the random half of the tokens from gen_random_uuid().
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
        || right(replace(gen_random_uuid()::text, '-', ''), 16))::uuid, gen_random_uuid())
    WHERE j.id = ANY (coalesce(chosen, '{}'))
    RETURNING j.*;
    IF held IS NOT NULL THEN
        RETURN QUERY SELECT j.* FROM {schema}.jobs j WHERE j.id = ANY (held);
    END IF;
END
$$;
