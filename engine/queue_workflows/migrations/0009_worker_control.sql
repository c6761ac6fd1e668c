-- Operator control: one row per (host, queue); a missing row means ON. Any client sharing
-- the database may write it; the trigger wakes the worker it names.
CREATE TABLE worker_controls (
    host_label    text NOT NULL,
    queue         text NOT NULL,
    desired_state text NOT NULL DEFAULT 'on' CHECK (desired_state IN ('on', 'off')),
    stop_policy   text NOT NULL DEFAULT 'hard' CHECK (stop_policy IN ('hard', 'park')),
    requested_by  text,
    reason        text,
    -- Set when a gpu worker exits 75/76/79: its next process probes the device before claiming.
    device_check_pending boolean NOT NULL DEFAULT false,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (host_label, queue)
);

CREATE FUNCTION qw_notify_worker_control() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    target record;
BEGIN
    IF TG_OP = 'DELETE' THEN target := OLD; ELSE target := NEW; END IF;
    PERFORM pg_notify('qw_worker_control', target.host_label || ':' || target.queue);
    RETURN NULL;
END
$$;

CREATE TRIGGER worker_controls_notify
    AFTER INSERT OR UPDATE OR DELETE ON worker_controls FOR EACH ROW
    EXECUTE FUNCTION qw_notify_worker_control();

-- Watchdog trips are counted apart from attempts: a job a watchdog stopped is requeued
-- until the cap, then failed.
ALTER TABLE workflow_node_jobs ADD COLUMN watchdog_trips integer NOT NULL DEFAULT 0;
ALTER TABLE ingest_jobs ADD COLUMN watchdog_trips integer NOT NULL DEFAULT 0;

-- The dead-worker detector's flag, and the states a worker reports.
ALTER TABLE worker_heartbeats ADD COLUMN last_flagged_dead_at timestamptz;
ALTER TABLE worker_heartbeats DROP CONSTRAINT worker_heartbeats_state_check;
ALTER TABLE worker_heartbeats ADD CONSTRAINT worker_heartbeats_state_check
    CHECK (state IN ('idle', 'busy', 'stopping', 'parked', 'throttled'));
