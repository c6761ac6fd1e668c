DELETE FROM worker_heartbeats WHERE state IN ('parked', 'throttled');
ALTER TABLE worker_heartbeats DROP CONSTRAINT worker_heartbeats_state_check;
ALTER TABLE worker_heartbeats ADD CONSTRAINT worker_heartbeats_state_check
    CHECK (state IN ('idle', 'busy', 'stopping'));
ALTER TABLE worker_heartbeats DROP COLUMN IF EXISTS last_flagged_dead_at;
ALTER TABLE ingest_jobs DROP COLUMN IF EXISTS watchdog_trips;
ALTER TABLE workflow_node_jobs DROP COLUMN IF EXISTS watchdog_trips;
DROP TRIGGER IF EXISTS worker_controls_notify ON worker_controls;
DROP FUNCTION IF EXISTS qw_notify_worker_control();
DROP TABLE IF EXISTS worker_controls;
