DROP TRIGGER IF EXISTS workflow_node_jobs_cancelled_run_guard_upd ON workflow_node_jobs;
DROP TRIGGER IF EXISTS workflow_node_jobs_cancelled_run_guard_ins ON workflow_node_jobs;
DROP FUNCTION IF EXISTS qw_cancelled_run_guard();
DROP TRIGGER IF EXISTS workflow_input_submissions_notify ON workflow_input_submissions;
DROP FUNCTION IF EXISTS qw_notify_input_submission();
DROP TABLE IF EXISTS workflow_input_submissions;
