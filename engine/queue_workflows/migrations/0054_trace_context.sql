-- Traces from enqueue to task (docs/tracing.md): the W3C trace context (`{"traceparent": ..., "tracestate": ...}`)
-- of the span that enqueued a job, so the worker's claim, model load and run spans join that trace on
-- any host. Null when the enqueuer was not tracing (the default). A DAG run keeps its own, which its
-- node rows and child runs copy when they are dispatched.
ALTER TABLE ingest_jobs ADD COLUMN trace_context jsonb;
ALTER TABLE workflow_node_jobs ADD COLUMN trace_context jsonb;
ALTER TABLE workflow_runs ADD COLUMN trace_context jsonb;
-- History keeps the hot tables' columns in their order (the mover inserts `RETURNING *`), and the
-- views' `*` was expanded when 0053 made them, so they take the new column too.
ALTER TABLE ingest_jobs_history ADD COLUMN trace_context jsonb;
ALTER TABLE workflow_node_jobs_history ADD COLUMN trace_context jsonb;
CREATE OR REPLACE VIEW ingest_jobs_all AS SELECT * FROM ingest_jobs UNION ALL SELECT * FROM ingest_jobs_history;
CREATE OR REPLACE VIEW workflow_node_jobs_all AS SELECT * FROM workflow_node_jobs UNION ALL SELECT * FROM workflow_node_jobs_history;
