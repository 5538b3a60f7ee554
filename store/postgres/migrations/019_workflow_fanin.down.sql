-- Back to migration 018: workflow_advance as migration 005 made it.
CREATE OR REPLACE FUNCTION {schema}.workflow_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    finished  uuid[] := ARRAY[NEW.id];
    cancelled uuid[];
    child     record;
    parents   record;
BEGIN
    IF current_setting('pronto.workflow_advancing', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('pronto.workflow_advancing', 'on', true);
    WHILE cardinality(finished) > 0 LOOP
        cancelled := '{}';
        FOR child IN
            SELECT id, queue, run_on, parent_ids FROM {schema}.jobs
            WHERE state = 'pending' AND parent_ids IS NOT NULL AND parent_ids && finished
            ORDER BY id
            FOR UPDATE
        LOOP
            -- A parent that no longer exists (deleted by hand) counts as not finished.
            SELECT coalesce(bool_and(coalesce(p.state = 'completed', false)), false) AS all_completed,
                   coalesce(bool_and(coalesce(p.state IN ('completed', 'cancelled', 'discarded'), false)), false) AS all_terminal,
                   coalesce(bool_or(coalesce(p.state IN ('cancelled', 'discarded'), false)), false) AS any_failed
            INTO parents
            FROM unnest(child.parent_ids) AS u(id)
            LEFT JOIN {schema}.jobs p ON p.id = u.id;

            IF (coalesce(child.run_on, 'success') = 'success' AND parents.any_failed)
                OR (child.run_on = 'failure' AND parents.all_completed) THEN
                UPDATE {schema}.jobs SET state = 'cancelled', completed_at = now() WHERE id = child.id;
                cancelled := cancelled || child.id;
            ELSIF (coalesce(child.run_on, 'success') = 'success' AND parents.all_completed)
                OR (child.run_on IN ('failure', 'complete') AND parents.all_terminal) THEN
                UPDATE {schema}.jobs
                SET state = 'available', scheduled_at = now(),
                    parent_results = (
                        SELECT jsonb_agg(p.result ORDER BY u.ord)
                        FROM unnest(child.parent_ids) WITH ORDINALITY AS u(id, ord)
                        LEFT JOIN {schema}.jobs p ON p.id = u.id)
                WHERE id = child.id;
                PERFORM pg_notify({channel}, '{"k":"i","q":' || to_json(child.queue)::text || ',"d":0}');
            END IF;
        END LOOP;
        finished := cancelled;
    END LOOP;
    PERFORM set_config('pronto.workflow_advancing', 'off', true);
    RETURN NULL;
END
$$;
