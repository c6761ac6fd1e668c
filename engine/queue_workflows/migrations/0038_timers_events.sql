-- Durable timers and events for DAG nodes: a `sleep` node waits ('waiting', migration 0035)
-- until its `wake_at`; a `wait_event` node waits for a row of workflow_events with its
-- `event_key`, or until `wake_at` (its timeout). The deadlines live here, so a sleep outlives
-- every process; the orchestrator's timekeeper (dag/timekeeper.py) fires them. Anyone may send
-- an event with a plain INSERT into workflow_events; its trigger wakes the timekeeper.
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
    -- pending: not looked at yet; kept: no node waits on its key yet; applied / rejected: final
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'kept', 'applied', 'rejected')),
    error        text,
    applied_to   bigint[],  -- the node jobs it completed
    requested_by text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz
);
CREATE INDEX workflow_events_pending_idx ON workflow_events (id) WHERE status = 'pending';
CREATE INDEX workflow_events_open_key_idx ON workflow_events (event_key, id) WHERE status IN ('pending', 'kept');
CREATE INDEX workflow_events_run_idx ON workflow_events (run_id);

CREATE FUNCTION qw_notify_timer() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('qw_timer', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER workflow_events_notify
    AFTER INSERT ON workflow_events FOR EACH ROW
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
