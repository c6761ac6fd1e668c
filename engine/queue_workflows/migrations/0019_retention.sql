-- Node events: a skipped or born-cancelled node is inserted, never updated, so the event
-- trigger of migration 0011 never saw it; this one logs those markers too.
CREATE TRIGGER workflow_node_jobs_record_marker
    AFTER INSERT ON workflow_node_jobs FOR EACH ROW
    WHEN (NEW.status IN ('skipped', 'cancelled'))
    EXECUTE FUNCTION qw_record_job_event();

-- The event log of DAG nodes, by run and node name.
CREATE VIEW node_events AS
SELECT e.id, j.run_id, j.node_name, e.job_id, e.from_status, e.to_status, e.attempts, e.worker_id, e.error, e.at
  FROM job_events e
  JOIN workflow_node_jobs j ON e.job_table = 'workflow_node_jobs' AND j.id = e.job_id
 WHERE j.run_id IS NOT NULL;

-- Retention (queue_workflows.retention) deletes finished rows oldest first, in small batches:
-- these partial indexes find them without scanning the live rows.
CREATE INDEX ingest_jobs_finished_idx ON ingest_jobs (finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX workflow_node_jobs_finished_idx ON workflow_node_jobs (finished_at)
    WHERE run_id IS NULL AND status IN ('completed', 'failed', 'cancelled');
CREATE INDEX workflow_runs_finished_idx ON workflow_runs (finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX workflow_dispatch_events_processed_idx ON workflow_dispatch_events (processed_at)
    WHERE processed_at IS NOT NULL;
