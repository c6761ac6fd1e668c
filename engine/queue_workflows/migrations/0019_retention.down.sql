DROP INDEX IF EXISTS workflow_dispatch_events_processed_idx;
DROP INDEX IF EXISTS workflow_runs_finished_idx;
DROP INDEX IF EXISTS workflow_node_jobs_finished_idx;
DROP INDEX IF EXISTS ingest_jobs_finished_idx;
DROP VIEW IF EXISTS node_events;
DROP TRIGGER IF EXISTS workflow_node_jobs_record_marker ON workflow_node_jobs;
