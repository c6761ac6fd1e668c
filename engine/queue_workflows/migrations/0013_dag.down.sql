DROP TRIGGER IF EXISTS workflow_node_jobs_dispatch_event ON workflow_node_jobs;
DROP FUNCTION IF EXISTS qw_record_dispatch_event();
DROP TABLE IF EXISTS workflow_dispatch_events;
ALTER TABLE workflow_node_jobs DROP CONSTRAINT IF EXISTS workflow_node_jobs_run_node_key;
ALTER TABLE workflow_node_jobs DROP COLUMN IF EXISTS input_refs, DROP COLUMN IF EXISTS budget_seconds;
UPDATE workflow_node_jobs SET status = 'cancelled' WHERE status = 'skipped';
ALTER TABLE workflow_node_jobs DROP CONSTRAINT workflow_node_jobs_status_check;
ALTER TABLE workflow_node_jobs ADD CONSTRAINT workflow_node_jobs_status_check
    CHECK (status IN ('scheduled', 'queued', 'running', 'awaiting_input', 'completed', 'failed', 'cancelled'));
ALTER TABLE workflow_runs DROP COLUMN IF EXISTS definition, DROP COLUMN IF EXISTS priority, DROP COLUMN IF EXISTS poisoned_at;
