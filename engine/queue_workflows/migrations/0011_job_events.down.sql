DROP TRIGGER IF EXISTS ingest_jobs_record_event ON ingest_jobs;
DROP TRIGGER IF EXISTS workflow_node_jobs_record_event ON workflow_node_jobs;
DROP FUNCTION IF EXISTS qw_record_job_event();
DROP TABLE IF EXISTS job_events;
