-- Durable timers and events for DAG nodes: a `sleep` node waits ('waiting', migration 0035)
-- until its `wake_at`; a `wait_event` node waits for a row of workflow_events with its
-- `event_key`, or until `wake_at` (its timeout). The deadlines live here, so a sleep outlives
-- every process; the orchestrator's timekeeper (dag/timekeeper.py) fires them. Anyone may send
-- an event with a plain INSERT into workflow_events: a trigger delivers it in the sender's
-- transaction, and the timekeeper hands an event kept for a node not reached yet to that node.
ALTER TABLE workflow_node_jobs ADD COLUMN wake_at timestamptz, ADD COLUMN event_key text;
CREATE INDEX workflow_node_jobs_wake_idx ON workflow_node_jobs (wake_at)
    WHERE status = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX workflow_node_jobs_event_key_idx ON workflow_node_jobs (event_key)
    WHERE event_key IS NOT NULL;

CREATE TABLE workflow_events (
    id           bigserial PRIMARY KEY,
    event_key    text NOT NULL,
    run_id       bigint REFERENCES workflow_runs (id) ON DELETE CASCADE,  -- NULL: any run waiting on the key
    payload      jsonb NOT NULL,
    -- set by the insert trigger, whatever the INSERT says: applied, rejected, or kept (no node waits on its key yet)
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'kept', 'applied', 'rejected')),
    error        text,
    applied_to   bigint[],  -- the node jobs it completed
    requested_by text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz
);
CREATE INDEX workflow_events_kept_idx ON workflow_events (event_key, id) WHERE status = 'kept';
CREATE INDEX workflow_events_run_idx ON workflow_events (run_id);

CREATE FUNCTION qw_notify_timer() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('qw_timer', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

-- Delivery in the sender's transaction, as the outbox is written in the writer's (0013): the
-- event completes the nodes waiting on its key (its run's, or any run's without one) and is
-- 'applied'; a concurrent second event waits for the first's row lock and then finds the node
-- taken, so the first to commit wins. Refused ('rejected', with the reason): a payload that is
-- not a JSON object, an empty key, a run that is not running, a (run, key) whose node already
-- took an event or timed out. Otherwise it is 'kept' for a node that will wait on the key. A
-- waiter that has a kept event ahead of this one is left to the timekeeper, which gives it the
-- oldest: the first event wins there too.
CREATE FUNCTION qw_deliver_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    run_status text;  -- every column below is the trigger's to set, whatever the INSERT gave
    taken bigint[];
    finished record;
BEGIN
    NEW.error := NULL;
    NEW.applied_to := NULL;
    IF jsonb_typeof(NEW.payload) IS DISTINCT FROM 'object' THEN
        NEW.error := format('an event payload must be a JSON object (it becomes the node''s output), not %s', jsonb_typeof(NEW.payload));
    ELSIF NEW.event_key = '' THEN
        NEW.error := 'an event key must not be empty';
    ELSIF NEW.run_id IS NOT NULL THEN
        SELECT status INTO run_status FROM workflow_runs WHERE id = NEW.run_id;
        IF run_status IS DISTINCT FROM 'running' THEN
            NEW.error := format('run %s is %s: it takes no events', NEW.run_id, coalesce(run_status, 'missing'));
        END IF;
    END IF;
    IF NEW.error IS NULL THEN
        WITH target AS (  -- locked in id order, as every writer of several waiting nodes does: no deadlock
            SELECT n.id FROM workflow_node_jobs n
             WHERE n.status = 'waiting' AND n.event_key = NEW.event_key AND (NEW.run_id IS NULL OR n.run_id = NEW.run_id)
               AND NOT EXISTS (SELECT 1 FROM workflow_events k
                                WHERE k.status = 'kept' AND k.event_key = n.event_key
                                  AND (k.run_id IS NULL OR k.run_id = n.run_id))
             ORDER BY n.id
               FOR UPDATE OF n
        ), done AS (
            UPDATE workflow_node_jobs n
               SET status = 'completed', context_delta = NEW.payload, error = NULL,
                   started_at = coalesce(n.started_at, n.created_at), finished_at = clock_timestamp(), updated_at = now()
              FROM target t
             WHERE n.id = t.id AND n.status = 'waiting'
            RETURNING n.id)
        SELECT array_agg(id ORDER BY id) INTO taken FROM done;
        IF taken IS NOT NULL THEN
            NEW.status := 'applied';
            NEW.applied_to := taken;
            NEW.processed_at := now();
            RETURN NEW;
        END IF;
        SELECT n.node_name, n.run_id, n.status INTO finished
          FROM workflow_node_jobs n JOIN workflow_runs r ON r.id = n.run_id AND r.status = 'running'
         WHERE n.event_key = NEW.event_key AND (NEW.run_id IS NULL OR n.run_id = NEW.run_id) AND n.status <> 'waiting'
         ORDER BY n.id LIMIT 1;
        IF FOUND THEN
            NEW.error := format('node %L of run %s waiting on key %L is already %s', finished.node_name, finished.run_id, NEW.event_key, finished.status);
        END IF;
    END IF;
    NEW.status := CASE WHEN NEW.error IS NULL THEN 'kept' ELSE 'rejected' END;
    NEW.processed_at := CASE WHEN NEW.error IS NULL THEN NULL ELSE now() END;
    RETURN NEW;
END
$$;

CREATE TRIGGER workflow_events_deliver
    BEFORE INSERT ON workflow_events FOR EACH ROW
    EXECUTE FUNCTION qw_deliver_event();

-- A kept event may have a waiter the delivery left to the timekeeper.
CREATE TRIGGER workflow_events_notify
    AFTER INSERT ON workflow_events FOR EACH ROW
    WHEN (NEW.status = 'kept')
    EXECUTE FUNCTION qw_notify_timer();

-- A new deadline may be nearer than the one the timekeeper sleeps towards, and a new waiter may
-- match an event sent before it was reached: either wakes it.
CREATE TRIGGER workflow_node_jobs_timer_notify_ins
    AFTER INSERT ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.status = 'waiting' AND (NEW.wake_at IS NOT NULL OR NEW.event_key IS NOT NULL))
    EXECUTE FUNCTION qw_notify_timer();

CREATE TRIGGER workflow_node_jobs_timer_notify_upd
    AFTER UPDATE OF status, wake_at, event_key ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.status = 'waiting' AND (NEW.wake_at IS NOT NULL OR NEW.event_key IS NOT NULL)
          AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.wake_at IS DISTINCT FROM NEW.wake_at
               OR OLD.event_key IS DISTINCT FROM NEW.event_key))
    EXECUTE FUNCTION qw_notify_timer();
