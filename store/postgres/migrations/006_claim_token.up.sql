-- claim_token: a random value each claim writes on the job it makes active. Outcomes and heartbeats
-- name it, so a run that lost its lease can never decide the job once it was claimed again: not by
-- the same worker under a new attempt, and not after a database crash rolled a claim back (claims
-- commit without waiting for their WAL flush) and the job was claimed again under the same attempt
-- number. Meaningful only while the job is active.
ALTER TABLE {schema}.jobs ADD COLUMN claim_token uuid;

-- claim_limited (migration 005) claims rate-limited jobs; its claims get their tokens here, in the
-- same transaction, through a wrapper with the same signature.
ALTER FUNCTION {schema}.claim_limited(text, text[], integer, bigint, text) RENAME TO claim_limited_untokened;

CREATE FUNCTION {schema}.claim_limited(p_queue text, p_kinds text[], p_limit integer,
                                       p_lease_us bigint, p_worker text)
RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql AS $$
DECLARE
    chosen uuid[];
BEGIN
    SELECT array_agg(c.id) INTO chosen
    FROM {schema}.claim_limited_untokened(p_queue, p_kinds, p_limit, p_lease_us, p_worker) c;
    RETURN QUERY
    UPDATE {schema}.jobs j SET claim_token = gen_random_uuid()
    WHERE j.id = ANY (coalesce(chosen, '{}'))
    RETURNING j.*;
END
$$;
