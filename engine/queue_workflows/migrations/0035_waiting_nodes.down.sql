UPDATE workflow_node_jobs SET status = 'cancelled', error = 'cancelled: migration 0035 rolled back', finished_at = now()
 WHERE status = 'waiting';
ALTER TABLE workflow_node_jobs DROP CONSTRAINT workflow_node_jobs_status_check;
ALTER TABLE workflow_node_jobs ADD CONSTRAINT workflow_node_jobs_status_check
    CHECK (status IN ('scheduled', 'queued', 'running', 'awaiting_input', 'completed', 'failed', 'cancelled', 'skipped'));
