-- A rate-limited claim tags its claim tokens as the other claims do (store/postgres/lostclaim.go):
-- the first 16 hex digits of each token are the claim's tag, left by the claim in the transaction's
-- pronto.claim_tag, and the rest random; without a tag (a process that predates it) the token is a
-- fresh random UUID, as before. A claim whose reply is lost finds its jobs by the tag and returns
-- them with their attempts refunded, instead of leaving them to the rescue.
-- older binaries: compatible, they set no tag and get random tokens as before
--
-- claim_limited_held as migration 022 made it otherwise; signature unchanged.
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
