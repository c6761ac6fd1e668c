-- Child workflows: a node of kind 'workflow' starts a run of its own, linked back to the node.
-- The parent node waits ('waiting', migration 0035) while the child runs. Both directions are
-- triggers, so every way a run or a node ends (the drain, cancel_run, a watchdog, plain SQL) keeps
-- the pair consistent in the transaction that ended it, and the outbox event follows as usual.
ALTER TABLE workflow_runs
    ADD COLUMN parent_run_id bigint REFERENCES workflow_runs (id) ON DELETE CASCADE,
    ADD COLUMN parent_node   text,
    ADD COLUMN depth         integer NOT NULL DEFAULT 0 CHECK (depth >= 0),
    ADD CONSTRAINT workflow_runs_parent_pair CHECK ((parent_run_id IS NULL) = (parent_node IS NULL));
-- One child per parent node: a restart resumes the same child run instead of starting another.
CREATE UNIQUE INDEX workflow_runs_parent_node_key ON workflow_runs (parent_run_id, parent_node)
    WHERE parent_run_id IS NOT NULL;

-- A child run's output: the outputs of its completed sink nodes (no node depends on them), keyed by node id.
CREATE FUNCTION qw_child_output(child_id bigint, child_definition jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_object_agg(j.node_name, coalesce(j.context_delta, '{}'::jsonb)), '{}'::jsonb)
      FROM workflow_node_jobs j
     WHERE j.run_id = child_id AND j.status = 'completed'
       AND NOT EXISTS (SELECT 1
                         FROM jsonb_array_elements(child_definition -> 'nodes') n,
                              jsonb_array_elements_text(coalesce(n -> 'deps', '[]'::jsonb)) d
                        WHERE d = j.node_name)
$$;

-- The child ended: its parent node ends with it (completed with its output, or failed with its
-- error: a failed child's first failed node's, which names the cause however deep it lies).
CREATE FUNCTION qw_child_run_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    cause text;
BEGIN
    IF NEW.status = 'completed' THEN
        UPDATE workflow_node_jobs
           SET status = 'completed', context_delta = qw_child_output(NEW.id, NEW.definition), error = NULL,
               finished_at = now(), updated_at = now()
         WHERE run_id = NEW.parent_run_id AND node_name = NEW.parent_node AND status = 'waiting';
    ELSE
        IF NEW.status = 'failed' THEN
            SELECT format('node %L failed: %s', node_name, error) INTO cause FROM workflow_node_jobs
             WHERE run_id = NEW.id AND status = 'failed' ORDER BY finished_at, id LIMIT 1;
        END IF;
        cause := format('child run %s %s: %s', NEW.id, NEW.status, coalesce(cause, NEW.error, 'no error recorded'));
        IF length(cause) > 2000 THEN  -- a deep chain: keep where it starts and the cause at its end
            cause := left(cause, 500) || ' ... ' || right(cause, 1400);
        END IF;
        UPDATE workflow_node_jobs
           SET status = 'failed', finished_at = now(), updated_at = now(), error = cause
         WHERE run_id = NEW.parent_run_id AND node_name = NEW.parent_node AND status = 'waiting';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER workflow_runs_child_ended
    AFTER UPDATE OF status ON workflow_runs FOR EACH ROW
    WHEN (NEW.parent_run_id IS NOT NULL
          AND NEW.status IN ('completed', 'failed', 'cancelled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION qw_child_run_ended();

-- A waiting node ended some other way (its run failed or was cancelled, an operator's SQL): the
-- child run it holds is cancelled with its not-started nodes; its own waiting nodes cascade the same way.
CREATE FUNCTION qw_parent_node_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    child_id bigint;
    reason text;
BEGIN
    reason := format('cancelled: its parent run %s node %s is %s', NEW.run_id, NEW.node_name, NEW.status);
    UPDATE workflow_runs
       SET status = 'cancelled', error = reason, finished_at = now(), updated_at = now()
     WHERE parent_run_id = NEW.run_id AND parent_node = NEW.node_name
       AND status NOT IN ('completed', 'failed', 'cancelled')
    RETURNING id INTO child_id;
    IF child_id IS NOT NULL THEN
        UPDATE workflow_node_jobs
           SET status = 'cancelled', error = reason, finished_at = now(), lease_expires_at = NULL, updated_at = now()
         WHERE run_id = child_id AND status IN ('scheduled', 'queued', 'awaiting_input', 'waiting');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER workflow_node_jobs_parent_node_ended
    AFTER UPDATE OF status ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.run_id IS NOT NULL AND OLD.status = 'waiting'
          AND NEW.status IN ('completed', 'failed', 'cancelled', 'skipped'))
    EXECUTE FUNCTION qw_parent_node_ended();
