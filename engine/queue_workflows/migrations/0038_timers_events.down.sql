DROP TRIGGER IF EXISTS workflow_node_jobs_timer_notify_upd ON workflow_node_jobs;
DROP TRIGGER IF EXISTS workflow_node_jobs_timer_notify_ins ON workflow_node_jobs;
DROP TRIGGER IF EXISTS workflow_events_notify ON workflow_events;
DROP TRIGGER IF EXISTS workflow_events_deliver ON workflow_events;
DROP FUNCTION IF EXISTS qw_deliver_event();
DROP FUNCTION IF EXISTS qw_notify_timer();
DROP TABLE IF EXISTS workflow_events;
-- A sleep or an event wait cannot outlive its columns: cancelled, like 0035's own down.
UPDATE workflow_node_jobs SET status = 'cancelled', error = 'cancelled: migration 0038 rolled back', finished_at = now()
 WHERE status = 'waiting' AND (wake_at IS NOT NULL OR event_key IS NOT NULL);
DROP INDEX IF EXISTS workflow_node_jobs_event_key_idx;
DROP INDEX IF EXISTS workflow_node_jobs_wake_idx;
ALTER TABLE workflow_node_jobs DROP COLUMN IF EXISTS event_key, DROP COLUMN IF EXISTS wake_at;
