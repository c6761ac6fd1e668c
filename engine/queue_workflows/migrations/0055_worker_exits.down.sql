DROP INDEX IF EXISTS workflow_node_jobs_waiting_idx;
DROP TABLE IF EXISTS qw_worker_exits;
