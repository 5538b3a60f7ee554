-- unique_key_taken no longer counts a holder whose period ran out: such a holder holds nothing (an
-- insert meeting it takes the key), so a job entering its unique states (a finish returning it to
-- available, a promotion, a rescue) keeps its key. The lapsed holder still sits in jobs_unique_idx,
-- so the function clears its key first, as an insert meeting it does (sqlUniqueRelease): writing,
-- the function is VOLATILE (it clears only the holders it can lock at once, never waiting), and its queries see the rows its statement wrote before (a job of the
-- statement that entered with the key already holds it) and what other transactions committed
-- since the statement began.
--
-- A lapsed holder among p_rivals (a job the statement itself writes) is left alone, since one
-- statement must not change a row twice, and still counts as holding, as before. p_rivals NULL means
-- the statement writes p_id alone.
CREATE OR REPLACE FUNCTION {schema}.unique_key_taken(p_id uuid, p_key text, p_rivals uuid[], p_targets text[],
                                                     p_target text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- Only the lapsed holders it can lock at once: waiting here, in the order the statement's rows
    -- come, would let two claims (or a claim and a finish) deadlock over two keys' holders. A holder
    -- locked elsewhere still counts as holding, and the entering job gives its key up, as before.
    UPDATE {schema}.jobs o SET unique_key = NULL
    WHERE o.id IN (SELECT l.id FROM {schema}.jobs l
                   WHERE l.unique_key = p_key AND l.state = ANY (l.unique_states) AND l.id <> p_id
                       AND l.unique_until <= now()
                       AND (p_rivals IS NULL OR l.id <> ALL (p_rivals))
                   FOR UPDATE SKIP LOCKED);
    RETURN EXISTS (SELECT 1 FROM {schema}.jobs o
                   WHERE o.unique_key = p_key AND o.state = ANY (o.unique_states) AND o.id <> p_id)
        OR EXISTS (SELECT 1 FROM unnest(p_rivals, p_targets) AS x(id, target)
                   JOIN {schema}.jobs o ON o.id = x.id
                   WHERE o.id < p_id AND o.unique_key = p_key
                       AND (coalesce(x.target, p_target) = ANY (o.unique_states)) IS TRUE
                       AND (o.state = ANY (o.unique_states)) IS NOT TRUE);
END
$$;
