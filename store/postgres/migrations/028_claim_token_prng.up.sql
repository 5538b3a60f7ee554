-- The random half of a rate-limited claim's tokens comes from random(), the backend's generator,
-- as the other claims' does (store/postgres/queries.go, taggedClaimToken): gen_random_uuid() asks
-- OpenSSL for fresh bytes at every call, which cost the database 2.3 µs a claimed job. The claim's
-- tag, from the client's crypto/rand, still sets its tokens apart from every other claim's.
-- older binaries: compatible, the function's signature and what it returns are unchanged
--
-- claim_limited_held as migration 027 made it otherwise.
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
