-- Back to migration 019: unique_key_taken as migration 005 made it.
CREATE OR REPLACE FUNCTION {schema}.unique_key_taken(p_id uuid, p_key text, p_rivals uuid[], p_targets text[],
                                          p_target text)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM {schema}.jobs o
                   WHERE o.unique_key = p_key AND o.state = ANY (o.unique_states) AND o.id <> p_id)
        OR EXISTS (SELECT 1 FROM unnest(p_rivals, p_targets) AS x(id, target)
                   JOIN {schema}.jobs o ON o.id = x.id
                   WHERE o.id < p_id AND o.unique_key = p_key
                       AND (coalesce(x.target, p_target) = ANY (o.unique_states)) IS TRUE
                       AND (o.state = ANY (o.unique_states)) IS NOT TRUE);
END
$$;
