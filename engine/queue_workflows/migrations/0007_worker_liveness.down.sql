DROP TRIGGER IF EXISTS workflow_node_jobs_revoked ON workflow_node_jobs;
DROP TRIGGER IF EXISTS ingest_jobs_revoked ON ingest_jobs;
DROP FUNCTION IF EXISTS qw_notify_job_revoked();
DROP VIEW IF EXISTS qw_worker_sessions;
