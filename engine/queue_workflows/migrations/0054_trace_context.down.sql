ALTER TABLE workflow_runs DROP COLUMN trace_context;
ALTER TABLE workflow_node_jobs DROP COLUMN trace_context;
ALTER TABLE ingest_jobs DROP COLUMN trace_context;
