DROP TRIGGER IF EXISTS workflow_node_jobs_schedule_future ON workflow_node_jobs;
DROP TRIGGER IF EXISTS ingest_jobs_schedule_future ON ingest_jobs;
DROP FUNCTION IF EXISTS qw_schedule_future_job();
DROP INDEX IF EXISTS workflow_node_jobs_scheduled_idx;
DROP INDEX IF EXISTS ingest_jobs_scheduled_idx;
UPDATE workflow_node_jobs SET status = 'queued' WHERE status = 'scheduled';
UPDATE ingest_jobs SET status = 'queued' WHERE status = 'scheduled';
ALTER TABLE workflow_node_jobs DROP CONSTRAINT workflow_node_jobs_status_check;
ALTER TABLE workflow_node_jobs ADD CONSTRAINT workflow_node_jobs_status_check
    CHECK (status IN ('queued', 'running', 'awaiting_input', 'completed', 'failed', 'cancelled'));
ALTER TABLE ingest_jobs DROP CONSTRAINT ingest_jobs_status_check;
ALTER TABLE ingest_jobs ADD CONSTRAINT ingest_jobs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled'));
