DROP TRIGGER IF EXISTS workflow_node_jobs_ready_on_insert ON workflow_node_jobs;
DROP TRIGGER IF EXISTS workflow_node_jobs_ready_on_requeue ON workflow_node_jobs;
DROP TRIGGER IF EXISTS ingest_jobs_ready_on_insert ON ingest_jobs;
DROP TRIGGER IF EXISTS ingest_jobs_ready_on_requeue ON ingest_jobs;
DROP FUNCTION IF EXISTS qw_notify_job_ready();
