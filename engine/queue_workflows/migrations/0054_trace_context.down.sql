-- A view cannot lose a column in place: the views go, the columns go, and the views come back as 0053 made them.
DROP VIEW node_events;
DROP VIEW workflow_node_jobs_all;
DROP VIEW ingest_jobs_all;
ALTER TABLE workflow_node_jobs_history DROP COLUMN trace_context;
ALTER TABLE ingest_jobs_history DROP COLUMN trace_context;
ALTER TABLE workflow_runs DROP COLUMN trace_context;
ALTER TABLE workflow_node_jobs DROP COLUMN trace_context;
ALTER TABLE ingest_jobs DROP COLUMN trace_context;
CREATE VIEW ingest_jobs_all AS SELECT * FROM ingest_jobs UNION ALL SELECT * FROM ingest_jobs_history;
CREATE VIEW workflow_node_jobs_all AS SELECT * FROM workflow_node_jobs UNION ALL SELECT * FROM workflow_node_jobs_history;
GRANT SELECT ON ingest_jobs_all, workflow_node_jobs_all TO qw_worker, qw_orchestrator, qw_scheduler, qw_dashboard, qw_metrics;
CREATE VIEW node_events AS
 SELECT e.id, j.run_id, j.node_name, e.job_id, e.from_status, e.to_status, e.attempts, e.worker_id, e.error, e.at
   FROM job_events e
   JOIN workflow_node_jobs_all j ON e.job_table = 'workflow_node_jobs' AND j.id = e.job_id
  WHERE j.run_id IS NOT NULL;
