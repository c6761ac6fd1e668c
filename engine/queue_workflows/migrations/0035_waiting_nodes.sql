-- A node the orchestrator holds rather than a worker: a map's parent while its items run, a
-- sleep until its deadline, a wait for an event, a child workflow until the child ends. Claims
-- take only 'queued' and the reclaim sweep only 'running', so no worker ever sees a 'waiting' row.
ALTER TABLE workflow_node_jobs DROP CONSTRAINT workflow_node_jobs_status_check;
ALTER TABLE workflow_node_jobs ADD CONSTRAINT workflow_node_jobs_status_check
    CHECK (status IN ('scheduled', 'queued', 'running', 'awaiting_input', 'waiting', 'completed', 'failed', 'cancelled', 'skipped'));
